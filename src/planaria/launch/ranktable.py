"""The rank table of one job and its rules: what a rank's ``hello``, heartbeat, failure report,
``bye`` and a tool's ``planaria ctl`` do to its row, which ranks a sweep finds lost (process gone,
heartbeat silent, recorded end), which ranks events reach, and ``ps``'s rows and summary.

No sockets: the controller hands it the messages and sends what it answers. Its lock also guards
the failure merger (``planaria.launch.relay.FaultMerger``) that its failure signals feed, since
the launcher's threads read the table while the controller's server thread changes it.
"""
from __future__ import annotations

import signal as _signal
import threading
import time
from collections.abc import Callable, Container, Iterable
from pathlib import Path
from typing import Any, cast

from planaria.launch import protocol, rankfate
from planaria.util.procstat import pid_alive
from planaria.launch.relay import FaultMerger

LOST_REASON = "killed or crashed (no report)"
ACTIVE = ("starting", "running")
PLAIN_AFTER = 2.0      # seconds after its start with no hello from any rank: a program without the runtime
REACHABLE = ACTIVE + ("paused",)          # ranks events are forwarded to
UNSETTLED_REASON = ("no goodbye and no recorded end when mpiexec ended (its host cut off or unreachable, "
                    "or the process still running there)")

RATE_WINDOW = 2.0      # seconds over which a rank's step rate is measured (a window, then the next)

Row = dict[str, Any]


def new_row(rank: int, now: float) -> Row:
    """The row of a rank first heard of at ``now``."""
    return {"rank": rank, "state": "starting", "pid": None, "host": None, "role": None,
            "backend": None, "last_hb": now, "step": None, "total": None, "rate": None, "fail_time": None,
            "reason": None, "exit_code": None, "end_time": None, "hello_time": None}


def beat(info: Row, step: Any, now: float) -> Row | None:
    """A heartbeat of a rank (its own or in its node's summary); the ``recovered`` record when a rank
    lost only because it was silent, and not known dead since, runs again (the silence was late
    news, not a loss; the failure event already sent stays sent)."""
    silent_for = now - info["last_hb"]
    info["last_hb"] = now
    info["step"] = step
    pace(info, step, now)
    if info["state"] == "starting":
        info["state"] = "running"
    elif info["state"] == "lost" and info.get("lost_by") == "silence" and not info.get("pid_gone"):
        info.update(state="running", fail_time=None, reason=None, lost_by=None)
        return {"type": "recovered", "rank": info["rank"], "t": now, "silent_s": round(silent_for, 3)}
    return None


def pace(info: Row, step: Any, now: float) -> None:
    """The rank's step rate (``rate``, steps per second) over the last window of at least
    ``RATE_WINDOW`` s, measured from the steps its heartbeats carried (``rate_at``: the window's
    start, time and step). Two numbers per rank, a division once a window: a table of thousands of
    ranks beats twice a second. A step going back (a recovery restored an older one) starts a
    new window."""
    at = info.get("rate_at")
    if not isinstance(step, int):
        return
    if at is None or step < at[1]:
        info["rate_at"] = (now, step)
    elif now - at[0] >= RATE_WINDOW:
        info["rate"] = round((step - at[1]) / (now - at[0]), 3)
        info["rate_at"] = (now, step)


def _on_hello(info: Row, msg: dict[str, Any], now: float) -> None:
    info.update(pid=msg.get("pid"), st=msg.get("st"), host=msg.get("host"), role=msg.get("role"),
                backend=msg.get("backend"), hello_time=now, last_hb=now,
                ep=msg.get("ep"), size=msg.get("size"))
    if info["state"] not in ("failed", "finished", "lost"):
        info["state"] = "starting"


def _on_hb(info: Row, msg: dict[str, Any], now: float) -> Row | None:
    if "role" in msg:           # the recovery driver changed it (a spare took over a rank)
        info["role"], info["logical"] = msg.get("role"), msg.get("logical")
    if "total" in msg:          # the program announced its step count (``step(i, total=n)``)
        info["total"] = msg["total"] if isinstance(msg["total"], int) else None
    if "cf" in msg:             # a fragments run's counters: done, queued, moved, busy %
        cf = msg["cf"]
        info["cf"] = cf if isinstance(cf, list) and len(cf) == 4 else None
    return beat(info, msg.get("step"), now)


