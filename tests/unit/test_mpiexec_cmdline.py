"""Pure tests of the mpiexec command line builder."""
from __future__ import annotations

import pytest

from planaria.comm import mca
from planaria.launch.mpiexec import (
    SKIP_FABRIC_PROBE,
    LaunchError,
    allocation_hosts,
    build_mpiexec_cmd,
    expand_nodelist,
    parse_hosts,
    parse_tasks_per_node,
)

CMD = ["python", "app.py", "--steps", "3"]
PENV = {"PLANARIA_JOB_DIR": "/j", "PLANARIA_CONTROL_URI": "ipc:///j/control.sock"}


@pytest.fixture(autouse=True)
def no_system_mca_file(tmp_path, monkeypatch):
    """The system's MCA parameter file is a test file here, not this machine's /etc/openmpi one."""
    path = tmp_path / "system-mca-params.conf"
    monkeypatch.setattr(mca, "SYSTEM_PARAM_FILES", (path,))
    return path


def build(**kw):
    kw.setdefault("environ", {"PATH": "/usr/bin"})
    kw.setdefault("euid", 1000)
    kw.setdefault("cpu_count", 4)
    kw.setdefault("mpiexec", "/opt/bin/mpiexec")
    kw.setdefault("use_scontrol", False)
    return build_mpiexec_cmd(CMD, kw.pop("nprocs", 2), **kw)


