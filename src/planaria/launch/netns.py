"""Two test "hosts" on one machine: network namespaces joined by a veth pair.

Each host is a network namespace with its own loopback, one end of a veth
pair carrying an address from a private subnet, and its own hostname (a UTS
namespace entered per command).  Open MPI's ssh launch agent is replaced by a
generated script that runs the remote command inside the target namespace, so
one ``mpiexec`` started on the first host spans both hosts exactly as it would
span two machines.

Name resolution uses ``/etc/netns/NAME/hosts``: ``ip netns exec`` bind-mounts
the files of that directory over ``/etc``, so inside the namespaces both host
names resolve to their veth addresses while the machine's own ``/etc/hosts``
stays untouched.

Typical use::

    from planaria.launch.netns import create_hosts
    with create_hosts(("pl-h1", "pl-h2")) as hs:
        argv = [*hs.launch_prefix, "mpiexec", "--with-ft", "ulfm",
                *hs.mpiexec_args(2, 2), "-n", "4", "python", "app.py"]
        subprocess.run(argv, env=..., timeout=120)

Everything needs root and iproute2; :func:`available` tells whether it can
work here.
"""
from __future__ import annotations

import glob
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from planaria.launch import shmfiles
from planaria.util.procstat import pid_alive
from planaria.errors import PlanariaError

__all__ = [
    "HostSet",
    "HostSetError",
    "available",
    "cleanup_stale",
    "create_hosts",
    "list_namespaces",
    "load_hosts",
    "remove_host",
]

DEFAULT_NAMES = ("pl-h1", "pl-h2")
DEFAULT_SUBNET = "10.213.7.0/24"
NETNS_ETC = Path("/etc/netns")
AGENT_NAME = "planaria-netns-agent.sh"
STATE_NAME = "hostset.json"

_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")
_CMD_TIMEOUT = 15.0
_HOSTS_MARK = "# planaria test host (planaria.launch.netns); removed on destroy\n"


class HostSetError(PlanariaError, RuntimeError):
    """Creating, checking or destroying the test hosts failed."""


# --------------------------------------------------------------------------- helpers


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"):
        p = Path(d, name)
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def _run(argv: list[str], *, timeout: float = _CMD_TIMEOUT, check: bool = True,
         input: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
    except subprocess.TimeoutExpired as exc:
        raise HostSetError(f"timed out after {timeout:g}s: {' '.join(argv)}") from exc
    except OSError as exc:
        raise HostSetError(f"cannot run {argv[0]}: {exc}") from exc
    if check and cp.returncode != 0:
        msg = (cp.stderr or cp.stdout).strip()
        raise HostSetError(f"{' '.join(argv)} failed (exit {cp.returncode}): {msg}")
    return cp


def list_namespaces() -> list[str]:
    """Names of the existing network namespaces (``ip netns list``)."""
    ip = _tool("ip")
    if ip is None:
        return []
    cp = _run([ip, "netns", "list"], check=False)
    if cp.returncode != 0:
        return []
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]


def available() -> tuple[bool, str]:
    """Whether network namespaces can be created here, and if not why.

    Checks: Linux, root, ``ip`` and ``unshare`` present, and that a probe
    namespace can actually be created, entered with a new UTS namespace, and
    deleted (containers often refuse with EPERM).
    """
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return False, "creating network namespaces needs root"
    ip, unshare = _tool("ip"), _tool("unshare")
    if ip is None:
        return False, "iproute2 'ip' command not found"
    if unshare is None:
        return False, "'unshare' command (util-linux) not found"
    probe = f"pl-probe-{os.getpid()}"
    try:
        cp = _run([ip, "netns", "add", probe], check=False)
        if cp.returncode != 0:
            return False, f"'ip netns add' refused: {(cp.stderr or cp.stdout).strip()}"
        cp = _run([ip, "netns", "exec", probe, unshare, "--uts", "sh", "-c",
                   f"hostname {probe} && hostname"], check=False)
        if cp.returncode != 0 or cp.stdout.strip() != probe:
            return False, f"cannot enter a namespace with its own hostname: {(cp.stderr or cp.stdout).strip()}"
    except HostSetError as exc:
        return False, str(exc)
    finally:
        _run([ip, "netns", "delete", probe], check=False)
    return True, "ok"


# --------------------------------------------------------------------------- agent script

