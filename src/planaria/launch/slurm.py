"""Host liveness inside a Slurm allocation: ask Slurm, not ssh.

Compute nodes of an allocation usually refuse ssh (or only accept it from the allocation's own
nodes), so a host probed with ``ssh host true`` from ``salloc`` on a login host looks dead while
Slurm runs commands there in 50 ms. Inside an allocation a host is alive when Slurm does not
report its node down or not responding (``scontrol show node``) and a one-task step runs ``true``
there (``srun --overlap``, which may share the resources of the running job step).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping

#: node states (``scontrol show node``'s ``State=``, ``+`` joins flags) under which nothing runs there
DEAD_STATES = frozenset({"DOWN", "DRAIN", "DRAINED", "FAIL", "FAILING", "POWERED_DOWN", "POWER_DOWN",
                         "NOT_RESPONDING", "UNKNOWN"})


def job_id(environ: Mapping[str, str] | None = None) -> str | None:
    """The enclosing Slurm job's id when ``srun`` can start steps in it, else None."""
    env = os.environ if environ is None else environ
    jid = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    return jid if jid and shutil.which("srun") else None


def node_state(host: str, timeout: float) -> set[str] | None:
    """The node's state words (``{"IDLE"}``, ``{"ALLOCATED", "NOT_RESPONDING"}``...), None when unknown."""
    if not shutil.which("scontrol"):
        return None
    try:
        cp = subprocess.run(["scontrol", "show", "node", "-o", host], capture_output=True, text=True,
                            timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return state_words(cp.stdout) if cp.returncode == 0 else None


def state_words(show_node: str) -> set[str] | None:
    """The state words of ``scontrol show node -o``'s line: ``State=IDLE*`` (``*``: not responding)
    and ``State=MIXED+DRAIN`` forms; None without a ``State=`` field."""
    m = re.search(r"\bState=(\S+)", show_node)
    if m is None:
        return None
    words = set(m.group(1).rstrip("*").split("+"))
    if m.group(1).endswith("*"):
        words.add("NOT_RESPONDING")
    return words


def probe(host: str, jid: str, timeout: float) -> bool:
    """Whether Slurm still runs commands on ``host`` for job ``jid`` (bounded by ``timeout``)."""
    state = node_state(host, timeout)
    if state is not None and state & DEAD_STATES:
        return False
    argv = ["srun", f"--jobid={jid}", "--overlap", "-N1", "-n1", "-w", host, "--quiet", "true"]
    try:
        cp = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=timeout, start_new_session=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return cp.returncode == 0


def restart_args(attempt: int, mpiexec_args: list[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """mpiexec arguments for a restarted attempt inside a Slurm allocation: Open MPI starts its
    daemons with ``srun``, and after a node failure the failed attempt's step stays "completing"
    and holds the other nodes' CPUs, so a new step waits for ever ("Job step creation temporarily
    disabled"); ``--overlap`` lets the new daemons share them. Nothing outside Slurm, on the first
    attempt, or when the command line already sets ``plm_slurm_args``."""
    if attempt <= 1 or job_id(environ) is None or "plm_slurm_args" in mpiexec_args:
        return []
    return ["--prtemca", "plm_slurm_args", "--overlap"]
