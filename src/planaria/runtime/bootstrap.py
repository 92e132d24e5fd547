"""Per-rank start-up and shut-down: the world communicator, injection, agent, fail-stop, bounded finalize.

Rules this module enforces (see design.md, traps seen with Open MPI 5 + ULFM):
- an uncaught exception in a rank must become a *fail-stop failure* that survivors see,
  not a job-wide abort, so the rank dies by SIGKILL (ULFM) or turns into a zombie (sim);
- ``MPI_Finalize`` can spin forever after failures, so it runs under a watchdog that
  ends the process after ``PLANARIA_FINALIZE_TIMEOUT`` seconds (default 10, or 3 in a process
  that has seen a process failure or in a job the controller knows had one: there finalize
  often spins).
"""
from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module behind signal: no enums (0.5 ms of a start)
import atexit
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence

from planaria.comm.base import Comm, rehook
from planaria.runtime.state import RT, current_step
from planaria.util.env import (
    PLANARIA_BACKEND,
    PLANARIA_DETECT,
    PLANARIA_FINALIZE_TIMEOUT,
    PLANARIA_INJECT,
    PLANARIA_SPARES,
)
from planaria.util.paths import shown

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any


_RT = RT      # this process's record (runtime/state.py), filled here


def _resolve_backend(backend: str) -> str:
    if backend not in ("auto", "ulfm", "sim"):
        raise ValueError(f"unknown backend {backend!r} (expected auto, ulfm or sim)")
    if backend == "auto":
        backend = os.environ.get(PLANARIA_BACKEND, "auto") or "auto"
    if backend == "auto":
        from planaria.comm.ulfm import ulfm_available
        backend = "ulfm" if ulfm_available() else "sim"
    return backend


def world(backend: str = "auto") -> Comm:
    """The job's world communicator, fault tolerant (idempotent: later calls return the same object).

    ``backend``: ``"ulfm"`` (real ULFM; needs ``mpiexec --with-ft ulfm``), ``"sim"`` (simulated
    failures, any MPI) or ``"auto"`` (``$PLANARIA_BACKEND``, else ulfm when available, else sim).
    """
    if _RT.comm is not None:
        return _RT.comm
    backend = _resolve_backend(backend)
    from mpi4py import MPI
    if backend == "ulfm":
        from planaria.comm.ulfm import UlfmComm, ulfm_available
        if not ulfm_available():
            raise RuntimeError("backend 'ulfm' needs an MPI with ULFM run with fault tolerance on "
                               "(mpiexec --with-ft ulfm, or planaria run); use backend='sim' otherwise")
        comm: Comm = UlfmComm(MPI.COMM_WORLD.Dup())
    else:
        from planaria.comm.sim import sim_world
        comm = sim_world()
    _RT.comm, _RT.backend = comm, backend
    detect = detection_enabled()
    if detect:
        from planaria.comm import msglog
        from planaria.localize.service import service_comm
        from planaria.localize.thresholds import ENV_VAR, Thresholds
        thresholds = Thresholds.parse(os.environ.get(ENV_VAR))
        msglog.enable(comm, slow_after=thresholds.slow_after())
        svc = service_comm()       # collective: before fault injection can fire
    _start_services(comm)
    if detect:
        _start_localizer(comm, thresholds, svc)
    atexit.register(finalize)
    sys.excepthook = _excepthook
    if not hasattr(sys.exit, "__wrapped__"):
        sys.exit = _exit_recorder(sys.exit)
    return comm


def _exit_recorder(real_exit: Callable[..., Any]) -> Callable[..., Any]:
    """``sys.exit`` that first remembers where the program's main thread called it (told in the
    rank's bye): a rank that leaves while others still wait for it is then named at that line.
    A wrapper because Python keeps no trace of where a ``SystemExit`` came from."""
    def exit(status: object = None) -> Any:
        if not _RT.exit_site and threading.current_thread() is threading.main_thread():
            from planaria.comm.msglog import call_site
            _RT.exit_site = call_site(sys._getframe(1)) or ""
        real_exit(status)
    exit.__wrapped__ = real_exit               # type: ignore[attr-defined]  # functools' marker, set by hand
    exit.__doc__ = real_exit.__doc__
    return exit


def detection_enabled() -> bool:
    """Run-time error detection (message log, timers, probes) is on: ``PLANARIA_DETECT=1`` (set by ``planaria run``)."""
    return os.environ.get(PLANARIA_DETECT, "0").strip().lower() not in ("0", "", "false", "no", "off")


