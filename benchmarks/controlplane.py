"""Control-plane scale: the real controller (its own process) serving simulated ranks.

Each simulated rank is one agent-channel connection (``planaria.events.channel``: a Unix stream
socket, length-prefixed msgpack frames) that says ``hello`` and then sends a heartbeat every
``--hb`` seconds, exactly as a rank's agent does; worker processes hold the connections (one
selector loop each). Measured in the same run: the controller process's CPU over the steady
window, the heartbeat round trip (``hb`` sent to its ``hbok`` read back, p50/p99), ranks the
controller marked lost although they kept beating (false losses), the time of a ``planaria ps``
request (every ``--ps-every`` s, through the real tool client), an event sent by a tool to
the whole job until the first and the last rank have read it (and the longest a worker process
took from its first such rank to its last: the simulator's own share), and, with node agents, one global diagnosis
(``planaria diagnose``: the collection through the node agents, each simulated rank answering
with a one-thread state record, then the offline analysis) from the tool's request to its report.

Run as ``python -m benchmarks controlplane`` (from the repository root).
"""
from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import typer

from benchmarks import _launch
from benchmarks._launch import BenchError
from planaria.events.channel import Reader, address_for, frame
from planaria.launch.fdlimit import raise_open_files

_TICKS = os.sysconf("SC_CLK_TCK")


# -- the two helper processes ----------------------------------------------------------------
def controller_main(job: str) -> int:
    """Run the real controller for job directory ``job``: print its URI, serve until stdin closes."""
    from planaria.launch.controller import Controller
    from planaria.launch.jobdir import JobDir

    ctl = Controller(JobDir.open(job))
    print(ctl.start(), flush=True)
    sys.stdin.read()
    ctl.stop()
    return 0