def _on_fail(info: Row, msg: dict[str, Any], now: float) -> None:
    if info["state"] != "failed":
        info.update(state="failed", fail_time=now, reason=str(msg.get("reason") or "failed"))


def _on_inject(info: Row, msg: dict[str, Any], now: float) -> None:
    info["injected"] = {"kind": msg.get("kind"), "detail": msg.get("detail"), "t": now}
    info["last_hb"] = now


def _on_bye(info: Row, msg: dict[str, Any], now: float) -> None:
    if "role" in msg:
        info["role"], info["logical"] = msg.get("role"), msg.get("logical")
    code = msg.get("code", 0)
    info.update(exit_code=code, end_time=now)
    if isinstance(msg.get("step"), int) and msg["step"] >= 0:     # the last step, newer than the last beat's
        info["step"] = msg["step"]
    if msg.get("reason") and code:      # why the rank chose a non-zero status
        info["reason"] = f"exit {code}: {str(msg['reason'])[:300]}"
    if msg.get("site"):                 # where the program called sys.exit
        info["site"] = str(msg["site"])[:300]
    if info["state"] in ACTIVE:
        info["state"] = "finished"


def _on_other(info: Row, msg: dict[str, Any], now: float) -> None:
    info["last_hb"] = now


# a rank's message type -> what it does to the rank's row (any other message: a sign of life)
_ROW_RULES: dict[str, Callable[[Row, dict[str, Any], float], Row | None]] = {
    "hello": _on_hello, "hb": _on_hb, "fail": _on_fail, "inject": _on_inject, "bye": _on_bye}


def summary(rows: list[Row], node_agents: int) -> dict[str, Any]:
    """``ps --summary``: ranks per state and per host, the lowest and highest step, the node agents,
    the slowest working rank's progress (``slowest``)."""
    states: dict[str, int] = {}
    hosts: dict[str, int] = {}
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
    for r in rows:
        states[str(r.get("state"))] = states.get(str(r.get("state")), 0) + 1
        hosts[str(r.get("host") or "?")] = hosts.get(str(r.get("host") or "?"), 0) + 1
    behind = slowest(rows)
    return {"ranks": len(rows), "states": states, "hosts": hosts, "node_agents": node_agents,
            "step_min": min(steps) if steps else None, "step_max": max(steps) if steps else None,
            "progress": dict(zip(("done", "total", "rate"), behind, strict=True)) if behind else None}


def slowest(rows: Iterable[Row]) -> tuple[int, int, float | None] | None:
    """The progress of the working rank furthest behind, as (steps done, total, its rate): the
    ranks that announced a step count (``step(i, total=n)``) and still run, a finished one counting
    as done; failed and lost ranks hold nothing up. None when no rank announced a total. The step a
    rank is in counts the iterations before it as done."""
    behind: tuple[int, int, float | None] | None = None
    done_all: tuple[int, int, float | None] | None = None
    for r in rows:
        total = r.get("total")
        if not isinstance(total, int) or total <= 0:
            continue
        if r.get("state") == "finished":
            done_all = done_all or (total, total, r.get("rate"))
            continue
        if r.get("state") not in REACHABLE:
            continue
        step = r.get("step")
        done = min(max(step, 0), total) if isinstance(step, int) else 0
        if behind is None or done * behind[1] < behind[0] * total:
            behind = (done, total, r.get("rate"))
    return behind or done_all


def _nowhere(rank: int) -> bool:
    return False