#: what ``set_detection`` switches: both parts, the message log only, the probe service only
DETECTION_PARTS = ("all", "log", "probes")


def set_detection(active: bool, part: str = "all") -> None:
    """Pause or resume run-time detection in this rank: the message log and the probe service
    (``part="all"``), or one of them (``"log"``, ``"probes"``), the other left as it is.

    Meant for measuring what detection, or one part of it, costs inside one job (``python -m
    benchmarks detect --within-job [--part]``); every rank must switch at the same point of the program.
    """
    if part not in DETECTION_PARTS:
        raise ValueError(f"detection part {part!r}: expected one of {', '.join(DETECTION_PARTS)}")
    if _RT.comm is None or not detection_enabled():
        raise RuntimeError("detection is off for this job (PLANARIA_DETECT=1 starts it)")
    if part != "probes":
        from planaria.comm import msglog
        msglog.set_active(active)
    if part != "log" and _RT.localizer is not None:
        if active:
            _RT.localizer.resume()
        else:
            _RT.localizer.pause()


def _start_services(comm: Comm) -> None:
    role = "spare" if comm.rank >= _nworking(comm.size) else "initial"
    try:
        from planaria.runtime.agent import Agent
        _RT.agent = Agent.from_env(comm.rank, comm.size, role, _RT.backend)
    except ImportError:
        _RT.agent = None
    if _RT.agent is not None:
        _RT.agent.total = _RT.total          # a total announced before world()
        _connect_events(_RT.agent)
    if not os.environ.get(PLANARIA_INJECT):      # no plan: the injector is not even imported
        return
    from planaria.inject.plan import Plan
    plan = Plan.from_env()
    if not plan.faults:
        return
    from planaria.inject.injector import Injector
    # Time triggers count from the moment every rank has called world(): rank 0's clock,
    # shared once (all ranks see the same plan, so all take part in this broadcast). Raw
    # MPI on purpose: a rank may finish early and be killed by its plan at once; the data
    # it forwarded is already sent, so the others still complete, where the failure-aware
    # call would (legally, in ULFM terms) raise inside world().
    # It can still be interrupted: a rank already past world() may see a victim die and revoke
    # the communicator while slower ranks are inside this broadcast. Then fall back to this
    # rank's own clock now, the closest it can know to the origin (the launcher's start is
    # about a second earlier, the interpreter's start-up, and would fire time triggers early).
    try:
        t0 = comm.mpi.bcast(time.time() if comm.rank == 0 else None, root=0)
    except Exception:  # mpi4py.MPI.Exception (revoked / process failed)
        t0 = time.time()
    inj = Injector(plan, comm.rank, comm.size, kill=_kill, clock_start=t0, report=_report,
                   kill_from_thread=(_RT.backend == "ulfm"))
    if not inj.active:
        return
    _RT.injector = inj
    if inj.has_message_faults:
        comm._msgfault = inj.message_fault
        rehook(comm)
    if _RT.backend == "sim":
        from planaria.comm.sim import sim_state
        world = sim_state()
        if world is not None:               # always, once world() made the sim communicator
            world.check = inj.check
    inj.start_timers()


def _connect_events(agent: Any) -> None:
    """Relay this rank's events through its agent; report failed peers its communicators see."""
    from planaria.comm.errors import observe_failures
    from planaria.events import local as events_local

    def send(msg: dict[str, Any]) -> bool:
        return agent.report(msg.pop("type"), **msg)

    def abort(reason: str, ev: Any) -> None:
        agent.report("abort", reason=reason, event=ev.to_wire())

    events_local.install(agent.rank, send, agent.request, abort)
    reported: set[int] = set()

    def seen(ranks: frozenset[int]) -> None:
        new = ranks - reported
        if new:
            reported.update(new)
            agent.report("failed-seen", ranks=sorted(new))
    observe_failures(seen)


