"""The fixed-size header a restore sends ahead of a rank's data, and the receives it allows.

A fresh rank does not know the sizes of what it is about to receive. Each source therefore
sends, before the data, one message of ``HEAD_BYTES`` bytes: a few int64 values (sizes,
versions) and a pickled description of the data. Its size being fixed, the fresh rank posts
the receive of every header the moment it enters the restore, before any source has sent
anything; no probe, no pickled message to receive after the data. A description too long for
the header follows it in a message of its own (``TAG_HEAD_TAIL``).
"""
from __future__ import annotations

import pickle
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from planaria.comm.base import Comm

#: size of a restore header (bytes): two int64 words (count of values, pickle length), the
#: values, then the pickle
HEAD_BYTES = 1024
TAG_HEAD_TAIL = 7308
_TWO = struct.Struct("<qq")


def head_encode(values: tuple[int, ...], obj: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """The header of ``values`` and ``obj`` pickled, and the pickle alone when it does not fit in it."""
    raw = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    head = np.zeros(HEAD_BYTES, dtype=np.uint8)
    k = len(values)
    start = 8 * (2 + k)
    fits = start + len(raw) <= HEAD_BYTES
    words = head[:start].view(np.int64)
    words[0], words[1] = k, len(raw) if fits else -len(raw)
    words[2:] = values
    if fits:
        head[start:start + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        return head, None
    return head, np.frombuffer(raw, dtype=np.uint8).copy()


def head_decode(head: np.ndarray, comm: Comm, source: int) -> tuple[list[int], Any]:
    """The values and the object of a header received from ``source`` (the object's own message
    received from it when it did not fit)."""
    # struct, not numpy views: a fresh rank decodes this right after its receives, when Python's
    # and numpy's code and data are out of the CPU's caches (a numpy view then costs ~12 us, struct ~4)
    mv = memoryview(head)  # type: ignore[arg-type]  # ndarrays export the buffer protocol; numpy's stubs do not say so
    k, length = _TWO.unpack_from(mv, 0)
    start = 8 * (2 + k)
    values = list(struct.unpack_from(f"<{k}q", mv, 16))
    if length >= 0:
        return values, pickle.loads(mv[start:start + length])
    tail = np.empty(-length, dtype=np.uint8)
    comm.Recv(tail, source=source, tag=TAG_HEAD_TAIL)
    return values, pickle.loads(tail.tobytes())


def send_head(comm: Comm, dest: int, tag: int, head: tuple[np.ndarray, np.ndarray | None],
              keep: list[Any]) -> list[Any]:
    """Send a header from ``head_encode`` (and its tail when it has one) to ``dest``: the requests;
    the buffers go to ``keep``."""
    keep.append(head)
    reqs = [comm.Isend(head[0], dest=dest, tag=tag)]
    if head[1] is not None:
        reqs.append(comm.Isend(head[1], dest=dest, tag=TAG_HEAD_TAIL))
    return reqs


def arrivals(reqs: list[Any]) -> Iterator[int]:
    """The indices of the receives ``reqs`` as they complete, whichever first: each tested in turn,
    and after a while with none complete, waited for one at a time (a failure raises there)."""
    pending, idle = list(range(len(reqs))), 0
    while pending:
        for i in list(pending):
            if idle > 200:
                reqs[i].Wait()
            elif not reqs[i].Test():
                continue
            idle = -1
            pending.remove(i)
            yield i
        idle += 1