def opt_value(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_basic_ulfm_line():
    argv, env = build(planaria_env=PENV)
    assert argv[0] == "/opt/bin/mpiexec"
    assert opt_value(argv, "--with-ft") == "ulfm"
    assert opt_value(argv, "-n") == "2"
    assert opt_value(argv, "--output") == "tag"
    assert "--oversubscribe" not in argv
    assert argv[-len(CMD):] == CMD
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in env
    assert env["PLANARIA_JOB_DIR"] == "/j"
    exported = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert exported == ["PLANARIA_CONTROL_URI", "PLANARIA_JOB_DIR"]


def test_sim_backend_has_no_ft_and_auto_is_ulfm():
    argv, _ = build(backend="sim")
    assert "--with-ft" not in argv
    argv, _ = build(backend="auto")
    assert opt_value(argv, "--with-ft") == "ulfm"
    with pytest.raises(LaunchError):
        build(backend="bogus")


def test_root_env_and_oversubscribe():
    argv, env = build(euid=0, nprocs=5)
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    assert env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert "--oversubscribe" in argv
    argv, _ = build(nprocs=4)
    assert "--oversubscribe" not in argv


def test_hosts_option():
    argv, _ = build(hosts="h1:2,h2:2", nprocs=4)
    assert opt_value(argv, "--host") == "h1:2,h2:2"
    assert "--oversubscribe" not in argv
    argv, _ = build(hosts="h1,h2", nprocs=3)
    assert opt_value(argv, "--host") == "h1:1,h2:1"
    assert "--oversubscribe" in argv
    assert parse_hosts("a:3, b") == [("a", 3), ("b", 1)]
    for bad in ("a:0", "a:x", ",", ":2", "a:\u0663", "a:\uff12"):   # ASCII digits only
        with pytest.raises(LaunchError):
            parse_hosts(bad)


def test_prefix_agent_and_passthrough():
    argv, _ = build(launch_prefix=["ip", "netns", "exec", "h1"], ssh_agent="/x/agent.sh",
                    mpiexec_args=["--mca", "btl", "self,tcp"])
    assert argv[:5] == ["ip", "netns", "exec", "h1", "/opt/bin/mpiexec"]
    i = argv.index("--prtemca")
    assert argv[i:i + 3] == ["--prtemca", "plm_ssh_agent", "/x/agent.sh"]
    j = argv.index("--mca")
    assert argv[j:j + 3] == ["--mca", "btl", "self,tcp"]
    assert j < argv.index("app.py")


def test_rank_prefix_goes_right_before_the_command():
    argv, _ = build(rank_prefix=["/py", "-S", "-I", "/x/rankfate.py"], mpiexec_args=["--mca", "btl", "tcp"])
    assert argv[-8:] == ["/py", "-S", "-I", "/x/rankfate.py", *CMD]
    assert argv.index("--mca") < argv.index("/py")
    assert build()[0][-4:] == CMD


def test_hosts_on_this_machine_skip_the_fabric_probe_too():
    assert not skips_fabric_probe(build(hosts="h1:2,h2:2")[0])
    assert skips_fabric_probe(build(hosts="h1:2,h2:2", one_machine=True)[0])
    argv, _ = build(hosts="h1:2,h2:2", one_machine=True, mpiexec_args=["--mca", "btl", "self,tcp"])
    assert not skips_fabric_probe(argv)


def skips_fabric_probe(argv: list[str]) -> bool:
    k = len(SKIP_FABRIC_PROBE)
    hits = [i for i in range(len(argv) - k + 1) if tuple(argv[i:i + k]) == SKIP_FABRIC_PROBE]
    return bool(hits) and hits[0] < argv.index("app.py")


def test_one_host_job_skips_the_fabric_probe_unless_transports_are_chosen(tmp_path, no_system_mca_file):
    assert skips_fabric_probe(build()[0])
    assert not skips_fabric_probe(build(hosts="h1:2,h2:2", nprocs=4)[0])
    slurm = {"SLURM_JOB_NODELIST": "c1", "SLURM_TASKS_PER_NODE": "2"}
    assert not skips_fabric_probe(build(environ=slurm)[0])
    assert not skips_fabric_probe(build(environ={"OMPI_MCA_btl": "self,sm"})[0])
    assert not skips_fabric_probe(build(environ={"OMPI_MCA_mca_base_param_files": "/x.conf"})[0])
    argv, _ = build(mpiexec_args=["--mca", "btl", "self,sm"])
    assert argv.count("--mca") == 1 and opt_value(argv, "--mca") == "btl"
    assert not skips_fabric_probe(build(mpiexec_args=["--tune", "/x.conf"])[0])
    assert skips_fabric_probe(build(mpiexec_args=["--mca", "pml", "ob1"])[0])
    # MCA parameter files: the user's, and the one of the Open MPI installation
    (tmp_path / ".openmpi").mkdir()
    user_conf = tmp_path / ".openmpi" / "mca-params.conf"
    user_conf.write_text("# btl = self,sm\nbtl_tcp_if_include = lo\n")
    assert skips_fabric_probe(build(environ={"HOME": str(tmp_path)})[0])
    user_conf.write_text("  btl = self,sm\n")
    assert not skips_fabric_probe(build(environ={"HOME": str(tmp_path)})[0])
    (tmp_path / "bin").mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "openmpi-mca-params.conf").write_text("btl=^tcp\n")
    assert not skips_fabric_probe(build(mpiexec=str(tmp_path / "bin" / "mpiexec"))[0])
    no_system_mca_file.write_text("btl = self,sm,tcp\n")       # and the system's
    assert not skips_fabric_probe(build()[0])


TICK = "OMPI_MCA_mpi_event_tick_rate"


def test_a_ulfm_job_looks_at_open_mpi_s_events_every_ms_unless_the_user_chose(tmp_path, no_system_mca_file):
    assert build()[1][TICK] == str(mca.EVENT_TICK_US) == "1000"
    assert TICK not in build(backend="sim")[1]
    assert build(environ={TICK: "50"})[1][TICK] == "50"          # the user's value, untouched
    assert TICK not in build(mpiexec_args=["--mca", "mpi_event_tick_rate", "50"])[1]
    assert TICK not in build(mpiexec_args=["--tune", "/x.conf"])[1]
    assert TICK not in build(environ={"OMPI_MCA_mca_base_param_files": "/x.conf"})[1]
    assert TICK in build(mpiexec_args=["--mca", "btl", "self,sm"])[1]      # another parameter
    (tmp_path / ".openmpi").mkdir()
    (tmp_path / ".openmpi" / "mca-params.conf").write_text("mpi_event_tick_rate = 200\n")
    assert TICK not in build(environ={"HOME": str(tmp_path)})[1]
    no_system_mca_file.write_text("# mpi_event_tick_rate = 200\n")
    assert TICK in build()[1]
    no_system_mca_file.write_text("mpi_event_tick_rate=200\n")
    assert TICK not in build()[1]