def _start_localizer(comm: Comm, thresholds: Any, svc: Any) -> None:
    """I/O error recording and the probe service thread (run-time fault localization)."""
    from planaria.localize import iowatch
    from planaria.localize.service import Service
    iowatch.install()
    if svc is None:            # the service communicator could not be made: no probes, the log still works
        return

    def report(incident: dict[str, Any]) -> None:
        kind = "localize-error" if "error" in incident else "incident"
        if _RT.agent is not None:
            _RT.agent.report(kind, incident=incident, by=comm.rank)
        else:
            sys.stderr.write(f"planaria: rank {comm.rank}: {kind}: {incident.get('verdict') or incident}\n")
    agent = _RT.agent

    def knock(rank: int) -> None:
        agent.report("knock", ranks=[rank])
    gone: Callable[[], set[int]] = set
    if _RT.backend == "sim":
        from planaria.comm.sim import sim_state
        sim = sim_state()
        if sim is not None:
            def gone() -> set[int]:             # said goodbye or failed: not there to analyse
                assert sim is not None
                return sim.bye | sim.failed
    service = Service(comm.rank, comm.size, thresholds, report, svc[0], svc[1], is_dead=lambda: _RT.dead,
                      step=current_step, knock=knock if agent is not None else None, gone=gone)
    if agent is not None:
        agent.on_knock = service.knocked
        agent.on_gone = service.left
    _RT.localizer = service.start()


def _nworking(size: int) -> int:
    spares = int(os.environ.get(PLANARIA_SPARES, "0") or 0)
    return max(size - spares, 1)


def step(i: int, total: int | None = None) -> None:
    """Mark the start of iteration ``i`` of the application loop (cheap; drives iteration-triggered faults).

    ``total``: how many iterations the loop has (``for i in range(n): pl.step(i, total=n)``); the
    controller then shows progress and a rate (``planaria ps``, ``planaria top``, the progress bar
    of ``planaria run``). Sent with the next heartbeat only when it changes."""
    agent = _RT.agent
    if total is not None and total != _RT.total:
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            from planaria.errors import BadInput
            raise BadInput(f"step total must be a non-negative integer, not {total!r}")
        _RT.total = total
        if agent is not None:
            agent.total = total
    _RT.step = i
    if agent is not None:
        agent.step = i
    inj = _RT.injector
    if inj is not None:
        inj.step(i)


def set_role(role: str, logical: int | None) -> None:
    """Tell the controller this process's role and logical rank changed (the recovery driver calls it)."""
    if _RT.agent is not None:
        _RT.agent.set_role(role, logical)


def tell(kind: str, **fields: Any) -> bool:
    """Send the job's controller a record of this rank (``kind`` names it: ``recovery``,
    ``checkpoints``), kept in the job's ``events.jsonl`` for its summary. Does not wait; False
    without ``planaria run``'s runtime."""
    agent = _RT.agent
    if agent is None:
        return False
    return bool(agent.report(kind, **fields))


def spare_waker(job_rank: int) -> Any:
    """What the spare of job rank ``job_rank`` sleeps on (a ``planaria.runtime.sparewake.Waker``):
    woken when a working rank calls ``wake_spares``. Without ``planaria run``'s runtime, a socket
    in Linux's abstract namespace that working ranks on this host reach (``reaches_all`` when the
    launcher put every rank here); None where there is none either (the spare then polls)."""
    from planaria.runtime import sparewake
    agent = _RT.agent
    if agent is None:
        from planaria.util.jobinfo import all_on_this_host, job_namespace
        ns = job_namespace()
        name = sparewake.abstract_name(ns, job_rank) if ns is not None else None
        if name is None:
            return None
        try:
            only = sparewake.SpareSocket(name)
        except OSError:             # the name taken, or no AF_UNIX: poll
            return None
        waker = sparewake.Waker(None, only, reaches_all=all_on_this_host(2))
        atexit.register(waker.close)
        return waker
    where = sparewake.wake_dir()
    sock = None
    if where is not None:
        try:
            sock = sparewake.SpareSocket(sparewake.socket_path(where, agent.rank))
        except OSError:             # the controller's wake alone still reaches it
            sock = None
    waker = sparewake.Waker(agent.spare_wake_fd(), sock)
    atexit.register(waker.close)        # its socket file goes with the process
    return waker


def prepare_wake() -> None:
    """Load what ``wake_spares`` needs now (a working rank of a job with spares), not during the
    recovery that calls it: an import there costs milliseconds of its critical path."""
    from planaria.runtime import sparewake
    if _RT.agent is None:
        from planaria.util.jobinfo import job_namespace
        ns = job_namespace()
        if ns is not None:
            sparewake.abstract_name(ns, 0)      # its hash of the job's name, computed once


