"""How each rank's process ended, recorded by a small parent process around it.

With ``--with-ft ulfm``, Open MPI 5's mpiexec exits 0 when ranks are killed by a signal, and after
an ``MPI_Abort`` it can exit while other ranks still run. So ``planaria run`` starts every rank's
command under a recorder. It runs CMD as its only child, passes on the signals sent to it alone
(the MPI runtime signals the whole process group, CMD included), writes
``$PLANARIA_FATES_DIR/<world rank>.json`` when the child starts and again when it ends (exit code
or signal), and then ends the way its child did, so mpiexec sees what it would have seen. The
launcher reads the records (``read_fates``) and ends what outlived mpiexec (``kill_leftovers``).

The recorder is ``rankfate.c``, built on first use with the system's C compiler into the user's
cache (``recorder_binary``): it starts in well under a millisecond of CPU. Without a compiler,
or for ranks on other hosts (whose caches may not hold the build), it is this file (``python -S
-I -c 'import rankfate ...' CMD...``: standard library only, so it starts in about 10 ms), which
records the same. Written by hand rather than with a process-supervision package: it must start
fast with nothing but the standard library, under an interpreter run with ``-S -I``.
"""
from __future__ import annotations

import os
import sys
import time

try:    # the C module behind ``signal``: the same calls without the enum import (a third of the start)
    import _signal as signal  # type: ignore[import-not-found]  # the C module has no stubs
except ImportError:  # pragma: no cover - other interpreters
    import signal

TYPE_CHECKING = False
if TYPE_CHECKING:                       # typing, json and pathlib are left out of the recorder's start
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

FATES_ENV = "PLANARIA_FATES_DIR"
# "<rank>:<host>:<fifo>": that rank, when it runs on that host, reads its standard input from the
# launcher's named pipe (mpiexec's own forwarding is off: it loses the data with ULFM on)
STDIN_ENV = "PLANARIA_STDIN"
# signals the MPI runtime (or a user at the terminal) sends to a rank: passed on to the command
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT",
             "SIGTSTP", "SIGWINCH")


def _world_rank() -> int | None:
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        try:
            return int(os.environ[name])
        except (KeyError, ValueError):
            continue
    return None


def _write(path: str, record: dict[str, Any]) -> None:
    """Replace ``path`` atomically (no fsync: the record matters only while this machine is up).

    JSON by hand: the values are ints, floats and a host name, and importing ``json`` would cost
    the recorder a third of its start-up."""
    def enc(v: Any) -> str:
        if isinstance(v, str):
            return '"' + "".join(c if c.isalnum() or c in "-_." else "?" for c in v) + '"'
        return repr(v)

    text = "{" + ", ".join(f'"{k}": {enc(v)}' for k, v in record.items()) + "}"
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _take_stdin(rank: int | None) -> None:
    """Make the launcher's named pipe this process's fd 0 if ``$PLANARIA_STDIN`` names this rank and host."""
    who, _, rest = os.environ.get(STDIN_ENV, "").partition(":")
    host, _, path = rest.partition(":")
    if not path or rank is None or who != str(rank) or host != os.uname().nodename:
        return
    fd = _open_bounded(path, STDIN_WAIT)
    if fd is None:
        print(f"planaria: rank {rank}: no standard input: the launcher did not open {path} within "
              f"{STDIN_WAIT:g} s", file=sys.stderr, flush=True)
        return
    os.dup2(fd, 0)
    os.close(fd)


STDIN_WAIT = 10.0     # seconds rank R waits for the launcher's end of the stdin pipe


def _open_bounded(path: str, wait: float) -> int | None:
    """Open the pipe for reading once the launcher has opened its end, or None after ``wait`` s.

    A FIFO's blocking open waits for the writer with no bound; a thread does that open here, so a
    launcher that never opens its end (it could not, or it died) costs this rank ``wait`` seconds of
    start-up instead of its whole run. A thread given up on stays blocked in ``open`` (a daemon)."""
    import threading            # only rank R pays for the import

    box: list[int | None] = [None]

    def opener() -> None:
        try:
            box[0] = os.open(path, os.O_RDONLY)
        except OSError:
            pass
    t = threading.Thread(target=opener, daemon=True, name="planaria-stdin-open")
    t.start()
    t.join(wait)
    return box[0] if not t.is_alive() else None


