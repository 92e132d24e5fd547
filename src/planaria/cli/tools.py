"""Tools for running jobs: ``ps``, ``ctl``, ``event``, ``publish``, ``lookup``, ``log``, ``attach``.

Every call talks to the job's controller over its control socket with the job secret, and is
bounded by ``--timeout``. Exit status: 0 done, 1 the job did not answer or refused, 2 bad input.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional

import typer

_JOB = typer.Argument("latest", help="Job id, job directory, or 'latest'.")
_TIMEOUT = typer.Option(5.0, "--timeout", min=0.1, help="Seconds to wait for the controller.")
_JSON = typer.Option(False, "--json", help="Print the answer as JSON on stdout.")


def _fail(verb: str, msg: str, code: int) -> None:
    print(f"planaria {verb}: {msg}", file=sys.stderr)
    raise typer.Exit(code)


def _job(verb: str, spec: str) -> Any:
    from planaria.launch.client import ToolError, find_job
    try:
        return find_job(spec)
    except (ToolError, FileNotFoundError) as exc:
        _fail(verb, str(exc), 2)


def _call(verb: str, jd: Any, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
    from planaria.launch.client import ToolError
    from planaria.launch.toolclient import call
    try:
        reply = call(jd, msg, timeout)
    except ToolError as exc:
        _fail(verb, str(exc), 1)
    if reply.get("error"):
        _fail(verb, str(reply["error"]), 1)
    return reply


def _ranks(verb: str, text: str | None) -> list[int] | None:
    from planaria.launch.toolclient import parse_ranks
    try:
        return parse_ranks(text)
    except ValueError as exc:
        _fail(verb, str(exc), 2)
    return None


def _print_json(obj: Any) -> None:
    from planaria.launch.jobdir import dump_json
    sys.stdout.write(dump_json(obj))


def ps(job: str = _JOB, timeout: float = _TIMEOUT, json_out: bool = _JSON,
       ranks: Optional[str] = typer.Option(None, "--ranks", help="Only these ranks, e.g. 0-99 or 1,3-5."),
       summary: bool = typer.Option(False, "--summary", help="Counts per state and host and the steps' range instead of one row per rank (for jobs of thousands of ranks).")) -> None:
    """The process table of a running job: rank, host, pid, state, role, last heartbeat, step, and
    progress: the step out of the total the program announced (pl.step(i, total=n)) and the steps per
    second over the last 2 s. For a live view, planaria top.

    Examples: planaria ps latest --json ; planaria ps latest --ranks 0-15 ; planaria ps latest --summary
    """
    rk = _ranks("ps", ranks)
    jd = _job("ps", job)
    req: dict[str, Any] = {"type": "ps", "summary": summary}
    if rk is not None:
        req["ranks"] = rk
    reply = _call("ps", jd, req, timeout)
    if summary:
        if json_out:
            _print_json({"job": jd.id, "t0": reply.get("t0"), **(reply.get("summary") or {})})
            return
        sm = reply.get("summary") or {}
        states = ", ".join(f"{n} {s}" for s, n in sorted((sm.get("states") or {}).items()))
        pr = sm.get("progress")
        behind = f"; slowest rank {progress_text({'step': pr['done'], 'total': pr['total'], 'rate': pr['rate']})}" \
            if pr else ""
        print(f"job {jd.id}: {sm.get('ranks', 0)} ranks ({states or 'none'}) on {len(sm.get('hosts') or {})} "
              f"host(s), {sm.get('node_agents', 0)} node agent(s); steps {sm.get('step_min')}..{sm.get('step_max')}"
              + behind)
        return
    now = time.time()
    rows = [ps_row(r, now) for r in reply.get("ranks") or []]
    if json_out:
        _print_json({"job": jd.id, "t0": reply.get("t0"), "ranks": rows})
        return
    from rich.console import Console
    from rich.table import Table
    plain = any(r["runtime"] is False for r in rows)
    table = Table(title=f"job {jd.id}", caption="ranks without planaria's runtime: known from the rank recorder "
                                                "(no heartbeat, role or step)" if plain else None)
    for col in ("rank", "host", "pid", "state", "role", "heartbeat", "step", "progress"):
        table.add_column(col, justify="right" if col in ("rank", "pid", "heartbeat", "step", "progress") else "left",
                         no_wrap=col == "progress")
    for r in rows:
        hb = "" if r["last_heartbeat_s"] is None else f"{r['last_heartbeat_s']:.1f}s ago"
        table.add_row(str(r["rank"]), str(r["host"] or "?"), str(r["pid"] or "?"), str(r["state"]),
                      role_text(r), hb, "" if r["step"] is None else str(r["step"]), progress_text(r))
    Console().print(table)


def ps_row(r: dict[str, Any], now: float) -> dict[str, Any]:
    """One rank of the controller's table as ``ps --json`` shows it (``top --json`` adds to it):
    ``total`` is the step count announced with ``step(i, total=n)``, ``rate`` steps per second."""
    return {"rank": r["rank"], "host": r.get("host"), "pid": r.get("pid"), "state": r.get("state"),
            "role": r.get("role"), "last_heartbeat_s": round(now - r["last_hb"], 3) if r.get("last_hb") else None,
            "step": r.get("step"), "backend": r.get("backend"), "runtime": r.get("runtime", True),
            "logical": r.get("logical"), "total": r.get("total"), "rate": r.get("rate")}


def role_text(r: dict[str, Any]) -> str:
    """The role as ``ps`` and ``top`` print it: ``spare→L3`` for a spare that took over logical rank 3."""
    from planaria.launch.recoveries import role_label
    return role_label(r.get("role"), r.get("logical"), r.get("rank"))


def progress_text(r: dict[str, Any]) -> str:
    """``12/40 30% 3.1/s``: the step a rank is in out of its announced total, and its step rate
    (the step alone with its rate when no total was announced; empty before any step)."""
    step, total, rate = r.get("step"), r.get("total"), r.get("rate")
    if not isinstance(step, int):
        return ""
    text = f"{step}/{total} {100 * min(max(step, 0), total) // total}%" if isinstance(total, int) and total > 0 \
        else str(step)
    return text + (f" {rate:.3g}/s" if isinstance(rate, (int, float)) else "")


def ctl(
    job: str = typer.Argument(..., help="Job id, job directory, or 'latest'."),
    action: str = typer.Argument(..., help="kill | signal | pause | resume"),
    ranks: Optional[str] = typer.Option(None, "--ranks", help="Ranks, e.g. 1,3-5 (default: all)."),
    signal: Optional[str] = typer.Option(None, "--signal", help="Signal for 'signal': TERM, USR1, 10..."),
    timeout: float = _TIMEOUT,
    json_out: bool = _JSON,
) -> None:
    """Job control: kill (SIGKILL, announced as PMIX_ERR_PROC_KILLED_BY_CMD), send a signal,
    pause (SIGSTOP) or resume (SIGCONT) chosen ranks.

    Examples: planaria ctl latest kill --ranks 2 ; planaria ctl latest pause --ranks 0-3
    """
    if action not in ("kill", "signal", "pause", "resume"):
        _fail("ctl", f"unknown action {action!r} (kill, signal, pause, resume)", 2)
    if action == "signal" and not signal:
        _fail("ctl", "'signal' needs --signal NAME", 2)
    if action != "signal" and signal:
        _fail("ctl", "--signal only goes with the 'signal' action", 2)
    rk = _ranks("ctl", ranks)
    if signal:
        from planaria.launch.toolservice import parse_signal
        try:
            parse_signal(signal)
        except ValueError as exc:
            _fail("ctl", str(exc), 2)
    jd = _job("ctl", job)
    reply = _call("ctl", jd, {"type": "ctl", "action": action, "ranks": rk, "signal": signal}, timeout)
    if json_out:
        _print_json(reply)
    else:
        print(f"{action} (signal {reply.get('signal')}): ranks {reply.get('ranks')}")
        for r, why in (reply.get("errors") or {}).items():
            print(f"  rank {r}: {why}", file=sys.stderr)
    if reply.get("errors"):
        raise typer.Exit(1)


def event(
    job: str = typer.Argument(..., help="Job id, job directory, or 'latest'."),
    code: str = typer.Argument(..., help="PMIx name (PMIX_ERR_PROC_ABORTED, JOB_END...), USER+N, or an integer."),
    range_: str = typer.Option("job", "--range", help="job | local | session | global | custom | proc_local | rm."),
    ranks: Optional[str] = typer.Option(None, "--ranks", help="Target ranks for a custom range, e.g. 0,2."),
    affected: Optional[str] = typer.Option(None, "--affected", help="Ranks the event is about."),
    info: list[str] = typer.Option([], "--info", help="key=value carried with the event. Repeatable."),
    timeout: float = _TIMEOUT,
    json_out: bool = _JSON,
) -> None:
    """Inject an event into a running job (like PMIx's pevent); it runs the ranks' handler chains.

    Examples: planaria event latest USER+1 --info phase=io ; planaria event latest USER+2 --range custom --ranks 0,3
    """
    from planaria.events.codes import parse_code
    from planaria.events.ranges import parse_range
    from planaria.launch.toolclient import parse_kv
    try:
        c = parse_code(code)
        rng = parse_range(range_, _ranks("event", ranks))
        data = parse_kv(list(info))
    except ValueError as exc:
        _fail("event", str(exc), 2)
    aff = _ranks("event", affected) or []
    jd = _job("event", job)
    try:
        manifest = jd.manifest()
        size = int(manifest.get("nranks") or 0) + int(manifest.get("spares") or 0)
    except (OSError, ValueError, TypeError):
        size = 0                                  # unknown: the controller decides
    outside = sorted(r for r in (_ranks("event", ranks) or []) + aff if size and not 0 <= r < size)
    if outside:
        _fail("event", f"rank {outside[0]} is not in job {jd.id} (ranks 0-{size - 1})", 2)
    reply = _call("event", jd, {"type": "notify", "code": c, "range": rng.to_wire(), "info": data,
                                "affected": aff, "t": time.time()}, timeout)
    if json_out:
        _print_json(reply)
    else:
        none = " (no rank of the job runs planaria's runtime, so no handler runs)" if reply.get("agents") == 0 else ""
        print(f"event {reply.get('event')} sent{none}")


def publish(
    job: str = typer.Argument(..., help="Job id, job directory, or 'latest'."),
    items: list[str] = typer.Argument(..., help="key=value pairs (values parsed as JSON when they can be)."),
    replace: bool = typer.Option(False, "--replace", help="Overwrite keys already published."),
    timeout: float = _TIMEOUT,
    json_out: bool = _JSON,
) -> None:
    """Publish key-values in the job's store (PMIx_Publish); ranks read them with planaria.events.lookup.

    Example: planaria publish latest answer=42 mode='"fast"'
    """
    from planaria.launch.toolclient import parse_kv
    try:
        data = parse_kv(list(items))
    except ValueError as exc:
        _fail("publish", str(exc), 2)
    jd = _job("publish", job)
    reply = _call("publish", jd, {"type": "publish", "data": data, "replace": replace}, timeout)
    if json_out:
        _print_json(reply)
    else:
        print(f"published {', '.join(reply.get('stored') or [])}")


def lookup(
    job: str = typer.Argument(..., help="Job id, job directory, or 'latest'."),
    keys: list[str] = typer.Argument(..., help="Keys to read."),
    wait: bool = typer.Option(False, "--wait", help="Wait until every key is published, at most --timeout seconds."),
    timeout: float = typer.Option(5.0, "--timeout", min=0.1, help="Seconds to wait for the controller, and with --wait for the keys (inf: no bound)."),
    json_out: bool = _JSON,
) -> None:
    """Read published key-values (like PMIx's plookup): KEY=VALUE lines. Exit 1 when a key is missing.

    Example: planaria lookup latest ready --wait --timeout 30
    """
    jd = _job("lookup", job)
    ks = list(keys)
    if wait:
        data = _wait_for_keys(jd, ks, timeout)
    else:
        data = _call("lookup", jd, {"type": "lookup", "keys": ks, "wait": False}, timeout).get("data") or {}
    missing = [k for k in ks if k not in data]
    if json_out:
        _print_json({"data": data, "missing": missing})
    else:
        for k in ks:
            if k in data:
                print(f"{k}={json.dumps(data[k], default=str)}")
    if missing:
        why = f"not published within {timeout:g} s" if wait else "not published"
        _fail("lookup", f"{', '.join(missing)} {why}", 1)


def _wait_for_keys(jd: Any, keys: list[str], timeout: float) -> dict[str, Any]:
    """The keys' values once all are published or ``timeout`` s passed (``events.wait_for_keys``)."""
    from planaria.events.local import wait_for_keys
    from planaria.launch.client import ToolError
    from planaria.launch.toolclient import call

    def ask(msg: dict[str, Any], reply_timeout: float) -> dict[str, Any] | None:
        return call(jd, msg, reply_timeout)
    try:
        return wait_for_keys(ask, keys, timeout)
    except ToolError as exc:
        _fail("lookup", str(exc), 1)
    return {}


def log(
    job: str = typer.Argument(..., help="Job id, job directory, or 'latest'."),
    message: str = typer.Argument(..., help="Text of the record."),
    field: list[str] = typer.Option([], "--field", help="key=value added to the record. Repeatable."),
    timeout: float = _TIMEOUT,
) -> None:
    """Add a record to the job record (events.jsonl, type 'log'), like PMIx_Log to the job record.

    Example: planaria log latest "switched to the slow path" --field reason=disk
    """
    from planaria.launch.toolclient import parse_kv
    try:
        fields = parse_kv(list(field))
    except ValueError as exc:
        _fail("log", str(exc), 2)
    jd = _job("log", job)
    _call("log", jd, {"type": "log", "message": message, "fields": fields, "t": time.time(),
                      "origin": "tool"}, timeout)


def attach(
    job: str = _JOB,
    ranks: Optional[str] = typer.Option(None, "--ranks", help="Show output of these ranks only."),
    channels: str = typer.Option("stdout,stderr", "--channels", help="stdout, stderr or both."),
    timestamp: bool = typer.Option(False, "--timestamp", help="Prefix every line with its time."),
    xml: bool = typer.Option(False, "--xml", help="One XML element per line: <stdout rank=\"R\">text</stdout>."),
    events: bool = typer.Option(False, "--events", help="Also show the events the controller relays."),
    stdin_ranks: Optional[str] = typer.Option(None, "--stdin", help="Forward this terminal's stdin to these ranks (e.g. 0 or all)."),
    history: bool = typer.Option(True, "--history/--no-history", help="Start with the recent output the controller kept."),
    duration: Optional[float] = typer.Option(None, "--for", min=0.0, help="Detach after S seconds (default: when the job ends)."),
    timeout: float = typer.Option(10.0, "--timeout", min=0.5, help="Give up when the controller is silent this long."),
) -> None:
    """Stream a running job's stdout/stderr tagged by rank and channel, and push stdin to chosen ranks.

    Examples:

      planaria attach latest --timestamp

      planaria attach latest --xml --ranks 0,1 --for 10

      echo 42 | planaria attach latest --stdin 0
    """
    from planaria.launch.client import ToolError
    from planaria.launch.toolclient import Attach, format_event, format_line, stdin_pump
    chans = {c.strip() for c in channels.split(",") if c.strip()}
    if not chans or not chans <= {"stdout", "stderr"}:
        _fail("attach", f"bad --channels {channels!r} (stdout, stderr)", 2)
    show = _ranks("attach", ranks)
    push_to = _ranks("attach", stdin_ranks) if stdin_ranks is not None else None
    jd = _job("attach", job)
    try:
        att = Attach(jd, io=True, events=events, history=history, timeout=timeout)
    except ToolError as exc:
        _fail("attach", str(exc), 1)
    if stdin_ranks is not None:
        stdin_pump(att, push_to, sys.stdin.readline)
    try:
        if xml:
            print(f"<job id={json.dumps(jd.id)}>", flush=True)
        for msg in att.stream(duration):
            if msg["type"] == "io":
                if (show is not None and msg.get("rank") not in show) or msg.get("channel") not in chans:
                    continue
                print(format_line(msg, timestamp, xml), flush=True)
            else:
                print(format_event(msg.get("event") or {}, xml), flush=True)
        if xml:
            print("</job>", flush=True)
    except ToolError as exc:
        _fail("attach", str(exc), 1)
    except KeyboardInterrupt:
        pass
    finally:
        att.close()


def register(app: typer.Typer) -> None:
    """Add the tool verbs to ``app``."""
    app.command("ps")(ps)
    app.command("ctl")(ctl)
    app.command("event")(event)
    app.command("publish")(publish)
    app.command("lookup")(lookup)
    app.command("log")(log)
    app.command("attach")(attach)
