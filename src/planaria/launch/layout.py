"""Where the attempts of a job run: the first attempt's hosts (``--hosts``, ``--netns``, the batch
allocation, this machine), how to reach them, and whether a host still answers after a failure."""
from __future__ import annotations

import math
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

from planaria.util.record import record
from planaria.launch import slurm
from planaria.launch.errors import LaunchError
from planaria.launch.mpiexec import allocation_hosts, parse_hosts
from planaria.launch.options import RunOptions
from planaria.util.env import PLANARIA_HOSTS_DIR

PROBE_TIMEOUT = 8.0          # seconds for one host probe after a failed attempt


def hosts_state_root() -> Path:
    """Where ``planaria hosts up`` keeps its host sets (``$PLANARIA_HOSTS_DIR``)."""
    return Path(os.environ.get(PLANARIA_HOSTS_DIR, "/run/planaria-hosts"))


def load_netns_hosts(spec: str) -> Any:
    """The running host set named ``NAME1,NAME2`` (or just its first name), made by ``planaria hosts up``."""
    from planaria.launch import netns

    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names or len(names) > 2:
        raise LaunchError(f"bad --netns {spec!r} (expected NAME1,NAME2 of 'planaria hosts up')")
    try:
        hs = netns.load_hosts(hosts_state_root() / names[0])
    except (netns.HostSetError, ValueError, KeyError, OSError) as exc:
        raise LaunchError(f"no test hosts {spec!r}: {exc} (create them with "
                          f"'planaria hosts up --names NAME1,NAME2')") from None
    if len(names) == 2 and list(hs.names) != names:
        raise LaunchError(f"the host set of {names[0]} is {','.join(hs.names)}, not {spec}")
    if not hs.exists():
        raise LaunchError(f"test hosts {','.join(hs.names)} are down (run 'planaria hosts up')")
    return hs


def _netns_extra_args(hs: Any) -> list[str]:
    """The host set's mpiexec arguments without ``--host`` and the ssh agent (set per attempt)."""
    args = list(hs.mpiexec_args(1))
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--host":
            i += 2
        elif args[i] == "--prtemca" and i + 1 < len(args) and args[i + 1] == "plm_ssh_agent":
            i += 3
        else:
            out.append(args[i])
            i += 1
    return out


def is_local(host: str) -> bool:
    """Whether ``host`` names this machine."""
    if host in ("localhost", "127.0.0.1", "::1") or host.startswith("127."):
        return True
    import socket       # hosts named: not on the way to mpiexec on this machine

    try:
        mine = {socket.gethostname(), socket.getfqdn()}
    except OSError:
        mine = set()
    return host in mine or host.split(".")[0] in {m.split(".")[0] for m in mine}


def probe_host(host: str, *, hostset: Any = None, ssh_agent: str | None = None,
               timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether ``host`` still runs commands: ``true`` through the launch path, bounded by ``timeout``.

    Test hosts (network namespaces): the namespace exists and a command runs inside it.
    Other hosts: this machine always answers; inside a Slurm allocation Slurm is asked
    (``planaria.launch.slurm``: the node's state, then ``srun --overlap -w HOST true``); else a
    remote host must run ``true`` through the ssh agent (``--prtemca plm_ssh_agent``/
    ``PRTE_MCA_plm_ssh_agent``, default ``ssh`` in batch mode).
    """
    if hostset is not None:
        from planaria.launch import netns

        if host not in netns.list_namespaces():
            return False
        try:
            cp = hostset.run(host, ["true"], timeout=timeout, check=False)
        except (OSError, subprocess.SubprocessError, netns.HostSetError):
            return False
        return cp.returncode == 0
    if is_local(host):
        return True
    jid = slurm.job_id()
    if jid is not None and not ssh_agent:
        return slurm.probe(host, jid, timeout)
    agent = ssh_agent or os.environ.get("PRTE_MCA_plm_ssh_agent") or "ssh"
    argv = shlex.split(agent.split(":")[0].strip() or "ssh")
    if os.path.basename(argv[0]) == "ssh":
        argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(timeout))}"]
    argv += [host, "true"]
    try:
        cp2 = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, timeout=timeout + 2)
    except (OSError, subprocess.SubprocessError):
        return False
    return cp2.returncode == 0


@record
class Layout:
    """The hosts of the next attempt and how to reach them."""

    hosts: list[tuple[str, int]] | None      # None: mpiexec's default (this machine or the allocation)
    explicit: bool                           # pass them as --host (else the first attempt's way)
    hostset: Any = None                      # netns HostSet for --netns

    def names(self) -> list[str]:
        return [h for h, _ in self.hosts or []]

    def hosts_arg(self, opts: RunOptions) -> str | None:
        if self.hosts and self.explicit:
            return ",".join(f"{h}:{s}" for h, s in self.hosts)
        return opts.hosts

    def launch_prefix(self, opts: RunOptions) -> list[str]:
        if self.hostset is not None and self.hosts:
            return self.hostset.exec_prefix(self.hosts[0][0])
        return list(opts.launch_prefix)

    def ssh_agent(self, opts: RunOptions) -> str | None:
        return str(self.hostset.agent_path) if self.hostset is not None else opts.ssh_agent

    def mpiexec_args(self, opts: RunOptions) -> list[str]:
        extra = _netns_extra_args(self.hostset) if self.hostset is not None else []
        return extra + list(opts.mpiexec_args)

    def node_agents(self, opts: RunOptions) -> bool:
        """Whether the ranks go through node agents: as asked, else when a host is not this one
        (their pids are then looked at where they run, and the controller holds a connection per host)."""
        if opts.node_agents is not None:
            return opts.node_agents
        names = self.names()
        if not names and not opts.hosts:            # mpiexec's default: the batch allocation's hosts
            try:
                names = [h for h, _ in allocation_hosts(os.environ) or []]
            except LaunchError:
                names = []
        return any(not is_local(h) for h in names)

    def this_machine(self, opts: RunOptions) -> bool:
        """Whether every rank runs on this machine (its test hosts share its files): as for
        ``node_agents``, the hosts named, else the batch allocation's, else this machine."""
        if self.hostset is not None:
            return True
        names = self.names()
        if not names and opts.hosts:
            names = [h for h, _ in parse_hosts(opts.hosts)]
        if not names:
            try:
                names = [h for h, _ in allocation_hosts(os.environ, use_scontrol=False) or []]
            except LaunchError:
                return False
        return all(is_local(h) for h in names)

    def drop(self, gone: set[str]) -> None:
        self.hosts = [(h, s) for h, s in self.hosts or [] if h not in gone]
        self.explicit = True


def initial_layout(opts: RunOptions, total: int, hostset: Any) -> Layout:
    """The hosts of the first attempt."""
    if hostset is not None:
        per = math.ceil(total / len(hostset.names))
        return Layout([(n, per) for n in hostset.names], True, hostset)
    if opts.hosts:
        return Layout(parse_hosts(opts.hosts), False)
    if opts.restart > 0:
        alloc = allocation_hosts(os.environ)
        if alloc:
            return Layout(alloc, False)
    return Layout(None, False)


