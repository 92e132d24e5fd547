"""This rank's state record for global diagnosis: MPI operation, collective counters, thread stacks.

Taken by the agent thread while the application thread runs (or is blocked), so it only
reads: the message log kept by monitored communicators and ``sys._current_frames()``.
Stacks are sampled ``rounds`` times, ``interval`` seconds apart, for the hang filter.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any

_HOST = socket.gethostname()
_SKIP = ("planaria-agent", "planaria-collect")


def _stack(frame: Any) -> tuple[tuple[str, int, str], ...]:
    out = []
    while frame is not None:
        out.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    out.reverse()
    return tuple(out)


def sample_threads(rounds: int, interval: float) -> tuple[list[tuple[int, str]], list[list[Any]]]:
    """``rounds`` samples of every application thread's stack: (thread ident, name) list, per-thread stacks."""
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    order: list[int] = []
    seen: dict[int, list[Any]] = {}
    for i in range(max(rounds, 1)):
        if i:
            time.sleep(interval)
        for ident, frame in sys._current_frames().items():
            name = names.get(ident, "?")
            if ident == me or name.startswith(_SKIP):
                continue
            if ident not in seen:
                seen[ident] = [None] * i
                order.append(ident)
            seen[ident].append(_stack(frame))
    for ident in order:
        seen[ident] += [None] * (max(rounds, 1) - len(seen[ident]))
    return [(i, names.get(i, "?")) for i in order], [seen[i] for i in order]


def take(rank: int, rounds: int = 1, interval: float = 0.0, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A one-rank *part* (see ``planaria.diagnose.collect``): this rank's record and its stack table."""
    from planaria.comm import msglog
    from planaria.runtime import bootstrap
    lg = msglog.log()
    op = colls = comms = None
    if lg is not None:
        op = lg.current()
        if op is not None:
            op["site"] = lg.site()
        colls = lg.colls()
        comms = lg.members()
    threads, samples = sample_threads(rounds, interval)
    table: dict[Any, int] = {}
    stacks: list[Any] = []
    tinfo = []
    for (ident, name), seq in zip(threads, samples):
        ids = []
        for st in seq:
            if st is None:
                ids.append(-1)
                continue
            idx = table.get(st)
            if idx is None:
                idx = table[st] = len(stacks)
                stacks.append([list(f) for f in st])
            ids.append(idx)
        first = next((x for x in ids if x >= 0), -1)
        tinfo.append({"name": name, "ident": ident, "stack": first, "samples": ids,
                      "main": ident == threading.main_thread().ident})
    rec: dict[str, Any] = {"rank": rank, "host": _HOST, "pid": os.getpid(), "t": time.time(),
                           "step": bootstrap.current_step(), "op": op, "colls": colls or {},
                           "comms": comms or {}, "threads": tinfo, "detect": lg is not None}
    if lg is not None and lg.ioerrors:
        rec["ioerrors"] = [{"t": t, "what": w} for t, w in list(lg.ioerrors)]
    if status:
        rec.update(status)
    return {"stacks": stacks, "ranks": [rec], "missing": []}
