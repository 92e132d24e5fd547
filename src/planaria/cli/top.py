"""``planaria top``: a live view of a running job (docs/tools.md).

Every ``--interval`` seconds a ``ps`` request to the controller gives each rank's state, step, step
total and rate, heartbeat age and role, and for a fragments run its CF counters (done, queued,
moved away, how busy its threads were); a subscription like ``attach --events`` gives the events
and incidents as they come, in a thread of its own. The view ends when the job does, showing its
final state from ``summary.json``, or on Ctrl-C; ``--once`` prints one snapshot (``--json`` for
scripts) with the last events of the job record.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Optional

import typer

from planaria.cli.tools import _JOB, _TIMEOUT, _fail, _job, _print_json, _ranks, progress_text, ps_row, role_text

EVENTS_SHOWN = 8                 # the newest events the view keeps
_LIVE_STATUS = (None, "running", "starting", "restarting")
_ACTIVE = ("starting", "running", "paused")


# --------------------------------------------------------------------------- the snapshot


def top_row(r: dict[str, Any], now: float) -> dict[str, Any]:
    """``ps --json``'s row and the fragments counters: ``cfs`` {done, queued, moved, busy_pct} or None."""
    row = ps_row(r, now)
    cf = r.get("cf")
    row["cfs"] = (dict(zip(("done", "queued", "moved", "busy_pct"), cf, strict=True))
                  if isinstance(cf, list) and len(cf) == 4 else None)
    return row


def progress_of(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The job's progress: the working rank furthest behind (``ranktable.slowest``), with the time
    left at its rate (``eta_s``, None while it has none)."""
    from planaria.launch.ranktable import slowest
    got = slowest(rows)
    if got is None:
        return None
    done, total, rate = got
    eta = round((total - done) / rate, 1) if isinstance(rate, (int, float)) and rate > 0 else None
    return {"done": done, "total": total, "rate": rate, "eta_s": eta}


def snapshot(jd: Any, timeout: float, ranks: list[int] | None = None) -> dict[str, Any]:
    """The running job as its controller sees it now (``ranks`` only, when given); ToolError when it
    does not answer."""
    from planaria.launch.toolclient import call
    req: dict[str, Any] = {"type": "ps"}
    if ranks is not None:
        req["ranks"] = ranks
    reply = call(jd, req, timeout)
    now = time.time()
    rows = [top_row(r, now) for r in reply.get("ranks") or []]
    t0 = reply.get("t0")
    return {"job": jd.id, "status": "running", "t": now,
            "elapsed_s": round(now - t0, 1) if isinstance(t0, (int, float)) else None,
            "ranks": rows, "progress": progress_of(rows)}


def ended(jd: Any) -> bool:
    """The job is over: its summary is written, or its manifest says it no longer runs."""
    if (jd.path / "summary.json").exists():
        return True
    try:
        return jd.manifest().get("status") not in _LIVE_STATUS
    except (OSError, ValueError):
        return False


def final_snapshot(jd: Any, last: dict[str, Any] | None, wait: float = 3.0) -> dict[str, Any] | None:
    """The job's end: the last snapshot with each rank's final state, step and how it ended from
    ``summary.json`` (waited for up to ``wait`` s; the launcher writes it after the last rank)."""
    deadline = time.monotonic() + wait
    while not (jd.path / "summary.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        summary = jd.read_json("summary.json")
    except (OSError, ValueError):
        return last
    rows = {r["rank"]: dict(r) for r in (last or {}).get("ranks") or []}
    for s in summary.get("ranks") or []:
        row = rows.setdefault(s["rank"], {"rank": s["rank"], "host": s.get("host"), "pid": s.get("pid"),
                                          "role": s.get("role"), "total": None, "rate": None, "cfs": None,
                                          "logical": s.get("logical"), "runtime": None})
        row.update(state=s.get("state"), how=s.get("how"), last_heartbeat_s=None,
                   step=s.get("step") if s.get("step") is not None else row.get("step"))
    ranks = [rows[r] for r in sorted(rows)]
    return {"job": jd.id, "status": summary.get("outcome"), "exit_status": summary.get("status"),
            "t": time.time(), "elapsed_s": summary.get("elapsed"), "ranks": ranks, "progress": progress_of(ranks)}


def recent_events(jd: Any, n: int = EVENTS_SHOWN) -> list[dict[str, Any]]:
    """The last ``n`` events the controller relayed, from the job record (``events.jsonl``)."""
    try:
        recs = jd.events()
    except (OSError, ValueError):
        return []
    return [{"t": e.get("t"), "name": e.get("name"), "source": e.get("source"), "origin": e.get("origin"),
             "affected": e.get("affected"), "info": e.get("info")} for e in recs if e.get("type") == "event"][-n:]


# --------------------------------------------------------------------------- events as they come


class EventFeed:
    """The job's events as the controller relays them, read in a thread of its own (the socket
    stays in it); ``job_end`` once the controller said the job (or this attempt) has ended."""

    def __init__(self, jd: Any, timeout: float) -> None:
        self.events: deque[dict[str, Any]] = deque(maxlen=EVENTS_SHOWN)
        self.job_end = threading.Event()
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(jd, timeout), daemon=True, name="planaria-top-events")
        self._thread.start()

    def _run(self, jd: Any, timeout: float) -> None:
        from planaria.events import codes
        from planaria.launch.client import ToolError
        from planaria.launch.toolclient import Attach
        try:
            att = Attach(jd, io=False, events=True, history=False, timeout=timeout)
        except ToolError:
            self.done.set()
            return
        try:
            for msg in att.stream(stop=self._stop):
                ev = msg.get("event") or {}
                if ev.get("code") == codes.JOB_END:
                    self.job_end.set()
                    continue
                self.events.append({"t": ev.get("t"), "name": codes.name_of(int(ev.get("code", 0))),
                                    "source": ev.get("source"), "origin": ev.get("origin"),
                                    "affected": ev.get("affected"), "info": ev.get("info")})
        except ToolError:
            pass
        finally:
            att.close()
            self.done.set()

    def close(self) -> None:
        """End the subscription (bounded)."""
        self._stop.set()
        self._thread.join(1.0)


# --------------------------------------------------------------------------- rendering


def _heading(snap: dict[str, Any]) -> str:
    """``job ID · running · 12.3 s · 3 ranks (3 running)``, and on a second line the progress:
    ``slowest rank 12/40 30% 3.1/s, about 9 s left``."""
    states: dict[str, int] = {}
    for r in snap["ranks"]:
        states[str(r.get("state"))] = states.get(str(r.get("state")), 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    el = snap.get("elapsed_s")
    parts = [f"job {snap['job']}", str(snap.get("status")), f"{el:.1f} s" if isinstance(el, (int, float)) else "",
             f"{len(snap['ranks'])} ranks ({counts or 'none yet'})"]
    if snap.get("exit_status") is not None:
        parts.append(f"exit {snap['exit_status']}")
    head = " · ".join(p for p in parts if p)
    pr = snap.get("progress")
    if pr:
        text = progress_text({"step": pr["done"], "total": pr["total"], "rate": pr["rate"]})
        head += f"\nslowest rank {text}" + (f", about {pr['eta_s']:g} s left" if pr.get("eta_s") is not None else "")
    return head


def _cells(r: dict[str, Any], steps: bool, frag: bool) -> list[str]:
    """One rank's cells (the columns of ``render``)."""
    hb = r.get("last_heartbeat_s")
    step = r.get("step")
    cells = [str(r["rank"]), str(r.get("state") or ""), role_text(r)]
    if steps:
        cells += ["" if step is None else (f"{step}/{r['total']}" if isinstance(r.get("total"), int) else str(step)),
                  f"{r['rate']:.3g}/s" if isinstance(r.get("rate"), (int, float)) and r.get("state") in _ACTIVE
                  else ""]
    cells += [f"{hb:.1f}s" if isinstance(hb, (int, float)) and r.get("state") in _ACTIVE else "",
              str(r.get("host") or "")]
    if frag:
        cf = r.get("cfs") or {}
        cells += [str(cf.get(k, "")) for k in ("done", "queued", "moved")]
        cells.append(f"{cf['busy_pct']}%" if "busy_pct" in cf else "")
    if r.get("how"):
        cells.append(str(r["how"]))
    return cells