def main(argv: list[str]) -> int:
    """Run ``argv`` as a child, record how it ended, and end the same way."""
    if not argv:
        print("planaria rankfate: no command", file=sys.stderr)
        return 2
    where = os.environ.get(FATES_ENV)
    rank = _world_rank()
    _take_stdin(rank)
    if not where or rank is None:
        return _exec(argv)
    path = os.path.join(where, f"{rank}.json")
    parent = os.getpid()
    # Signals are taken with sigwaitinfo, which tells who sent them. The MPI runtime (our parent)
    # signals the whole process group, the command included, so those are not passed on: a
    # second SIGTERM would cut short a command's own clean-up. Anyone else's are passed on.
    waited = {signal.SIGCHLD} | {getattr(signal, n) for n in FORWARDED if hasattr(signal, n)}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        _exec(argv)
    record: dict[str, Any] = {"rank": rank, "host": os.uname().nodename, "pid": pid, "shim": parent,
                              "start": time.time()}
    try:
        _write(path, record)
    except OSError:
        pass                            # the job directory is unreachable: run without a record
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        info = signal.sigwaitinfo(waited)           # a child that ends meanwhile leaves SIGCHLD pending
        if info.si_signo != signal.SIGCHLD and info.si_pid != os.getppid():
            try:
                os.kill(pid, info.si_signo)
            except ProcessLookupError:
                pass                    # already ended: waitpid returns next
    record["end"] = time.time()
    if os.WIFSIGNALED(status):
        record["signal"] = os.WTERMSIG(status)
    else:
        record["exit_code"] = os.waitstatus_to_exitcode(status)
    try:
        _write(path, record)
    except OSError:
        pass
    # the signals stayed blocked until the record was written: a late SIGTERM cannot cut it short
    if "signal" in record:              # end as the child did: mpiexec reports it the same way
        sig = record["signal"]
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, ImportError):
            pass                        # SIGKILL and SIGSTOP cannot be caught: already default
        os.kill(os.getpid(), sig)
        time.sleep(1.0)                 # a stopped or ignored signal: fall back to 128 + signal
        return 128 + sig
    return int(record["exit_code"])


def _exec(argv: list[str]) -> int:
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"planaria: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        os._exit(127)
    return 127                          # not reached


# --------------------------------------------------------------------------- launcher side


def shim_argv(python: str | None = None) -> list[str]:
    """The command prefix that runs a rank under this recorder.

    The recorder is imported from its directory rather than run as a script: an import takes its
    cached bytecode (``__pycache__``, written when the launcher imported this module), while a
    script is compiled at each start, 3 ms of CPU per rank. The directory goes last on the path:
    nothing in it shadows a standard module."""
    here = os.path.dirname(os.path.realpath(__file__))
    stub = f"import sys; sys.path.append({here!r}); import rankfate; sys.exit(rankfate.main(sys.argv[1:]))"
    return [python or sys.executable, "-S", "-I", "-c", stub]


def recorder_argv(local: bool = True) -> list[str]:
    """The command prefix that runs a rank under a recorder: the C recorder (``rankfate.c``) when
    every rank runs on this machine and it could be built, else the Python one (``shim_argv``).

    The C recorder starts in well under a millisecond of CPU where the interpreter takes about ten,
    once per rank while the ranks start. Other hosts may not have its build in their cache."""
    exe = recorder_binary() if local else None
    return [exe] if exe is not None else shim_argv()


#: what every rank's recorder is built with
CFLAGS = ("-O2",)


def recorder_binary() -> str | None:
    """The built C recorder (built now, once, when there is no build of this source), or None when
    it cannot be: no C compiler, or its build failed (noted next to where the build would be, and
    not tried again; see ``planaria.util.cbuild``)."""
    from planaria.util import cbuild
    return cbuild.built(os.path.join(os.path.dirname(os.path.realpath(__file__)), "rankfate.c"), "rankfate", CFLAGS)


def read_fates(where: Path, skip: set[int] | None = None) -> dict[int, dict[str, Any]]:
    """The records in ``where`` by world rank (a rank still running has no ``end``), but those of ``skip``."""
    out: dict[int, dict[str, Any]] = {}
    try:
        names = os.listdir(where)
    except OSError:
        return out
    for name in names:
        stem, ext = os.path.splitext(name)
        ok = ext == ".json" and stem.isdigit() and not (skip and int(stem) in skip)
        rec = read_one(where, int(stem)) if ok else None
        if rec is not None and rec.get("rank") == int(stem):
            out[int(stem)] = rec
    return dict(sorted(out.items()))