class RankTable:
    """Each rank's row, the node agents that said hello, and the failure signals merged into
    events (``merger``); ``lock`` guards all three."""

    def __init__(self, host: str, pid_check: bool = True) -> None:
        self.ranks: dict[int, Row] = {}
        self.nodes: dict[str, dict[str, Any]] = {}        # node agents that said hello, by node name
        self.lock = threading.Lock()
        self.merger = FaultMerger()
        self.host = host                                   # the launcher's host: pids there can be looked at
        self.pid_check = pid_check
        self.fates_dir: Path | None = None     # where rankfate records how each rank's process ended
        self.ctl_killed: set[int] = set()       # ranks known from their recorder only, killed by planaria ctl
        self.ctl_paused: set[int] = set()       # ... and paused by it (SIGSTOP, until a resume)
        self.crashes: dict[int, dict[str, str]] = {}      # rank -> its traceback's site and error

    # --- reading -------------------------------------------------------
    def copy(self) -> dict[int, Row]:
        """A copy of the rank table."""
        with self.lock:
            return {r: dict(v) for r, v in self.ranks.items()}

    def plain_rows(self, now: float | None = None) -> dict[int, Row]:
        """Ranks the rank recorder started that have not said hello. Rows like ``copy()``'s, no
        heartbeat, role or step. ``runtime`` is False (a program without planaria's runtime) once
        no rank of the job has said hello ``PLAIN_AFTER`` seconds after its start; until then, or
        when other ranks did, a live one is ``starting`` and ``runtime`` None (not known yet)."""
        if self.fates_dir is None:
            return {}
        with self.lock:
            known = set(self.ranks)
        fates = rankfate.read_fates(self.fates_dir, skip=known)    # a rank that said hello has its row
        now = time.time() if now is None else now
        return {r: self._plain_row(r, rec, not known, now) for r, rec in fates.items() if r not in known}

    def _plain_row(self, r: int, rec: dict[str, Any], none_known: bool, now: float) -> Row:
        """The row of rank ``r`` from its recorder's record ``rec``."""
        ended = "end" in rec
        plain = none_known and (ended or now - float(rec.get("start") or now) >= PLAIN_AFTER)
        state = ("finished" if rec.get("exit_code") == 0 else "failed") if ended else \
            "paused" if r in self.ctl_paused else "running" if plain else "starting"
        return {"rank": r, "state": state, "pid": rec.get("pid"), "shim": rec.get("shim"), "host": rec.get("host"), "role": None,
                "backend": None, "last_hb": None, "step": None, "runtime": False if plain else None,
                "start_time": rec.get("start"), "end_time": rec.get("end"), "exit_code": rec.get("exit_code"),
                "reason": rankfate.describe(rec) if ended else None, **self.crashes.get(r, {})}

    def view(self) -> dict[int, Row]:
        """Every rank a tool can see: the rank table, plus the ranks of a program without the runtime."""
        rows = self.plain_rows()
        rows.update(self.copy())
        return dict(sorted(rows.items()))

    def ps_reply(self, only: Any, summarize: bool, t0: float, tok: str) -> bytes:
        """``ps``'s reply, packed: ``view()``'s rows (of the ranks in ``only`` when it is a list), the
        table's packed under the lock rather than copied first (at 16 k ranks the copy cost as much
        as the packing); with ``summarize``, no rows but the counts per state and host and the
        steps' range, which stay small at any size."""
        plain = self.plain_rows()
        want = set(r for r in only if isinstance(r, int)) if isinstance(only, list) else None
        reply: dict[str, Any] = {"type": "ps", "t0": t0}
        with self.lock:
            ranks = sorted(set(plain) | set(self.ranks))
            if want is not None:
                ranks = [r for r in ranks if r in want]
            rows = [plain[r] if r in plain and r not in self.ranks else self.ranks[r] for r in ranks]
            if summarize:
                reply["summary"] = summary(rows, len(self.nodes))
            else:
                reply["ranks"] = rows
            return protocol.pack(reply, tok)

    def progress(self) -> tuple[int, int, float | None] | None:
        """``slowest`` over the table, under its lock (no copy: the launcher asks twice a second)."""
        with self.lock:
            return slowest(self.ranks.values())

    def holds_up(self, ranks: list[int]) -> bool:
        """True when peers waiting for ``ranks`` will get no error: each has finished normally, or
        runs as far as the launcher can tell (active in the table, not failed, lost or paused by a
        tool, and, on this host, its process exists)."""
        with self.lock:
            infos = [self.ranks.get(r) for r in ranks]
        if not ranks or any(i is None or i["state"] not in (*ACTIVE, "finished") for i in infos):
            return False
        if not self.pid_check:
            return True
        rows = cast("list[Row]", infos)     # none is None (above)
        return all(pid_alive(int(i["pid"])) is not False for i in rows
                   if i["state"] in ACTIVE and i.get("pid") and i.get("host") in (None, self.host))

    def finished_note(self, ranks: list[int]) -> str | None:
        """Those of ``ranks`` that have finished, and where (``rank 3 has finished (exit 0 at a.py:9
        in <module>)``); None when none has."""
        with self.lock:
            done = [(r, self.ranks[r]) for r in ranks if r in self.ranks and self.ranks[r]["state"] == "finished"]
        if not done:
            return None
        return "; ".join(f"rank {r} has finished (exit {i.get('exit_code') or 0}"
                         + (f" at {i['site']})" if i.get("site") else ")") for r, i in done)

    def pids(self) -> list[int]:
        """Pids of all ranks that said hello."""
        with self.lock:
            return [int(v["pid"]) for v in self.ranks.values() if v.get("pid")]

    def processes(self) -> list[tuple[int, int]]:
        """(pid, start time in clock ticks) of every rank that said hello with both."""
        with self.lock:
            return [(int(v["pid"]), int(v["st"])) for v in self.ranks.values()
                    if isinstance(v.get("pid"), int) and isinstance(v.get("st"), int)]

    def failures_known(self) -> bool:
        """Whether any rank of this job is known failed or lost."""
        with self.lock:
            return self.merger.any_failure() or any(r["state"] in ("failed", "lost") for r in self.ranks.values())

    def state(self, rank: int) -> str | None:
        """The state of ``rank``'s row (None: no row)."""
        with self.lock:
            return (self.ranks.get(rank) or {}).get("state")

    def reachable(self, want: Container[int] | None = None) -> list[int]:
        """The ranks events and input reach (of ``want`` when given), in order."""
        with self.lock:
            return sorted(r for r, v in self.ranks.items() if v["state"] in REACHABLE
                          and (want is None or r in want))

    def spares(self) -> list[int]:
        """The ranks whose role is ``spare`` (as their agents last said) and that still run."""
        with self.lock:
            return sorted(r for r, v in self.ranks.items() if v.get("role") == "spare" and v["state"] in REACHABLE)

    def reachable_count(self) -> int:
        """How many ranks have an agent that handles events (none in a plain program)."""
        with self.lock:
            return sum(1 for v in self.ranks.values() if v["state"] in REACHABLE)

    def in_reach(self, source: int | None, source_host: str | None,
                 reached: Container[int]) -> tuple[dict[int, Any], dict[int, Any], str | None]:
        """For an event from ``source``: the hosts of the ranks it can reach (reachable and in
        ``reached``), the same with its source added (the range is counted from it even when it
        cannot be reached), and the source's host when not given."""
        with self.lock:
            live = {r: v.get("host") for r, v in self.ranks.items() if v["state"] in REACHABLE and r in reached}
            if source is not None and source_host is None and source in self.ranks:
                source_host = self.ranks[source].get("host")
            if source is not None and source not in live and source in self.ranks:
                live_src = dict(live)
                live_src[source] = self.ranks[source].get("host")
            else:
                live_src = live
        return live, live_src, source_host

    # --- changes -------------------------------------------------------
    def update(self, msg: dict[str, Any], now: float) -> Row | None:
        """A rank's message applied to its row (made on first word from it); the ``recovered``
        record when a heartbeat brings back a rank lost by silence."""
        rank = msg.get("rank")
        if not isinstance(rank, int):
            return None
        with self.lock:
            info = self.ranks.get(rank)
            if info is None:
                info = self.ranks[rank] = new_row(rank, now)
            return _ROW_RULES.get(msg.get("type", ""), _on_other)(info, msg, now)

    def node_beats(self, ranks: Any, steps: Any, now: float) -> list[Row]:
        """A node agent's heartbeat summary (ranks and their steps, two columns); the ``recovered``
        records. A malformed summary changes nothing."""
        out: list[Row] = []
        if not (isinstance(ranks, list) and isinstance(steps, list) and len(ranks) == len(steps)):
            return out
        table = self.ranks
        with self.lock:
            for rank, step in zip(ranks, steps, strict=True):
                info = table.get(rank)
                if info is None:
                    continue
                if info["state"] == "running":      # the common case, inline (16 k rows a second)
                    info["last_hb"] = now
                    info["step"] = step
                    at = info.get("rate_at")
                    if at is None or now - at[0] >= RATE_WINDOW:
                        pace(info, step, now)
                else:
                    rec = beat(info, step, now)
                    if rec is not None:
                        out.append(rec)
        return out

    def mark_gone(self, rank: Any, alive: Any) -> bool:
        """A node agent saw ``rank``'s connection close (``alive`` False: its process is gone too);
        True when the next sweep is to settle it."""
        with self.lock:
            info = self.ranks.get(rank) if isinstance(rank, int) else None
            if info is not None and alive is False:
                info["pid_gone"] = True
        return info is not None and alive is False

    def node_hello(self, name: str, pid: Any, now: float) -> None:
        """A node agent said hello."""
        self.nodes[name] = {"node": name, "pid": pid, "t": now}

    def note_crash(self, rank: int, site: str | None, error: str) -> None:
        """What a rank's own traceback or fatal-error trace said: where and what."""
        said = {"error": error[:300], **({"site": site[:300]} if site else {})}
        with self.lock:
            self.crashes[rank] = said           # a rank without the runtime: merged into its plain row
            info = self.ranks.get(rank)
            if info is not None:
                info.update(said)

    def signal_fail(self, rank: int, reason: str, now: float) -> None:
        """A rank reported its own failure: a sim zombie lives on, any other kills itself next."""
        with self.lock:
            if (self.ranks.get(rank) or {}).get("backend") == "sim":   # a zombie, not killed
                self.merger.add(rank, "aborted", now, reason=reason)
            else:                    # fail-stop: the rank SIGKILLs itself after this report
                self.merger.add(rank, "signal", now, signal=int(_signal.SIGKILL), reason=reason)

    def signal_seen(self, by: Any, ranks: Any, now: float) -> None:
        """Rank ``by``'s communicator reported ``ranks`` failed."""
        with self.lock:
            for r in ranks or ():
                if isinstance(r, int) and r != by:
                    self.merger.add(r, "unreachable", now, by=by)

    def take_merged(self, now: float, force: bool = False) -> dict[str, Any] | None:
        """The merged failure event once its window has passed (``FaultMerger.take``)."""
        with self.lock:
            return self.merger.take(now, force=force)

    def apply_ctl(self, rank: int, action: str, sig: int, now: float) -> None:
        """What ``planaria ctl`` did to ``rank`` (signal sent), in its row or, for a rank known from
        its recorder only (which records how it ends), in ``ctl_killed`` / ``ctl_paused``."""
        with self.lock:
            row = self.ranks.get(rank)
            if row is None:
                if action == "kill":
                    self.ctl_killed.add(rank)
                elif action == "pause":
                    self.ctl_paused.add(rank)
                elif action == "resume":
                    self.ctl_paused.discard(rank)
                return
            if action == "pause":
                row["state"] = "paused"
            elif action == "resume" and row["state"] == "paused":
                row["state"], row["last_hb"] = "running", now
            elif action == "kill":
                row.update(state="lost", fail_time=now, reason="killed by command (planaria ctl)")
                self.merger.add(rank, "killed-by-cmd", now, signal=int(sig))

    # --- the sweep -----------------------------------------------------
    def sweep(self, now: float, silence: float, final: bool = False, final_ok: bool = False,
              fates: dict[int, dict[str, Any]] | None = None,
              routed: Callable[[int], bool] = _nowhere) -> list[Row]:
        """Mark active ranks lost when their pid is gone or their heartbeat has been silent for
        ``silence`` s; the ``lost`` records.

        With ``final`` (mpiexec has exited) every active rank is settled: by how its process
        ended when ``fates`` (``planaria.launch.rankfate`` records) says so (an exit code:
        ``finished`` without a bye; a signal: ``lost``); a rank with neither a bye nor a recorded
        end is ``lost`` (``UNSETTLED_REASON``: mpiexec's exit 0 does not make a cut-off host's
        ranks finished). Only without recorders (``fates_dir`` None) does ``final_ok`` (mpiexec
        exited 0) count such a rank as ``finished`` without a bye. ``routed(rank)``: the rank is
        behind a node agent, which looks at its pid on its own host.
        """
        lost: list[Row] = []
        with self.lock:
            for info in self.ranks.values():
                fate = (fates or {}).get(info["rank"]) if final else None
                if fate is not None and fate.get("ended_by") and info["state"] not in ("finished", "failed"):
                    # the launcher itself ended it (timeout, Ctrl-C, the job abort, a detected hang): say
                    # so, not "killed by signal 15", even when an earlier sweep saw it go
                    info.update(state="lost", ended_by=fate["ended_by"], reason=rankfate.describe(fate),
                                fail_time=fate.get("end") or fate.get("ended_at") or now)
                    continue
                if info["state"] not in ACTIVE:
                    continue
                if fate is not None and "exit_code" in fate:
                    info.update(state="finished", exit_code=fate["exit_code"],
                                end_time=fate.get("end") or now, reason="exited without a bye")
                    continue
                rec = self._check(info, fate, now, silence, final, final_ok, routed)
                if rec is not None:
                    lost.append(rec)
        return lost

    def _check(self, info: Row, fate: dict[str, Any] | None, now: float, silence: float, final: bool,
               final_ok: bool, routed: Callable[[int], bool]) -> Row | None:
        """One active rank without a recorded exit code (lock held): lost when its process is gone,
        its heartbeat silent, its recorder saw a signal, or mpiexec has ended; the ``lost`` record."""
        gone: bool | None = True if info.get("pid_gone") else None   # its node agent saw it go
        # a rank behind a node agent has its pid looked at there (a silent one whose process
        # lives is in the node's summary), not here: the pid may be another host's
        if gone is None and self.pid_check and info.get("pid") and not routed(info["rank"]):
            alive = pid_alive(int(info["pid"]))
            gone = None if alive is None else not alive
        by_silence = gone is None
        if by_silence:
            gone = now - info["last_hb"] > silence
        if fate is None and gone and self.fates_dir is not None:
            fate = rankfate.read_one(self.fates_dir, info["rank"])
            if fate is not None and "end" not in fate and not final:
                return None        # its recorder is writing how it ended: next sweep
        killed = fate is not None and "signal" in fate
        if final and final_ok and not killed and self.fates_dir is None:
            # no recorders (--no-rank-fates): mpiexec's 0 is all there is to go by
            info.update(state="finished", exit_code=0, end_time=now, reason="exited without a bye")
            return None
        if not (gone or final or killed):
            return None
        return self._lose(info, fate, now, killed, final, by_silence)

    def _lose(self, info: Row, fate: dict[str, Any] | None, now: float, killed: bool, final: bool,
              by_silence: bool) -> Row:
        """Mark an active rank lost and signal its failure (lock held); the ``lost`` record."""
        why = f"{rankfate.describe(fate or {})} (no report)" if killed else LOST_REASON
        if final and not killed and self.fates_dir is not None and (fate is None or "end" not in fate):
            # neither a goodbye nor a recorded end: still running where the launcher cannot
            # see it (a host cut off), or its host's record is out of reach; never success
            why = UNSETTLED_REASON
        when = (fate or {}).get("end") or now
        info.update(state="lost", fail_time=when, reason=why)
        if by_silence and not (killed or final):
            info["lost_by"] = "silence"       # a later heartbeat brings it back (``beat``)
        silent = not (self.pid_check and info.get("pid")) and not killed
        self.merger.add(info["rank"], "lost-connection" if silent else "exited", now, pid=info.get("pid"))
        return {"type": "lost", "rank": info["rank"], "pid": info.get("pid"), "reason": why, "t": now}