_STYLE = {"failed": "red", "lost": "red", "paused": "yellow", "finished": "green", "starting": "dim"}


def _event_line(ev: dict[str, Any]) -> tuple[str, str]:
    """An event as one line and its style (an incident in red)."""
    t = ev.get("t")
    stamp = time.strftime("%H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) else "--:--:--"
    info = ev.get("info") or {}
    said = " ".join(f"{k}={v}" for k, v in sorted(info.items())
                    if isinstance(v, (str, int, float)) and v != "")      # nested details: planaria diagnose
    src = str(ev.get("origin") or "rm") if ev.get("source") is None else f"rank {ev['source']}"
    aff = f" affected {ev['affected']}" if ev.get("affected") else ""
    name = str(ev.get("name") or "?")
    style = "red" if "FAULT_LOCALIZED" in name or "_ERR_" in name else ""
    return f"{stamp} {name} from {src}{aff} {said}".rstrip(), style


def render(snap: dict[str, Any], events: list[dict[str, Any]]) -> Any:
    """The view: the heading, one row per rank (the CF columns for a fragments run), the events."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text
    rows = snap["ranks"]
    frag = any(r.get("cfs") for r in rows)
    steps = any(r.get("step") is not None for r in rows) or not frag
    table = Table(expand=False)
    right = {"rank", "step", "rate", "hb age", "CFs done", "queued", "moved", "busy"}
    cols = ["rank", "state", "role"] + (["step", "rate"] if steps else []) + ["hb age", "host"]
    cols += ["CFs done", "queued", "moved", "busy"] if frag else []
    cols += ["how"] if any(r.get("how") for r in rows) else []
    for col in cols:
        table.add_column(col, justify="right" if col in right else "left", no_wrap=col != "how")
    for r in rows:
        table.add_row(*_cells(r, steps, frag), style=_STYLE.get(str(r.get("state")), ""))
    parts: list[Any] = [Text(_heading(snap), style="bold"), table]
    if events:
        parts.append(Text("events", style="bold"))
        for ev in events:
            line, style = _event_line(ev)
            parts.append(Text(line, style=style, no_wrap=True, overflow="ellipsis"))
    return Group(*parts)


# --------------------------------------------------------------------------- the command


def _once(jd: Any, timeout: float, json_out: bool, ranks: list[int] | None) -> None:
    """One snapshot (the final one when the job has ended), printed and done."""
    from planaria.launch.client import ToolError
    try:
        snap: dict[str, Any] | None = snapshot(jd, timeout, ranks)
    except ToolError as exc:
        if not ended(jd):
            _fail("top", str(exc), 1)
        snap = final_snapshot(jd, None, wait=0.0)
        if snap is None:
            _fail("top", f"job {jd.id} has ended and left no summary", 1)
    assert snap is not None
    if ranks is not None:
        snap["ranks"] = [r for r in snap["ranks"] if r["rank"] in ranks]
    snap["events"] = recent_events(jd)
    if json_out:
        _print_json(snap)
        return
    from rich.console import Console
    Console().print(render(snap, snap["events"]))


def _poll(jd: Any, timeout: float, ranks: list[int] | None) -> dict[str, Any] | None:
    """A snapshot; None once the job has ended; exit 1 when a running job's controller stays silent."""
    from planaria.launch.client import ToolError
    try:
        return snapshot(jd, timeout, ranks)
    except ToolError as exc:
        deadline = time.monotonic() + timeout    # the launcher may be writing the job's end
        while time.monotonic() < deadline:
            if ended(jd):
                return None
            time.sleep(0.2)
        _fail("top", str(exc), 1)
    return None


def _watch(jd: Any, live: Any, interval: float, timeout: float, ranks: list[int] | None) -> dict[str, Any] | None:
    """Refresh the view until the job ends; the last snapshot."""
    last: dict[str, Any] | None = None
    feed = EventFeed(jd, max(timeout, 2.0))
    try:
        while True:
            snap = _poll(jd, timeout, ranks)
            if snap is None:
                return last
            last = snap
            live.update(render(snap, list(feed.events)), refresh=True)
            feed.job_end.wait(interval)
            if feed.job_end.is_set() and (ended(jd) or _wait_end(jd, timeout)):
                return last          # else this attempt ended and a restart follows: a new controller
            if feed.done.is_set():   # the subscription ended (an attempt's end, a silent controller)
                feed.close()
                feed = EventFeed(jd, max(timeout, 2.0))
    finally:
        feed.close()


def _wait_end(jd: Any, timeout: float) -> bool:
    """After an attempt's end: True when the job's summary comes within ``timeout`` s (no restart)."""
    deadline = time.monotonic() + max(timeout, 3.0)
    while time.monotonic() < deadline:
        if ended(jd):
            return True
        try:
            if jd.manifest().get("status") == "restarting":
                return False
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    return False


def top(job: str = _JOB,
        interval: float = typer.Option(1.0, "--interval", min=0.1, help="Seconds between two refreshes."),
        once: bool = typer.Option(False, "--once", help="Print one snapshot and exit (for scripts and tests)."),
        json_out: bool = typer.Option(False, "--json", help="With --once: the snapshot as JSON on stdout."),
        ranks: Optional[str] = typer.Option(None, "--ranks", help="Only these ranks, e.g. 0-15 or 1,3-5."),
        timeout: float = _TIMEOUT) -> None:
    """A live view of a running job, refreshed every --interval seconds: each rank's state, role,
    step out of the announced total (pl.step(i, total=n)) and steps per second, heartbeat age and
    host; for a fragments run each rank's CFs done, queued (waiting for inputs or a thread) and
    moved away by the balancer, and how busy its CF threads were over the last second; the events
    and incidents as they come. It ends when the job ends, showing the final state, or on Ctrl-C.

    Examples:

      planaria top latest

      planaria top latest --interval 0.5 --ranks 0-15

      planaria top 20261128-051200-ab12 --once --json
    """
    if json_out and not once:
        _fail("top", "--json goes with --once (one snapshot as JSON)", 2)
    rk = _ranks("top", ranks)
    jd = _job("top", job)
    if once or ended(jd):
        _once(jd, timeout, json_out, rk)
        return
    from rich.console import Console
    from rich.live import Live
    with Live(console=Console(), auto_refresh=False, transient=False) as live:
        try:
            last = _watch(jd, live, interval, timeout, rk)
            final = final_snapshot(jd, last)
            if final is not None:
                final["ranks"] = [r for r in final["ranks"] if rk is None or r["rank"] in rk]
                live.update(render(final, recent_events(jd)), refresh=True)
        except KeyboardInterrupt:
            pass