def worker_main(path: str, secret: str, first: int, count: int, size: int, hb: float, seconds: float,
                out: str, per_node: int = 0) -> int:
    """``count`` simulated ranks from ``first``: hello, then heartbeats until the driver closes this
    process's standard input (at most ``seconds``); stats to ``out``. With ``per_node``, rank r
    connects to its node agent, ``path`` with ``{node}`` = r // per_node."""
    raise_open_files()
    sel = selectors.DefaultSelector()
    conns: list[tuple[socket.socket, Reader, list[float]]] = []
    pid, host = os.getpid(), socket.gethostname()
    for r in range(first, first + count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path.format(node=r // per_node) if per_node else path)
        s.sendall(frame(msgpack.packb({"type": "hello", "rank": r, "size": size, "pid": pid, "host": host,
                                       "role": "initial", "backend": "sim", "tok": secret})))
        s.setblocking(False)
        conns.append((s, Reader(), []))
        sel.register(s, selectors.EVENT_READ, len(conns) - 1)
    sel.register(sys.stdin, selectors.EVENT_READ, -1)       # readable (EOF) when the driver is done
    rtts: list[float] = []
    events: list[float] = []
    dropped = 0
    start = time.monotonic()
    end = start + seconds
    gap = hb / max(count, 1)                 # ranks beat in turn, evenly spread over the interval,
    idx, cycle, step = 0, start, 1           # as independent agents' timers do
    while True:
        now = time.monotonic()
        if now >= end:
            break
        while cycle + idx * gap <= now:
            s, _, sent = conns[idx]
            msg = frame(msgpack.packb({"type": "hb", "rank": first + idx, "step": step, "t": time.time(),
                                       "tok": secret}))
            try:
                s.send(msg)
                sent.append(time.monotonic())
            except BlockingIOError:
                dropped += 1
            idx += 1
            if idx == count:
                idx, cycle, step = 0, cycle + hb, step + 1
        for key, _ in sel.select(max(0.0, min(cycle + idx * gap, end) - time.monotonic())):
            if key.data < 0:
                end = 0.0
                continue
            s, reader, sent = conns[key.data]
            try:
                data = s.recv(1 << 16)
            except BlockingIOError:
                continue
            t = time.monotonic()
            for payload in reader.feed(data):
                msg = msgpack.unpackb(payload, raw=False)
                if msg.get("type") == "hbok" and sent:
                    rtts.append(t - sent.pop(0))
                elif msg.get("type") == "event":
                    events.append(time.time())
                elif msg.get("type") == "collect":
                    s.send(frame(msgpack.packb({"type": "part", "id": msg.get("id"), "tok": secret,
                                                "part": _sim_part(first + key.data, pid, host)})))
    for s, _, _ in conns:
        s.close()
    Path(out).write_text(json.dumps({"rtts": rtts, "events": events, "dropped": dropped}))
    return 0


def _sim_part(rank: int, pid: int, host: str) -> dict[str, Any]:
    """A simulated rank's part of a collection: computing, one thread, the same stack everywhere."""
    rec = {"rank": rank, "host": host, "pid": pid, "t": time.time(), "step": None, "op": None, "colls": {},
           "comms": {}, "detect": True, "threads": [{"name": "MainThread", "ident": 1, "stack": 0, "samples": [0],
                                                     "main": True}]}
    return {"stacks": [[["sim.py", 10, "<module>"], ["sim.py", 3, "work"]]], "ranks": [rec], "missing": []}


def _diagnose(jd: Any, out: dict[str, Any]) -> None:
    """One global diagnosis through the real tool client; its time and the report's own timing."""
    from planaria.launch.client import request
    t = time.monotonic()
    try:
        rep = request(jd, {"type": "diagnose", "rounds": 1}, timeout=120) or {}
    except Exception as exc:  # noqa: BLE001 - the figure says why it is missing
        out["error"] = f"{type(exc).__name__}: {exc}"
        return
    out["s"] = time.monotonic() - t
    report = rep.get("report") or {}
    out["collect_s"] = (report.get("timing") or {}).get("collect_s")
    out["timing"] = report.get("timing")
    out["answered"] = report.get("answered", len(report.get("ranks") or []) if isinstance(report.get("ranks"), list) else None)
    out["error"] = rep.get("error")


# -- the driver -------------------------------------------------------------------------------
def _cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _node_agents(jd: Any, uri: str, tmp: str, nodes: int, fanout: int,
                 timeout: float) -> tuple[list[subprocess.Popen[bytes]], str]:
    """Start ``nodes`` real node agents (``planaria.launch.nodeagent``) for the controller at ``uri``,
    in a routed tree of ``fanout`` (0: all connected to the controller); return them and their
    sockets' path template (``{node}``) once every one listens."""
    from planaria.events.channel import connect
    from planaria.launch.nodeagent import tree_parent

    template = str(Path(tmp) / "nodes" / "n{node}.sock")
    agents = []
    for i in range(nodes):
        parent = tree_parent(i, fanout)
        via = [] if parent is None else ["--parent", template.format(node=parent)]
        agents.append(subprocess.Popen([sys.executable, "-m", "planaria.launch.nodeagent", "--listen",
                                        template.format(node=i), "--uri", uri, "--secret-file", str(jd.secret_path),
                                        "--node", f"n{i}", *via], stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + timeout
    for i in range(nodes):
        while (s := connect(template.format(node=i), timeout=1.0)) is None:
            if agents[i].poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"node agent {i} did not start listening (exit {agents[i].poll()})")
            time.sleep(0.05)
        s.close()
    return agents, template


def _start_workers(me: list[str], tmp: str, path: str, secret: str, ranks: int, workers: int, hb: float,
                   seconds: float, timeout: float, per_node: int,
                   procs: list[subprocess.Popen[str]]) -> list[str]:
    """Start the worker processes simulating the ranks (appended to ``procs``); their output files."""
    per = -(-ranks // workers)
    outs = []
    for w in range(workers):
        first, count = w * per, min(per, ranks - w * per)
        if count <= 0:
            break
        out = str(Path(tmp) / f"w{w}.json")
        outs.append(out)
        procs.append(subprocess.Popen(me + ["--worker", path, secret, str(first), str(count), str(ranks),
                                            str(hb), str(seconds + 2 * timeout), out, str(per_node)],
                                      stdin=subprocess.PIPE))
    return outs


def _wait_hello(jd: Any, ranks: int, timeout: float) -> list[dict[str, Any]]:
    """Wait until every simulated rank said hello; the controller's ``ps`` rows then."""
    from planaria.launch.client import request
    deadline = time.monotonic() + timeout
    while True:                           # every rank said hello
        rows = request(jd, {"type": "ps"}, timeout=30).get("ranks") or []
        if sum(1 for r in rows if r.get("state") in ("starting", "running")) >= ranks:
            return rows
        if time.monotonic() > deadline:
            raise BenchError(f"only {len(rows)} of {ranks} simulated ranks said hello within {timeout:g} s")
        time.sleep(0.2)


def _observe(jd: Any, ctl: subprocess.Popen[str], agents: list[subprocess.Popen[bytes]], rows: list[dict[str, Any]],
             seconds: float, ps_every: float, per_node: int) -> dict[str, Any]:
    """The measurement window: ``ps`` every ``ps_every`` s for ``seconds``, one event at 40 % of it and
    (through node agents) one diagnosis at 60 %; the controller's and the agents' CPU share over it."""
    from planaria.launch.client import request
    t0, cpu0 = time.monotonic(), _cpu(ctl.pid)
    agents_cpu0 = sum(_cpu(a.pid) for a in agents)
    ps_times: list[float] = []
    ages: list[float] = []
    sent_event = None
    diag: dict[str, Any] = {}
    diag_thread = None
    while time.monotonic() - t0 < seconds:
        t = time.monotonic()
        rows = request(jd, {"type": "ps"}, timeout=30).get("ranks") or []
        ps_times.append(time.monotonic() - t)
        now = time.time()                 # how old the controller's news of each rank is
        ages += [now - r["last_hb"] for r in rows if r.get("last_hb")]
        if sent_event is None and time.monotonic() - t0 > seconds * 0.4:
            sent_event = time.time()
            request(jd, {"type": "notify", "code": "USER+1", "range": None, "info": {"bench": 1}, "affected": [],
                         "t": sent_event}, timeout=30)
        if per_node and diag_thread is None and time.monotonic() - t0 > seconds * 0.6:
            diag_thread = threading.Thread(target=_diagnose, args=(jd, diag), daemon=True)
            diag_thread.start()
        time.sleep(max(0.0, ps_every - (time.monotonic() - t)))
    window = time.monotonic() - t0
    cpu = (_cpu(ctl.pid) - cpu0) / window
    if diag_thread is not None:
        diag_thread.join(130)
    agents_cpu = (sum(_cpu(a.pid) for a in agents) - agents_cpu0) / window
    lost = [r["rank"] for r in rows if r.get("state") not in ("starting", "running")]
    lost_events = sum(1 for e in jd.events() if e.get("type") == "lost")     # while every rank still beats
    return {"ps_times": ps_times, "ages": ages, "sent_event": sent_event, "diag": diag, "cpu": cpu,
            "agents_cpu": agents_cpu, "lost": lost, "lost_events": lost_events}


def _collect_workers(procs: list[subprocess.Popen[str]], outs: list[str], timeout: float) -> dict[str, Any]:
    """Stop the workers and read what they measured: heartbeat round trips, event arrival times, drops."""
    for p in procs:
        if p.stdin:
            p.stdin.close()
    for p in procs:
        p.wait(timeout=timeout)
    rtts: list[float] = []
    got: list[float] = []
    dropped = 0
    drain = 0.0                      # the longest a worker took to read the event on all its ranks
    for out in outs:
        d = json.loads(Path(out).read_text())
        rtts += d["rtts"]
        got += d["events"]
        dropped += d["dropped"]
        if d["events"]:
            drain = max(drain, max(d["events"]) - min(d["events"]))
    return {"rtts": rtts, "got": got, "dropped": dropped, "drain": drain}


def _stop(ctl: subprocess.Popen[str], procs: list[subprocess.Popen[str]],
          agents: list[subprocess.Popen[bytes]]) -> None:
    """End the workers, ask the node agents to end, and end the controller (bounded wait)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for a in agents:                      # they end when the controller does; bounded here
        if a.poll() is None:
            a.terminate()
    if ctl.stdin:
        ctl.stdin.close()
    try:
        ctl.wait(timeout=20)
    except subprocess.TimeoutExpired:
        ctl.kill()


def run_one(ranks: int, seconds: float, hb: float, ps_every: float, workers: int, timeout: float,
            per_node: int = 0, fanout: int = 0) -> dict[str, Any]:
    """One job of ``ranks`` simulated ranks: the figures of the module docstring. With ``per_node``,
    the ranks reach the controller through real node agents, ``per_node`` ranks each."""
    from planaria.launch.jobdir import JobDir

    raise_open_files()
    tmp = tempfile.mkdtemp(prefix="planaria-cp-")
    jd = JobDir.create(tmp)
    me = [sys.executable, "-m", "benchmarks.controlplane"]
    ctl = subprocess.Popen(me + ["--controller", str(jd.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    procs: list[subprocess.Popen[str]] = []
    agents: list[subprocess.Popen[bytes]] = []
    try:
        uri = (ctl.stdout.readline() if ctl.stdout else "").strip()
        path = address_for(uri)
        if not path:
            raise BenchError(f"the controller gave no agent-channel address ({uri!r})")
        if per_node:
            agents, path = _node_agents(jd, uri, tmp, -(-ranks // per_node), fanout, timeout)
        outs = _start_workers(me, tmp, path, jd.secret(), ranks, workers, hb, seconds, timeout, per_node, procs)
        rows = _wait_hello(jd, ranks, timeout)
        seen = _observe(jd, ctl, agents, rows, seconds, ps_every, per_node)
        w = _collect_workers(procs, outs, timeout)
    finally:
        _stop(ctl, procs, agents)
    for a in agents:
        try:
            a.wait(timeout=10)
        except subprocess.TimeoutExpired:
            a.kill()
    return _figures(ranks, workers, seconds, hb, per_node, fanout, len(agents), seen, w, jd.events())


def _figures(ranks: int, workers: int, seconds: float, hb: float, per_node: int, fanout: int, node_agents: int,
             seen: dict[str, Any], w: dict[str, Any], recs: list[dict[str, Any]]) -> dict[str, Any]:
    """One job's row from the window's observations (``_observe``) and the workers' measurements."""
    rtts, ages, got, sent_event, diag = sorted(w["rtts"]), sorted(seen["ages"]), w["got"], seen["sent_event"], seen["diag"]

    def q(f: float) -> float | None:
        return rtts[min(len(rtts) - 1, int(f * len(rtts)))] * 1e3 if rtts else None
    ps_times = seen["ps_times"]
    return {"ranks": ranks, "workers": workers, "seconds": seconds, "hb_s": hb, "per_node": per_node, "fanout": fanout,
            "node_agents": node_agents, "node_agents_cpu": round(seen["agents_cpu"], 4),
            "view_age_p99_ms": ages[min(len(ages) - 1, int(0.99 * len(ages)))] * 1e3 if ages else None,
            "controller_cpu": round(seen["cpu"], 4), "hb_p50_ms": q(0.5), "hb_p99_ms": q(0.99), "heartbeats": len(rtts),
            "false_losses": max(len(seen["lost"]), seen["lost_events"]),
            "ps_median_s": statistics.median(ps_times) if ps_times else None, "ps_calls": len(ps_times),
            "event_to_last_s": (max(got) - sent_event) if got and sent_event else None,
            "event_to_first_s": (min(got) - sent_event) if got and sent_event else None,
            "event_worker_drain_s": w["drain"] if got else None,
            "event_reached": len(got), "hb_dropped": w["dropped"],
            "diagnose_s": diag.get("s"), "diagnose_collect_s": diag.get("collect_s"), "diagnose_error": diag.get("error"),
            "diagnose_timing": diag.get("timing"),
            "controller_errors": [e.get("error") for e in recs if e.get("type") == "controller-error"][:5]}


def run(ranks: str, seconds: float, hb: float, ps_every: float, workers: int, timeout: float,
        per_node: int = 0, fanout: int = 0) -> dict[str, Any]:
    """Every rank count of ``ranks`` (comma-separated), one job each (``per_node``: through node agents)."""
    try:
        counts = [int(x) for x in ranks.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ValueError(f"--ranks: expected positive counts, comma-separated, got {ranks!r}")
    for name, v in (("--seconds", seconds), ("--hb", hb), ("--ps-every", ps_every), ("--timeout", timeout)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v:g}")
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if per_node < 0:
        raise ValueError(f"--ranks-per-node must be 0 (no node agents) or positive, got {per_node}")
    if fanout < 0 or fanout and not per_node:
        raise ValueError(f"--fanout needs --ranks-per-node and must be 0 (every node agent connects to the "
                         f"controller) or positive, got {fanout}")
    rows = [run_one(n, seconds, hb, ps_every, workers, timeout, per_node, fanout) for n in counts]
    return {"benchmark": "controlplane", "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "open_files": raise_open_files()[1], "loadavg": [round(x, 2) for x in os.getloadavg()], "rows": rows}


def show(result: dict[str, Any], as_json: bool = False) -> None:
    """The table of ``run``'s result (or the result as JSON)."""
    from rich.console import Console
    from rich.table import Table

    if as_json:
        print(json.dumps(result, indent=2))
        return
    t = Table(title=f"control plane: real controller, simulated ranks ({result['cores']} cores, "
                    f"open-file limit {result['open_files']})")
    for col in ("ranks", "node agents (CPU)", "controller CPU", "hb p50 / p99", "view age p99", "false losses", "ps",
                "event to last rank", "reached", "diagnosis (collect)"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        def f(v: Any, fmt: str) -> str:
            return "-" if v is None else fmt.format(v)
        na = f"{r['node_agents']} ({100 * r['node_agents_cpu']:.0f} %)" if r.get("node_agents") else "-"
        t.add_row(str(r["ranks"]), na, f"{100 * r['controller_cpu']:.1f} %",
                  f"{f(r['hb_p50_ms'], '{:.2f}')} / {f(r['hb_p99_ms'], '{:.2f}')} ms",
                  f(r.get("view_age_p99_ms"), "{:.0f} ms"), str(r["false_losses"]),
                  f(r["ps_median_s"], "{:.3f} s"), f(r["event_to_last_s"], "{:.3f} s"), f"{r['event_reached']}/{r['ranks']}",
                  r.get("diagnose_error") or (f"{f(r.get('diagnose_s'), '{:.2f} s')} ({f(r.get('diagnose_collect_s'), '{:.2f} s')})"
                                              if r.get("diagnose_s") is not None else "-"))
    Console().print(t)


def command(
    ranks: str = typer.Option("256,4096", "--ranks", help="Simulated rank counts, comma-separated (one job each)."),
    seconds: float = typer.Option(30.0, "--seconds", help="Steady window per job."),
    hb: float = typer.Option(0.5, "--hb", help="Heartbeat interval per rank (a rank's agent beats every 0.5 s)."),
    ps_every: float = typer.Option(1.0, "--ps-every", help="Seconds between ps requests during the window."),
    workers: int = typer.Option(2, "--workers", help="Processes that hold the simulated ranks' connections."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds allowed for every rank's hello."),
    ranks_per_node: int = typer.Option(0, "--ranks-per-node", help="Ranks per real node agent (planaria run --node-agents); 0: every rank connects to the controller itself."),
    fanout: int = typer.Option(0, "--fanout", help="Node agents per branch of the routed tree (0: every node agent connects to the controller)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Control-plane scale: the real controller serving simulated ranks (agent-channel connections).

    Per job: the controller's CPU, the heartbeat round trip (p50/p99), ranks wrongly marked lost,
    the time of a ps request, and an event from a tool until the last rank has it.
    No MPI. Example: python -m benchmarks controlplane --ranks 2000,8192 --seconds 60
    """

    raise typer.Exit(_launch.run_and_show("controlplane", lambda: run(ranks, seconds, hb, ps_every, workers, timeout,
                                                                      ranks_per_node, fanout),
                                          show, json_out))


def process_entry(argv: list[str] | None = None) -> int:
    """The processes the driver starts: the controller (``--controller JOBDIR``) or a worker holding
    simulated ranks (``--worker`` and its nine values)."""
    p = argparse.ArgumentParser(prog="benchmarks.controlplane", description="a process of the control-plane benchmark")
    p.add_argument("--controller", metavar="JOBDIR", help="serve this job directory as the controller")
    p.add_argument("--worker", nargs=9, help="PATH SECRET FIRST COUNT SIZE HB SECONDS OUT PER_NODE")
    a = p.parse_args(argv)
    if a.controller:
        return controller_main(a.controller)
    if a.worker:
        path, secret, first, count, size, hb, seconds, out, per_node = a.worker
        return worker_main(path, secret, int(first), int(count), int(size), float(hb), float(seconds), out,
                           int(per_node))
    p.error("--controller or --worker (the benchmark's command is: python -m benchmarks controlplane)")
    return 2


if __name__ == "__main__":
    sys.exit(process_entry())
