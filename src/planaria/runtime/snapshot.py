"""This rank's state record for global diagnosis: MPI operation, collective counters, thread stacks.

Taken by the agent thread while the application thread runs (or is blocked), so it only
reads: the message log kept by monitored communicators and ``sys._current_frames()``.
Stacks are sampled ``rounds`` times, ``interval`` seconds apart, for the hang filter.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from planaria.diagnose.hangfilter import sample_threads
from planaria.runtime.state import current_step

_HOST = socket.gethostname()
_PROVIDERS: dict[str, Any] = {}     # record key -> callable adding to this rank's state (e.g. running CFs)


def provide(key: str, fn: Any) -> None:
    """Add ``key: fn()`` to every state record of this rank (``fn=None`` removes it). A layer above
    the runtime (the fragments executor) says what it runs this way; a failing ``fn`` adds nothing."""
    if fn is None:
        _PROVIDERS.pop(key, None)
    else:
        _PROVIDERS[key] = fn
_SKIP = ("planaria-",)   # planaria's own threads (agent, collection, localization, injection timers)


def take(rank: int, rounds: int = 1, interval: float = 0.0, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A one-rank *part* (see ``planaria.diagnose.collect``): this rank's record and its stack table."""
    from planaria.comm import msglog
    lg = msglog.log()
    op = colls = comms = None
    if lg is not None:
        op = lg.current()
        if op is not None:
            op["site"] = lg.site()
            if op.get("kind") == "p2p":
                other = lg.unmatched()
                if other is not None:
                    op["unmatched"] = other
        colls = lg.colls()
        comms = lg.members()
    idents, samples, names, table = sample_threads(max(rounds, 1), interval, skip=_SKIP)
    stacks = [[list(f) for f in st] for st in table]
    main = threading.main_thread().ident
    tinfo = [{"name": name, "ident": ident, "stack": int(row[0]), "samples": [int(x) for x in row],
              "main": ident == main} for ident, name, row in zip(idents, names, samples, strict=True)]
    rec: dict[str, Any] = {"rank": rank, "host": _HOST, "pid": os.getpid(), "t": time.time(),
                           "step": current_step(), "op": op, "colls": colls or {},
                           "comms": comms or {}, "threads": tinfo, "detect": lg is not None}
    if lg is not None:
        rec["sent"], rec["recvd"] = lg.p2p_counts()
    if lg is not None and lg.ioerrors:
        rec["ioerrors"] = [{"t": t, "what": w, "site": site} for t, w, site in list(lg.ioerrors)][-8:]
    for key, fn in list(_PROVIDERS.items()):
        try:
            value = fn()
        except Exception:  # noqa: BLE001 - a provider must never break a diagnosis
            continue
        if value:
            rec[key] = value
    if status:
        rec.update(status)
    return {"stacks": stacks, "ranks": [rec], "missing": []}