@pytest.mark.parametrize(("env", "mpi_started", "expected"), [
    ({"OMPI_MCA_mpi_ft_enable": "1"}, False, "1000"),             # a bare mpiexec --with-ft ulfm
    ({"OMPI_MCA_mpi_ft_enable": "1", TICK: "7"}, False, "7"),     # planaria run's, or the user's
    ({"OMPI_MCA_mpi_ft_enable": "1"}, True, None),                # too late: MPI read its parameters
    ({}, False, None),                                            # not a ULFM job
    ({"OMPI_MCA_mpi_ft_enable": "0"}, False, None),
])
def test_a_rank_sets_the_tick_before_mpi_starts(monkeypatch, env, mpi_started, expected):
    monkeypatch.setattr(mca.os, "environ", dict(env))
    monkeypatch.setitem(mca.sys.modules, "mpi4py.MPI", object()) if mpi_started else \
        monkeypatch.delitem(mca.sys.modules, "mpi4py.MPI", raising=False)
    mca.set_rank_defaults()
    assert mca.os.environ.get(TICK) == expected


def test_errors():
    with pytest.raises(LaunchError):
        build(nprocs=0)
    with pytest.raises(LaunchError):
        build_mpiexec_cmd([], 2, environ={}, mpiexec="/m")


def test_mpiexec_missing(monkeypatch, tmp_path):
    monkeypatch.setattr("planaria.launch.mpiexec.sys.executable", str(tmp_path / "python"))
    with pytest.raises(LaunchError, match="mpiexec not found"):
        build_mpiexec_cmd(CMD, 2, environ={"PATH": str(tmp_path)}, euid=1000)


def test_slurm_nodelist_expansion():
    assert expand_nodelist("n[01-03,07],gpu1", use_scontrol=False) == ["n01", "n02", "n03", "n07", "gpu1"]
    assert expand_nodelist("single", use_scontrol=False) == ["single"]
    assert expand_nodelist("r[1-2]-n[1-2]", use_scontrol=False) == ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
    assert parse_tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_slurm_allocation_used_without_hosts():
    environ = {"SLURM_JOB_NODELIST": "c[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}
    argv, _ = build(environ=environ, nprocs=4, cpu_count=1)
    assert opt_value(argv, "--host") == "c1:2,c2:2"
    assert "--oversubscribe" not in argv
    argv, _ = build(environ=environ, nprocs=4, hosts="x:4")
    assert opt_value(argv, "--host") == "x:4"


def test_pbs_nodefile(tmp_path):
    nf = tmp_path / "nodes"
    nf.write_text("a\na\nb\n")
    assert allocation_hosts({"PBS_NODEFILE": str(nf)}) == [("a", 2), ("b", 1)]
    argv, _ = build(environ={"PBS_NODEFILE": str(nf)}, nprocs=4)
    assert opt_value(argv, "--host") == "a:2,b:1"
    assert "--oversubscribe" in argv
    assert allocation_hosts({}) is None


@pytest.mark.parametrize("line, words, dead", [
    ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 State=IDLE ThreadsPerCore=1", {"IDLE"}, False),
    ("NodeName=n2 State=IDLE* ThreadsPerCore=1", {"IDLE", "NOT_RESPONDING"}, True),
    ("NodeName=n2 State=MIXED+DRAIN ThreadsPerCore=1", {"MIXED", "DRAIN"}, True),
    ("NodeName=n2 State=DOWN+NOT_RESPONDING", {"DOWN", "NOT_RESPONDING"}, True),
    ("NodeName=n1 State=ALLOCATED", {"ALLOCATED"}, False),
    ("Node n9 not found", None, None),
])
def test_slurm_node_states_are_read_from_scontrols_line(line: str, words: set[str] | None, dead: bool | None) -> None:
    from planaria.launch.slurm import DEAD_STATES, state_words
    got = state_words(line)
    assert got == words
    if got is not None:
        assert bool(got & DEAD_STATES) is dead