_AGENT_TEMPLATE = """\
#!/bin/sh
# Replacement for ssh as Open MPI's launch agent (plm_ssh_agent).
# Usage: {agent_name} [ssh options] HOST COMMAND...
# Runs COMMAND with /bin/sh inside the network namespace of HOST, with
# HOST as hostname (own UTS namespace), like ssh to a separate machine.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i|-F|-E|-J) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 1 ]; then
  echo "usage: $0 [ssh options] HOST COMMAND..." >&2
  exit 255
fi
target="$1"; shift
case "$target" in
{cases}
  *) echo "$0: unknown host '$target' (known: {known})" >&2; exit 255 ;;
esac
if [ $# -eq 0 ]; then
  set -- exec /bin/sh
fi
exec {ip} netns exec "$ns" {unshare} --uts /bin/sh -c \\
  'hostname "$1" || exit 255; shift; PATH="{bindir}:$PATH"; export PATH; eval "$*"' \\
  sh "$ns" "$@"
"""


def _shq(s: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./:+=@%-]+", s):
        return s
    return "'" + s.replace("'", "'\\''") + "'"


def render_agent(hosts: dict[str, str], *, ip: str, unshare: str, bindir: str) -> str:
    """Text of the ssh-replacement script for ``{name: address}``."""
    cases = []
    for name, addr in hosts.items():
        cases.append(f"  {name}|{addr}) ns={name} ;;")
    return _AGENT_TEMPLATE.format(
        agent_name=AGENT_NAME,
        cases="\n".join(cases),
        known=" ".join(hosts),
        ip=_shq(ip),
        unshare=_shq(unshare),
        bindir=bindir.replace('"', '\\"'),
    )


# --------------------------------------------------------------------------- host set