def wake_spares(job_ranks: Sequence[int] = (), warm: bool = False) -> bool:
    """Wake every spare of the job now (a recovery started, or the spares are released: their MPI
    receive has news; ``warm``: only this rank's footprint is there, see ``sparewake.WARM``).
    Under ``planaria run``, those on this host directly and, unless that reached
    every one of ``job_ranks`` (ranks in the job), all of them through the controller: a second
    wake would only cost CPU time on the recovery's path (the controller's and the spares' agent
    threads). Else those of ``job_ranks`` on this host. False when nothing could be sent."""
    from planaria.runtime import sparewake
    agent = _RT.agent
    if agent is None:
        from planaria.util.jobinfo import job_namespace
        ns = job_namespace()
        return ns is not None and sparewake.wake_ranks(ns, job_ranks, warm) > 0
    where = sparewake.wake_dir()
    reached = sparewake.wake_all(where, warm) if where is not None else set()
    if job_ranks and reached >= set(job_ranks):
        return True
    return bool(agent.report("wake-spares", warm=warm))


def phase(name: str) -> None:
    """Announce that this rank enters ``name`` (``checkpoint``, ``recover``, ``complete``, ``finish``): drives
    phase-tied fault injection."""
    inj = _RT.injector
    if inj is not None:
        inj.phase(name)


def watch(name: str, array: Any) -> None:
    """Register a numpy array under ``name`` so fault plans can flip its bits (``bitflip:array=NAME``)."""
    if _RT.injector is not None:
        _RT.injector.watch(name, array)


def _report(kind: str, fields: dict[str, Any]) -> None:
    if kind == "hang":                  # the plan hangs this rank: its status probe answers say so
        from planaria.comm import msglog
        lg = msglog.log()
        if lg is not None:
            lg.injected_hang = str(fields.get("detail") or "injected hang")
    if _RT.agent is not None:
        _RT.agent.report(kind, wait=(kind != "inject"), **fields)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _kill(reason: str) -> None:
    """Fail-stop this rank (never returns): SIGKILL on real ULFM, a zombie in the simulation."""
    fail_stop(reason)


def fail_stop(reason: str, _tb: Any = None) -> None:
    """End this rank as a process failure the survivors will see; records ``reason`` with the controller."""
    _RT.dead = True
    _flush()
    if _RT.agent is not None:
        try:
            _RT.agent.report("fail", wait=True, reason=reason, step=_RT.step, **_failure_context(_tb))
            _RT.agent.dead = reason
        except Exception:
            pass
    if _RT.backend == "sim":
        from planaria.comm.sim import sim_state
        st = sim_state()
        if st is not None:
            _stop_services()
            st.die()
            _final_exit(0)
    _stop_services()
    _flush()
    os.kill(os.getpid(), _signal.SIGKILL)
    time.sleep(10)  # pragma: no cover - SIGKILL does not return


def _failure_context(tb: Any = None) -> dict[str, Any]:
    """Where this rank was when it failed (call site, operation) and which failures it had seen (detection on).

    ``tb``: the traceback of the exception that ends the rank; its innermost application frame is
    where the program failed (the live stack is the exception hook's by then)."""
    from planaria.comm import msglog
    lg = msglog.log()
    if lg is None:
        return {}
    out: dict[str, Any] = {}
    try:
        if tb is not None:       # the innermost application frame of the traceback (Cython frames
            app = None           # of mpi4py have no f_back: walk the traceback, not the frames)
            while tb is not None:
                code = tb.tb_frame.f_code
                if msglog.is_app_file(code.co_filename):
                    app = f"{shown(code.co_filename)}:{tb.tb_lineno} in {code.co_name}"
                tb = tb.tb_next
            out["site"] = app or lg.site()
        else:
            out["site"] = lg.site()
        op = lg.current()
        if op is not None:
            out["op"] = {k: op.get(k) for k in ("name", "comm", "peer", "tag", "seq")}
        if lg.failures:
            t, name, cid, ranks, site = lg.failures[-1]
            out["saw_failure"] = {"op": name, "comm": cid, "ranks": list(ranks), "site": site, "t": t}
    except Exception:  # noqa: BLE001 - context is best effort
        pass
    return out