def read_one(where: Path, rank: int) -> dict[str, Any] | None:
    """The record of world rank ``rank``, or None."""
    import json

    try:
        with open(os.path.join(where, f"{rank}.json")) as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def settle(where: Path, wait: float = 0.5) -> dict[int, dict[str, Any]]:
    """``read_fates`` once every record has its end, or after ``wait`` seconds (mpiexec has
    exited: a recorder is then writing its last record, or its command outlived mpiexec)."""
    deadline = time.monotonic() + wait
    while True:
        fates = read_fates(where)
        if all("end" in rec for rec in fates.values()) or time.monotonic() >= deadline:
            return fates
        time.sleep(0.02)


def first_failure(fates: dict[int, dict[str, Any]]) -> tuple[int, dict[str, Any]] | None:
    """The lowest rank whose command ended badly (a signal, or a non-zero exit code), or None."""
    for r in sorted(fates):
        rec = fates[r]
        if "signal" in rec or rec.get("exit_code") not in (0, None):
            return r, rec
    return None


class FailureWatch:
    """While a job runs: the first rank whose command ended badly, once no rank of the job has used
    planaria's runtime for ``grace`` seconds since it was seen (a plain MPI program has no event
    handler of its own, so the launcher plays its default handler). Reads ``where`` every
    ``interval`` seconds."""

    def __init__(self, where: Path, *, interval: float = 0.5, grace: float = 1.0) -> None:
        self.where = where
        self.interval = interval
        self.grace = grace
        self._next = 0.0
        self._since: float | None = None

    def check(self, now: float, runtime_in_use: Callable[[], bool]) -> tuple[int, dict[str, Any]] | None:
        """``(rank, its record)`` of the failed rank when the launcher should end the job, else None."""
        if now < self._next:
            return None
        self._next = now + self.interval
        if runtime_in_use():
            self._since = None
            return None
        fates = read_fates(self.where)
        bad = first_failure(fates)
        if bad is None:
            self._since = None
            return None
        if self._since is None:
            self._since = now
        if now - self._since < self.grace:
            return None
        return bad[0], bad[1]


def describe(rec: dict[str, Any]) -> str:
    """``exit 3``, ``killed by signal 9 (SIGKILL)``, ``still running after mpiexec exited ...``."""
    if rec.get("injected"):
        return str(rec["injected"])
    if rec.get("ended_by"):
        return f"ended by {rec['ended_by']}"
    if "signal" in rec:
        import signal as signals

        try:
            name = signals.Signals(rec["signal"]).name
        except ValueError:
            name = "?"
        return f"killed by signal {rec['signal']} ({name})"
    if "exit_code" in rec:
        return f"exit {rec['exit_code']}"
    if rec.get("left_running"):
        return "still running after mpiexec exited (killed by the launcher)"
    return "ended, how is not known (its recorder was killed)"


def status_of(fates: dict[int, dict[str, Any]]) -> int | None:
    """mpiexec's status as it would be without ULFM: the lowest rank that ended badly gives it
    (128 + signal, or its exit code); 0 if every rank exited 0; None if a rank has no end."""
    bad = first_failure(fates)
    if bad is not None:
        rec = bad[1]
        return 128 + int(rec["signal"]) if "signal" in rec else int(rec["exit_code"])
    if not fates or any("end" not in rec for rec in fates.values()):
        return None
    return 0


def _ppid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def command_pid(rec: dict[str, Any]) -> int | None:
    """The pid of the command of ``rec`` while it still runs as its recorder's child on this
    machine (a reused pid, or one of another host, does not), else None."""
    if "end" in rec:
        return None
    pid, shim = rec.get("pid"), rec.get("shim")
    if not isinstance(pid, int) or not isinstance(shim, int) or _ppid_of(pid) != shim:
        return None
    return pid


def kill_command(rec: dict[str, Any]) -> bool:
    """SIGKILL the command of ``rec`` while it still runs as its recorder's child (a reused pid is
    left alone); True when the signal was sent."""
    pid = command_pid(rec)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_leftovers(fates: dict[int, dict[str, Any]]) -> list[int]:
    """SIGKILL the commands still running under a recorder of this machine; return their ranks."""
    return [r for r, rec in sorted(fates.items()) if kill_command(rec)]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