@dataclass
class HostSet:
    """Two namespaces ("hosts") joined by a veth pair; see module docstring.

    Attributes:
        names: the two host names (= namespace names = hostnames inside).
        subnet: the private subnet on the veth link, e.g. ``"10.213.7.0/24"``.
        addresses: ``{name: address}`` on the veth link.
        veth: the two interface names (first in ``names[0]``).
        workdir: directory holding the agent script and the state file.
        agent_path: executable ssh-replacement script (``plm_ssh_agent``).
        bindir: directory put first in PATH on the remote host (``prted``).
        launch_prefix: argv words that run a command on the first host
            (its namespace, its hostname); prepend them to ``mpiexec ...``.
    """

    names: tuple[str, str]
    subnet: str
    addresses: dict[str, str]
    veth: tuple[str, str]
    workdir: Path
    agent_path: Path
    bindir: str
    ip: str
    unshare: str
    launch_prefix: list[str] = field(default_factory=list)
    destroyed: bool = False

    # ---- running commands on a host

    def exec_prefix(self, name: str | None = None) -> list[str]:
        """argv words running a command inside host ``name`` (default: first)."""
        name = self.names[0] if name is None else name
        if name not in self.names:
            raise HostSetError(f"unknown host {name!r}; hosts are {', '.join(self.names)}")
        return [self.ip, "netns", "exec", name, self.unshare, "--uts", "/bin/sh", "-c",
                'hostname "$0" || exit 255; exec "$@"', name]

    def run(self, name: str, argv: list[str], *, timeout: float = _CMD_TIMEOUT,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on host ``name`` and capture its output."""
        return _run([*self.exec_prefix(name), *argv], timeout=timeout, check=check)

    # ---- Open MPI

    def mpiexec_args(self, *slots: int) -> list[str]:
        """Extra ``mpiexec`` arguments for a job over both hosts.

        ``slots`` gives the ranks per host (default 2 each; one number means
        that many on every host).  Ranks fill the first host, then the second.
        Includes: the launch agent, ``--host``, slot mapping without core
        binding (oversubscription allowed), TCP restricted to the veth subnet
        for both MPI (btl) and the runtime (oob), ``coll ^han`` (the
        hierarchical collectives crash in ``Allreduce`` across nodes with this
        Open MPI build), and ``mpi_yield_when_idle``: each host counts only its
        own slots, so Open MPI does not see that all of them share this
        machine's cores; ranks that busy-poll without yielding then make every
        message wait for a scheduler tick (measured: 4 ms one-way instead of
        9-120 us, with ULFM).
        """
        if not slots:
            slots = (2,)
        if len(slots) == 1:
            slots = slots * len(self.names)
        if len(slots) != len(self.names) or any(int(s) < 1 for s in slots):
            raise ValueError(f"need one positive slot count per host, got {slots!r}")
        hosts = ",".join(f"{n}:{int(s)}" for n, s in zip(self.names, slots, strict=True))
        return [
            "--prtemca", "plm_ssh_agent", str(self.agent_path),
            "--host", hosts,
            "--map-by", "slot:OVERSUBSCRIBE",
            "--bind-to", "none",
            "--mca", "btl_tcp_if_include", self.subnet,
            "--mca", "oob_tcp_if_include", self.subnet,
            "--prtemca", "oob_tcp_if_include", self.subnet,
            "--mca", "coll", "^han",
            "--mca", "mpi_yield_when_idle", "1",
        ]

    def mpiexec_env(self) -> dict[str, str]:
        """Environment additions equivalent to the agent part of :meth:`mpiexec_args`."""
        return {"PRTE_MCA_plm_ssh_agent": str(self.agent_path)}

    # ---- checks

    def check_connectivity(self, *, timeout: float = 10.0, python: str | None = None) -> None:
        """TCP connect from the first host to the second over the veth link.

        Raises :class:`HostSetError` if the connection cannot be made.
        """
        python = python or sys.executable
        a, b = self.names
        listener = (
            "import socket,sys\n"
            "s=socket.socket(); s.bind((sys.argv[1],0)); s.listen(1); s.settimeout(float(sys.argv[2]))\n"
            "print(s.getsockname()[1], flush=True)\n"
            "c,_=s.accept(); c.sendall(b'pl-ok'); c.close()\n"
        )
        connector = (
            "import socket,sys\n"
            "c=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=float(sys.argv[3]))\n"
            "print(c.recv(16).decode(), flush=True)\n"
        )
        srv = subprocess.Popen(
            [*self.exec_prefix(b), python, "-c", listener, self.addresses[b], str(timeout)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            port_line = _readline_timeout(srv, timeout)
            if not port_line.strip().isdigit():
                err = srv.stderr.read() if srv.poll() is not None and srv.stderr is not None else ""
                raise HostSetError(f"listener on {b} did not start: {port_line!r} {err.strip()}")
            # connect by name: also checks the per-namespace hosts file
            cp = self.run(a, [python, "-c", connector, b, port_line.strip(), str(timeout)],
                          timeout=timeout + 5, check=False)
            if cp.returncode != 0 or "pl-ok" not in cp.stdout:
                raise HostSetError(
                    f"no TCP connection {a} -> {b} ({self.addresses[b]}): {(cp.stderr or cp.stdout).strip()}")
        finally:
            if srv.poll() is None:
                srv.kill()
            try:
                srv.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def exists(self) -> bool:
        """Whether both namespaces are present."""
        present = set(list_namespaces())
        return all(n in present for n in self.names)

    # ---- state

    def to_dict(self) -> dict:
        return {
            "names": list(self.names),
            "subnet": self.subnet,
            "addresses": dict(self.addresses),
            "veth": list(self.veth),
            "workdir": str(self.workdir),
            "agent_path": str(self.agent_path),
            "bindir": self.bindir,
            "launch_prefix": list(self.launch_prefix),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "HostSet":
        ip, unshare = _require_tools()
        hs = cls(
            names=(d["names"][0], d["names"][1]),
            subnet=d["subnet"],
            addresses=dict(d["addresses"]),
            veth=(d["veth"][0], d["veth"][1]),
            workdir=Path(d["workdir"]),
            agent_path=Path(d["agent_path"]),
            bindir=d["bindir"],
            ip=ip,
            unshare=unshare,
        )
        hs.launch_prefix = hs.exec_prefix(hs.names[0])
        return hs

    def save(self) -> Path:
        path = self.workdir / STATE_NAME
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    # ---- teardown

    def destroy(self) -> None:
        """Kill what still runs in the namespaces, delete them, remove files. Idempotent."""
        for name in self.names:
            _destroy_namespace(self.ip, name)
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.destroyed = True

    def __enter__(self) -> "HostSet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def _readline_timeout(proc: subprocess.Popen, timeout: float) -> str:
    import selectors

    assert proc.stdout is not None          # started with stdout=PIPE
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            return ""
        return proc.stdout.readline()
    finally:
        sel.close()


def _require_tools() -> tuple[str, str]:
    ip, unshare = _tool("ip"), _tool("unshare")
    if ip is None or unshare is None:
        raise HostSetError("need the 'ip' (iproute2) and 'unshare' (util-linux) commands")
    return ip, unshare


def _netns_pids(ip: str, name: str) -> list[int]:
    cp = _run([ip, "netns", "pids", name], check=False)
    if cp.returncode != 0:
        return []
    return [int(x) for x in cp.stdout.split() if x.isdigit()]


def _destroy_namespace(ip: str, name: str) -> None:
    """Kill the processes inside namespace ``name``, delete it and its /etc/netns dir."""
    if name in list_namespaces():
        for _ in range(3):
            pids = [p for p in _netns_pids(ip, name) if p != os.getpid()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        _run([ip, "netns", "delete", name], check=False)
    _remove_etc(NETNS_ETC / name)
    _remove_shm_segments(name)


#: where Open MPI's shared-memory transport keeps its files, ``sm_segment.<host>.<uid>.<job>.<n>``
SHM_DIR = shmfiles.SHM_DIR


def _remove_shm_segments(name: str) -> None:
    """Delete Open MPI's shared-memory files of host ``name``: its processes are dead (a killed
    host unlinks nothing) and /dev/shm is not per namespace, so they would stay until reboot."""
    shmfiles.remove_orphaned(SHM_DIR, grace_s=0.0, hosts={name})


def remove_host(name: str) -> bool:
    """Kill what runs in namespace ``name``, delete it and its /etc/netns/NAME hosts file.

    Returns whether the namespace existed.
    """
    ip = _tool("ip")
    existed = name in list_namespaces()
    if ip is not None:
        _destroy_namespace(ip, name)
    return existed


def _remove_etc(etc: Path) -> None:
    """Remove an /etc/netns/NAME directory if it holds only our hosts file."""
    hosts = etc / "hosts"
    try:
        if {p.name for p in etc.iterdir()} != {"hosts"} or not hosts.read_text().startswith(_HOSTS_MARK):
            return
        hosts.unlink()
        etc.rmdir()
        etc.parent.rmdir()  # /etc/netns itself, only if now empty
    except OSError:
        pass


def cleanup_stale(prefix: str) -> list[str]:
    """Delete namespaces (and their /etc/netns dirs) whose name starts with ``prefix``.

    For leftovers of an interrupted run.  Returns the names removed.
    """
    if not prefix:
        raise ValueError("refusing to clean up with an empty prefix")
    ip = _tool("ip")
    removed = []
    if ip is not None:
        for name in list_namespaces():
            if name.startswith(prefix):
                _destroy_namespace(ip, name)
                removed.append(name)
    if NETNS_ETC.is_dir():
        for d in NETNS_ETC.iterdir():
            if d.name.startswith(prefix):
                _remove_etc(d)
    return removed


def remove_orphaned(prefix: str) -> list[str]:
    """Delete hosts named ``<prefix><pid>-...`` whose creating process ``pid`` no longer runs.

    Test runs name their hosts after their own pid; this clears what an interrupted run left
    without touching the hosts of a run still in progress, Open MPI's shared-memory files of
    such hosts included. Returns the names removed.
    """
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)-")
    removed = []
    for name in list_namespaces():
        m = pattern.match(name)
        if not m or int(m.group(1)) == os.getpid() or _running(int(m.group(1))):
            continue                       # ours, or its creator is still running
        removed += cleanup_stale(name)
    gone = set()                           # hosts already gone whose files are still there
    for f in SHM_DIR.glob(f"sm_segment.{glob.escape(prefix)}*"):
        host = f.name[len("sm_segment."):].split(".", 1)[0]
        m = pattern.match(host)
        if m and not _running(int(m.group(1))):
            gone.add(host)
    if gone:
        shmfiles.remove_orphaned(SHM_DIR, grace_s=0.0, hosts=gone)
    return removed


def _running(pid: int) -> bool:
    return pid_alive(pid) is not False     # unknown counts as running: nothing of it is deleted


def _veth_names(names: tuple[str, str]) -> tuple[str, str]:
    tag = f"{zlib.crc32('/'.join(names).encode()):08x}"
    return f"plv{tag}a", f"plv{tag}b"  # 12 chars, under IFNAMSIZ


def create_hosts(
    names: tuple[str, str] | list[str] = DEFAULT_NAMES,
    subnet: str = DEFAULT_SUBNET,
    *,
    workdir: str | os.PathLike | None = None,
    bindir: str | None = None,
    check: bool = True,
    replace: bool = False,
) -> HostSet:
    """Create two test hosts and return their :class:`HostSet`.

    Args:
        names: two host names; each becomes a network namespace and the
            hostname inside it (lowercase letters, digits, '-').
        subnet: private IPv4 subnet for the veth link; the hosts get its
            first two addresses.  Nothing outside the two namespaces is
            routed to it.
        workdir: where to write the agent script and state (default: a new
            temporary directory, removed by :meth:`HostSet.destroy`).
        bindir: directory with ``prted``/``mpiexec`` to put in PATH on the
            remote host (default: the directory of ``sys.executable``).
        check: verify TCP connectivity across the link before returning.
        replace: delete existing namespaces of the same names first
            (otherwise an existing name is an error).

    Raises:
        HostSetError: on any failure; whatever was created is removed again.
    """
    pair, net = _check_request(names, subnet)
    ip, unshare = _require_tools()
    if os.geteuid() != 0:
        raise HostSetError("creating network namespaces needs root")
    existing = set(list_namespaces())
    clash = [n for n in pair if n in existing]
    if clash:
        if not replace:
            raise HostSetError(f"namespace(s) already exist: {', '.join(clash)} (use replace=True or destroy them)")
        for n in clash:
            _destroy_namespace(ip, n)
    hosts = list(net.hosts())
    addrs = {pair[0]: str(hosts[0]), pair[1]: str(hosts[1])}
    if workdir is None:
        wd = Path(tempfile.mkdtemp(prefix=f"planaria-{pair[0]}-"))
    else:
        wd = Path(workdir)
        wd.mkdir(parents=True, exist_ok=True)
    bindir = bindir or os.path.dirname(sys.executable)
    hs = HostSet(names=pair, subnet=str(net), addresses=addrs, veth=_veth_names(pair), workdir=wd,
                 agent_path=wd / AGENT_NAME, bindir=bindir, ip=ip, unshare=unshare)
    hs.launch_prefix = hs.exec_prefix(pair[0])
    try:
        _build(hs, net.prefixlen)
        if check:
            hs.check_connectivity()
    except BaseException:
        hs.destroy()
        raise
    return hs


def _check_request(names: tuple[str, str] | list[str],
                   subnet: str) -> tuple[tuple[str, str], ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The two host names and the subnet, checked."""
    if len(names) != 2 or names[0] == names[1]:
        raise ValueError(f"need two distinct host names, got {tuple(names)!r}")
    for n in names:
        if not _NAME_RE.match(n):
            raise ValueError(f"bad host name {n!r}: use 2-32 of a-z, 0-9, '-'")
    net = ipaddress.ip_network(subnet, strict=True)
    if net.version != 4 or not net.is_private or net.num_addresses < 4 or net.is_loopback:
        raise ValueError(f"subnet must be a private IPv4 network with room for two hosts, got {subnet}")
    return (names[0], names[1]), net