def _excepthook(etype: type[BaseException], value: BaseException, tb: Any) -> None:
    if etype is KeyboardInterrupt or threading.current_thread() is not threading.main_thread():
        sys.__excepthook__(etype, value, tb)
        return
    rank = _RT.comm.rank if _RT.comm is not None else "?"
    status = getattr(value, "exit_status", None)
    if isinstance(status, int) and not isinstance(status, bool) and 0 < status < 256:
        # A documented way for the job to stop (e.g. the recovery driver's RecoveryStopped, raised
        # at every rank alike): one line and that status, not a traceback and a fail-stop.
        _flush()
        sys.stderr.write(f"planaria: rank {rank}: {etype.__name__}: {value}".splitlines()[0] + "\n")
        _RT.exit_code = status
        _RT.exit_reason = f"{etype.__name__}: {value}".splitlines()[0]
        finalize(status)
        _final_exit(status)
    import traceback
    text = "".join(traceback.format_exception(etype, value, tb))
    sys.stderr.write(text)
    sys.stderr.write(f"planaria: rank {rank} failed with an uncaught {etype.__name__}; "
                     "treating it as a process failure\n")
    fail_stop(f"uncaught {etype.__name__}: {value}".splitlines()[0][:300], tb)


def _stop_services() -> None:
    loc, _RT.localizer = _RT.localizer, None
    if loc is not None:
        try:
            loc.stop()
        except Exception:
            pass
    inj, _RT.injector = _RT.injector, None
    if inj is not None:
        try:
            inj.close()
        except Exception:
            pass


def finalize(code: int | None = None) -> None:
    """Finish this rank cleanly: report to the controller, finalize MPI under a watchdog."""
    if _RT.finalized or _RT.comm is None:
        return
    _RT.finalized = True
    code = _RT.exit_code if code is None else code
    _stop_services()
    if _RT.agent is not None:
        try:
            bye = {"type": "bye", "code": code, "step": _RT.step, "t": time.time(),
                   "role": _RT.agent.role, "logical": _RT.agent.logical}   # the last word on both
            if _RT.exit_reason:
                bye["reason"] = _RT.exit_reason
            if _RT.exit_site:
                bye["site"] = _RT.exit_site
            ack = _RT.agent.request(bye, timeout=1.0)
            _RT.job_failures = bool(ack and ack.get("failures"))
            _RT.agent.close()
        except Exception:
            pass
    if _RT.backend == "sim":
        from planaria.comm.sim import sim_state
        st = sim_state()
        if st is not None:
            st.say_bye()
    _flush()
    _finalize_mpi(code)


def _libmpi_finalize() -> Any:
    """``MPI_Finalize`` as a ctypes function, or None.

    Called through ctypes because ctypes releases the GIL; mpi4py's ``MPI.Finalize`` keeps
    it, so a finalize that spins after a failure would also freeze the watchdog thread.
    """
    import ctypes
    try:
        return ctypes.CDLL(None).MPI_Finalize
    except AttributeError:
        pass
    try:
        with open("/proc/self/maps") as maps:
            paths = {ln.split()[-1] for ln in maps if "libmpi" in ln and ".so" in ln}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            return ctypes.CDLL(path).MPI_Finalize
        except (OSError, AttributeError):
            continue
    return None


FINALIZE_TIMEOUT = 10.0          # seconds MPI_Finalize may take (PLANARIA_FINALIZE_TIMEOUT overrides)
FINALIZE_AFTER_FAILURE = 3.0     # the same in a process that has seen a process failure


def _finalize_mpi(code: int) -> None:
    """MPI_Finalize, but never longer than PLANARIA_FINALIZE_TIMEOUT seconds (then the process exits)."""
    from mpi4py import MPI
    if MPI.Is_finalized():
        return
    from planaria.comm.errors import failures_seen
    # After a failure Open MPI 5's finalize often spins until the watchdog ends it; every rank
    # has said bye by then, so waiting the full default only delays the job's end. That holds
    # for a rank that never communicated with the failed one too: the controller's answer to
    # its bye says whether the job had a failure.
    env = os.environ.get(PLANARIA_FINALIZE_TIMEOUT)
    after_failure = failures_seen() or _RT.job_failures
    limit = float(env) if env else (FINALIZE_AFTER_FAILURE if after_failure else FINALIZE_TIMEOUT)
    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(limit):
            _flush()
            os._exit(code)
    threading.Thread(target=watchdog, name="planaria-finalize-watchdog", daemon=True).start()
    fin = _libmpi_finalize()
    try:
        if fin is not None:
            fin()
        else:
            MPI.Finalize()
    finally:
        done.set()


def _final_exit(code: int) -> None:
    """Leave the process without returning to application code.

    libc ``exit`` rather than ``os._exit``: it runs the MPI library's own exit handlers;
    MPICH's process manager otherwise sometimes kills the whole job at teardown.
    """
    import ctypes
    _flush()
    _finalize_mpi(code)
    _flush()
    try:
        ctypes.CDLL(None).exit(code)
    finally:
        os._exit(code)