def _build(hs: HostSet, prefixlen: int) -> None:
    """The namespaces, their veth link and addresses, their /etc/hosts, the agent script, the saved state."""
    ip, names, veth, addrs = hs.ip, hs.names, hs.veth, hs.addresses
    for n in names:
        _run([ip, "netns", "add", n])
    _run([ip, "link", "add", veth[0], "netns", names[0], "type", "veth",
          "peer", "name", veth[1], "netns", names[1]])
    for n, dev in zip(names, veth, strict=True):
        _run([ip, "-n", n, "link", "set", "lo", "up"])
        _run([ip, "-n", n, "addr", "add", f"{addrs[n]}/{prefixlen}", "dev", dev])
        _run([ip, "-n", n, "link", "set", dev, "up"])
    hosts_text = "".join(
        [_HOSTS_MARK, "127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n"]
        + [f"{addrs[n]}\t{n}\n" for n in names]
    )
    for n in names:
        etc = NETNS_ETC / n
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(hosts_text)
    hs.agent_path.write_text(render_agent(addrs, ip=ip, unshare=hs.unshare, bindir=hs.bindir))
    hs.agent_path.chmod(0o755)
    hs.save()


def load_hosts(workdir: str | os.PathLike) -> HostSet:
    """The :class:`HostSet` saved in ``workdir`` by :func:`create_hosts`."""
    path = Path(workdir) / STATE_NAME
    try:
        return HostSet.from_dict(json.loads(path.read_text()))
    except FileNotFoundError as exc:
        raise HostSetError(f"no host set state at {path}") from exc
