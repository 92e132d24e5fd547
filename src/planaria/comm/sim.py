"""Simulated process failures with ULFM semantics on any MPI-3 library (paper 001).

Each process carries an alive/failed attribute. A process that "fails" stops running
application code but stays inside MPI as a *zombie* until the job ends: it announces its
failure, swallows messages sent to it, and finalizes with everyone else, so a library
without fault tolerance never sees a real death.

How survivors learn of failures: every operation is posted non-blocking and progressed
in a loop that also drains a control channel (a private duplicate of COMM_WORLD, one
tag). The channel carries failure notices (F), revoke notices (R), end-of-job notices (B)
and agreement messages (A). One channel and one tag keep every pair of processes FIFO,
which the agreement below relies on.

Agreement (used by ``agree`` and ``shrink``): the lowest living member coordinates;
members send it their flag and what they know of failures; it decides and sends the
decision to all members in one burst. Failures are only ever injected at the entry of
a call (never inside an agreement or between agreement and group creation), and a dying
process sends its failure notice after anything it sent before, so a decision is seen
by everyone or by no one, and the next coordinator takes over cleanly.

Each method also keeps the message log's counters when its communicator is recorded (one test
of ``_ml_on`` otherwise; see ``comm/base.py``).
"""
from __future__ import annotations

import inspect
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from mpi4py import MPI

from planaria.comm.base import Comm, Request
from planaria.comm import errors as _errors
from planaria.comm.errors import ProcFailedError, RevokedError

CTL_TAG = 32001
_PENDING = object()


def _backoff(n: int) -> None:
    """Spin briefly, then sleep a little longer each round (ranks often share cores)."""
    if n < 20:
        return
    time.sleep(5e-5 if n < 200 else (2e-4 if n < 2000 else 1e-3))


class SimWorld:
    """Process-wide simulation state: who failed, what is revoked, the control channel."""

    def __init__(self) -> None:
        self.ctl = MPI.COMM_WORLD.Dup()
        self.wrank = self.ctl.Get_rank()
        self.wsize = self.ctl.Get_size()
        self.failed: set[int] = set()          # world ranks
        self.revoked: set[str] = set()         # communicator ids
        self.bye: set[int] = set()
        self.sends: list[Any] = []             # control sends still in flight
        self.orphans: list[Any] = []           # requests given up after a failure (kept alive)
        self.boxes: dict[tuple[str, int], list[tuple]] = defaultdict(list)
        self.comms: dict[str, Any] = {}        # every communicator we are in: the zombie drains them
        self.dead = False
        self.check: Callable[[], None] | None = None   # injection point (time triggers)

    # -- control channel -----------------------------------------------------------
    def post(self, dst: int, msg: tuple) -> None:
        self.sends.append(self.ctl.isend(msg, dst, CTL_TAG))

    def progress(self) -> None:
        """Drain the control channel and complete finished control sends."""
        ctl = self.ctl
        while True:
            m = ctl.improbe(MPI.ANY_SOURCE, CTL_TAG)
            if m is None:
                break
            msg = m.recv()
            kind = msg[0]
            if kind == "F":
                self.failed.add(msg[1])
            elif kind == "R":
                self.revoked.add(msg[1])
            elif kind == "B":
                self.bye.add(msg[1])
            elif kind == "A":
                self.boxes[(msg[1], msg[2])].append(msg[3:])
        if self.sends:
            self.sends = [r for r in self.sends if not r.Test()]

    # -- failure and end of job ------------------------------------------------------
    def die(self) -> None:
        """Become a failed process: announce it, then serve MPI until the job ends (never returns to the app)."""
        if self.dead:
            return
        self.dead = True
        self.failed.add(self.wrank)
        for r in range(self.wsize):
            if r != self.wrank:
                self.post(r, ("F", self.wrank))
        self.wait_for_end(sink=True)

    def say_bye(self) -> None:
        """A living process has finished: tell the others, then wait until every process has finished or failed."""
        if self.dead:
            return
        for r in range(self.wsize):
            if r != self.wrank:
                self.post(r, ("B", self.wrank))
        self.bye.add(self.wrank)
        self.wait_for_end(sink=False)

    def wait_for_end(self, sink: bool) -> None:
        n = 0
        everyone = set(range(self.wsize))
        while True:
            self.progress()
            if sink:
                self._sink()
            if everyone <= (self.failed | self.bye) and not self.sends:
                return
            n += 1
            time.sleep(1e-4 if n < 100 else 2e-3)

    def _sink(self) -> None:
        """Receive and drop application messages sent to this failed process, so senders never block."""
        st = MPI.Status()
        for c in list(self.comms.values()):
            while True:
                m = c.improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, st)
                if m is None:
                    break
                m.Recv([bytearray(max(st.Get_count(MPI.BYTE), 1)), MPI.BYTE])


class _SimReq(Request):
    __slots__ = ("_r", "_comm", "_peer", "_status")

    def __init__(self, req: Any, comm: SimComm, peer: int | None, status: Any = None) -> None:
        self._r, self._comm, self._peer, self._status = req, comm, peer, status

    def Test(self) -> bool:
        if self._r.Test(self._status):
            return True
        self._comm._raise_if_broken(self._peer, self._r)
        return False

    def Wait(self) -> None:
        self._comm._wait(self._r, self._peer, self._status)

    def Cancel(self) -> None:
        try:
            self._r.Cancel()
        except MPI.Exception:
            pass


class _SimLReq(_SimReq):
    """A request of a recorded communicator: what its ``Wait`` waits for, and a receive counted once done."""

    __slots__ = ("_op", "_tag", "_buf", "_count")

    def __init__(self, req: Any, comm: SimComm, peer: int, op: str, tag: int, buf: Any, count: int) -> None:
        # count: the source (communicator rank) a receive adds to when it completes; -1 for sends and wildcards
        self._r, self._comm, self._peer, self._status = req, comm, peer, None
        self._op, self._tag, self._buf, self._count = op, tag, buf, count

    def Test(self) -> bool:
        done = _SimReq.Test(self)
        if done and self._count >= 0:
            self._comm._ml_recvd[self._count] += 1
            self._count = -1
        return done

    def Wait(self) -> None:
        self._comm._wait(self._r, self._peer, self._status)
        if self._count >= 0:
            self._comm._ml_recvd[self._count] += 1
            self._count = -1


class _SimObjRecv(Request):
    __slots__ = ("_comm", "_peer", "_tag", "_done", "_obj")
    _op = "irecv"

    def __init__(self, comm: SimComm, source: int, tag: int) -> None:
        self._comm, self._peer, self._tag = comm, source, tag
        self._done, self._obj = False, None

    def Test(self) -> bool:
        if not self._done:
            comm = self._comm
            m = comm._c.improbe(self._peer, self._tag)
            if m is not None:
                self._obj, self._done = m.recv(), True
                if comm._ml_on and self._peer >= 0:
                    comm._ml_recvd[self._peer] += 1
            else:
                comm._raise_if_broken(self._peer, None)
        return self._done

    def Wait(self) -> None:
        if not self._done:
            self._obj, self._done = self._comm.recv(self._peer, self._tag), True     # counted there

    def _value(self) -> Any:
        return self._obj

    def Cancel(self) -> None:
        self._done = True


class SimComm(Comm):
    """Fault-tolerant communicator whose failures are simulated (works on any MPI-3 library)."""

    backend = "sim"

    def __getattr__(self, name: str) -> Any:
        """mpi4py's communicator calls this backend does not simulate: a call that raises one line.

        Handing them to the MPI library would wait forever for a zombie after a failure."""
        if name.startswith("_") or not hasattr(MPI.Intracomm, name):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")
        why = (f"Comm.{name} is not available on the sim backend (it cannot be made failure-safe there); "
               f"use the ulfm backend")
        if not inspect.isroutine(getattr(MPI.Intracomm, name)):
            raise NotImplementedError(why)          # a property: refused on access

        def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(why)
        unavailable.__name__ = name
        return unavailable

    def __init__(self, world: SimWorld, mpi_comm: Any, cid: str, members: list[int]) -> None:
        super().__init__(mpi_comm)
        self._w = world
        self._cid = cid
        self._members = members                       # world rank of each rank
        self._pos = {wr: i for i, wr in enumerate(members)}
        self._acked: set[int] = set()
        self._seq = 0                                  # agreement instances
        self._children = 0                             # dup/shrink counter, for child ids
        world.comms[cid] = mpi_comm

    def _world_of(self, rank: int) -> int:
        return self._members[rank]

    # -- failure checks ------------------------------------------------------------------
    def _dead(self) -> set[int]:
        failed = self._w.failed
        if not failed:
            return set()
        pos = self._pos
        return {pos[f] for f in failed if f in pos}

    def _raise_if_broken(self, peer: int | None, req: Any, keep: tuple = ()) -> None:
        """Raise RevokedError/ProcFailedError if the operation can no longer complete (ULFM rules)."""
        w = self._w
        w.progress()
        if self._cid in w.revoked:
            self._orphan(req, peer is None, keep)
            raise self._ml_noted(RevokedError())
        if not w.failed:
            return
        dead = self._dead()
        if not dead:
            return
        if peer is None:                      # collective: any dead member breaks it ...
            if req is not None and req.Test():
                return                        # ... unless its last part arrived before the death
            self._orphan(req, True, keep)
            raise self._failed(dead)
        if peer == MPI.ANY_SOURCE:
            unacked = dead - self._acked
            if unacked:
                self._orphan(req, False, keep)
                raise self._failed(unacked)
        elif peer in dead:
            self._orphan(req, False, keep)
            raise self._failed({peer})

    def _failed(self, ranks: set[int]) -> ProcFailedError:
        """The error to raise; observers (the runtime's relay) hear of the failed world ranks."""
        if _errors._observers:
            _errors.saw_failed(self._world_of(r) for r in ranks)
        return self._ml_noted(ProcFailedError(ranks))

    def _orphan(self, req: Any, collective: bool = False, keep: tuple = ()) -> None:
        """Give up on a request but keep it and its buffers alive; point-to-point ones are cancelled too.

        A given-up request may still complete later and write into its receive buffer, and
        mpi4py does not hold the buffers of every nonblocking collective (Iallgatherv with
        counts, for one), so ``keep`` holds them here. Cancelling a nonblocking collective is
        erroneous in MPI, so a collective request is only parked.
        """
        if req is None:
            return
        if not collective:
            try:
                req.Cancel()
            except MPI.Exception:
                pass
        self._w.orphans.append((req, keep))

    def _enter(self, peer: int | None) -> None:
        """Entry of every operation: injection point, then ULFM checks."""
        w = self._w
        if w.check is not None:
            w.check()
        self._raise_if_broken(peer, None)

    def _poll(self, test: Callable[[], Any], peer: int | None, req: Any, keep: tuple = ()) -> Any:
        n = 0
        w = self._w
        while True:
            out = test()
            if out is not _PENDING:
                return out
            self._raise_if_broken(peer, req, keep)
            if w.check is not None:
                w.check()
            n += 1
            _backoff(n)

    def _wait(self, req: Any, peer: int | None, status: Any = None, keep: tuple = ()) -> None:
        self._poll(lambda: None if req.Test(status) else _PENDING, peer, req, keep)

    def _coll(self, req: Any, *keep: Any) -> None:
        """Wait for a nonblocking collective; ``keep``: its buffers, held if the request is given up."""
        self._wait(req, None, keep=keep)

    # -- point-to-point --------------------------------------------------------------------
    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        self._enter(dest)
        if self._msgfault is None or self._outgoing(dest):
            self._wait(self._c.Isend(buf, dest, tag), dest)
        if self._ml_on and dest >= 0:           # a dropped message too
            self._ml_sent[dest] += 1

    def Recv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> None:
        self._enter(source)
        self._wait(self._c.Irecv(buf, source, tag), source, status, keep=(buf,))
        if self._ml_on and source >= 0:
            self._ml_recvd[source] += 1

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        self._enter(dest)
        if self._msgfault is not None and not self._outgoing(dest):
            req: Any = MPI.REQUEST_NULL
        else:
            req = self._c.Isend(buf, dest, tag)
        if self._ml_on:
            if dest >= 0:                       # counted when posted (a dropped message too)
                self._ml_sent[dest] += 1
            return _SimLReq(req, self, dest, "Isend", tag, buf, -1)
        return _SimReq(req, self, dest)

    def Irecv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> Request:
        self._enter(source)
        req = self._c.Irecv(buf, source, tag)
        if self._ml_on:
            return _SimLReq(req, self, source, "Irecv", tag, buf, source if source >= 0 else -1)
        return _SimReq(req, self, source)

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG, status: Any = None) -> None:
        self._enter(dest)
        rreq = self._c.Irecv(recvbuf, source, recvtag)
        if self._msgfault is None or self._outgoing(dest):
            self._wait(self._c.Isend(sendbuf, dest, sendtag), dest)
        self._wait(rreq, source, status, keep=(recvbuf,))
        if self._ml_on:
            if dest >= 0:
                self._ml_sent[dest] += 1
            if source >= 0:
                self._ml_recvd[source] += 1

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        self._enter(dest)
        if self._msgfault is None or self._outgoing(dest):
            self._wait(self._c.isend(obj, dest, tag), dest)
        if self._ml_on and dest >= 0:
            self._ml_sent[dest] += 1

    def recv(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Any:
        self._enter(source)
        c = self._c

        def test() -> Any:
            m = c.improbe(source, tag, status)
            return _PENDING if m is None else m.recv(status)
        obj = self._poll(test, source, None)
        if self._ml_on and source >= 0:
            self._ml_recvd[source] += 1
        return obj

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        self._enter(dest)
        if self._msgfault is not None and not self._outgoing(dest):
            req: Any = MPI.REQUEST_NULL
        else:
            req = self._c.isend(obj, dest, tag)
        if self._ml_on:
            if dest >= 0:
                self._ml_sent[dest] += 1
            return _SimLReq(req, self, dest, "isend", tag, None, -1)
        return _SimReq(req, self, dest)

    def irecv(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> Request:
        self._enter(source)
        return _SimObjRecv(self, source, tag)

    # -- buffer collectives: non-blocking MPI-3 collectives, progressed with failure checks --
    def Barrier(self) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Ibarrier())

    def Bcast(self, buf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Ibcast(buf, root), buf)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = None, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Ireduce(sendbuf, recvbuf, MPI.SUM if op is None else op, root), sendbuf, recvbuf)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = None) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Iallreduce(sendbuf, recvbuf, MPI.SUM if op is None else op), sendbuf, recvbuf)

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Igather(sendbuf, recvbuf, root), sendbuf, recvbuf)

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Igatherv(sendbuf, recvbuf, root), sendbuf, recvbuf)

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Iallgather(sendbuf, recvbuf), sendbuf, recvbuf)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Iallgatherv(sendbuf, recvbuf), sendbuf, recvbuf)

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Iscatter(sendbuf, recvbuf, root), sendbuf, recvbuf)

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Iscatterv(sendbuf, recvbuf, root), sendbuf, recvbuf)

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Ialltoall(sendbuf, recvbuf), sendbuf, recvbuf)

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Ialltoallv(sendbuf, recvbuf), sendbuf, recvbuf)

    # -- fault tolerance -----------------------------------------------------------------------
    def revoke(self) -> None:
        w = self._w
        if self._cid in w.revoked:
            return
        w.revoked.add(self._cid)
        for wr in self._members:
            if wr != w.wrank and wr not in w.failed:
                w.post(wr, ("R", self._cid))
        w.progress()

    def is_revoked(self) -> bool:
        self._w.progress()
        return self._cid in self._w.revoked

    def get_failed(self) -> set[int]:
        self._w.progress()
        return self._dead()

    def ack_failed(self) -> int:
        self._w.progress()
        self._acked = self._dead()
        return len(self._acked)

    def agree(self, flag: bool | int) -> bool | int:
        if self._ml_on:
            self._ml_seq += 1
        if self._w.check is not None:
            self._w.check()
        value, failed, err = self._agreement(int(flag))
        if err:
            dead = {self._pos[f] for f in failed}
            raise self._ml_noted(ProcFailedError(dead - self._acked or dead,
                                                 f"agreement found unacknowledged failures: rank(s) {sorted(dead)}"))
        return bool(value) if isinstance(flag, bool) else value

    def shrink(self) -> SimComm:
        if self._ml_on:
            self._ml_seq += 1
        w = self._w
        if w.check is not None:
            w.check()                     # a failure may strike as recovery starts
        _, failed, _ = self._agreement(1)
        survivors = [wr for wr in self._members if wr not in failed]
        cid = self._child_id("s")
        wg = w.ctl.Get_group()
        g = wg.Incl(survivors)
        # Created from the control communicator: it carries no abandoned collectives.
        newc = w.ctl.Create_group(g, tag=_tag_for(cid))
        g.Free(), wg.Free()
        new = SimComm(w, newc, cid, survivors)
        new._msgfault = self._msgfault
        if self._ml_on:
            self._ml_child(new, "k")
        return new

    def dup(self) -> SimComm:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        newc, req = _idup(self._c)
        self._coll(req)
        new = SimComm(self._w, newc, self._child_id("d"), list(self._members))
        new._msgfault = self._msgfault
        if self._ml_on:
            self._ml_child(new, "d")
        return new

    def split(self, color: int | None = 0, key: int = 0) -> SimComm | None:
        # Not MPI_Comm_split: a blocking collective would wait forever for a zombie. The
        # failure-safe allgather raises instead; once it completed everywhere no rank can
        # fail before the group is created (failures only strike at call entries).
        if self._ml_on:
            self._ml_seq += 1
        if color == MPI.UNDEFINED:
            color = None
        entries = self.allgather((color, key))
        cid = self._child_id("p")
        if color is None:
            if self._ml_on:
                self._ml_child(None, "s")
            return None
        members = sorted((k, r) for r, (c, k) in enumerate(entries) if c == color)
        wranks = [self._members[r] for _, r in members]
        w = self._w
        wg = w.ctl.Get_group()
        g = wg.Incl(wranks)
        newc = w.ctl.Create_group(g, tag=_tag_for(f"{cid}:{color}"))
        g.Free(), wg.Free()
        new = SimComm(w, newc, f"{cid}c{color}", wranks)
        new._msgfault = self._msgfault
        if self._ml_on:
            self._ml_child(new, "s", color)
        return new

    def free(self) -> None:
        self._w.comms.pop(self._cid, None)   # never MPI-free: a zombie may still drain it

    def _child_id(self, kind: str) -> str:
        self._children += 1
        return f"{self._cid}.{kind}{self._children}"

    def _agreement(self, flag: int) -> tuple[int, frozenset[int], bool]:
        """Fault-tolerant agreement: (AND of flags, world ranks failed, some failure unacknowledged)."""
        w = self._w
        key = (self._cid, self._seq)
        self._seq += 1
        me = w.wrank
        box = w.boxes[key]
        known = frozenset(f for f in w.failed if f in self._pos)
        acked = frozenset(self._members[r] for r in self._acked)
        sent_to = None
        n = 0
        while True:
            w.progress()
            for m in box:
                if m[0] == "D":
                    _, _, value, failed, err = m
                    w.failed.update(failed)
                    del w.boxes[key]
                    return value, frozenset(failed), err
            alive = [wr for wr in self._members if wr not in w.failed]
            coord = alive[0]
            if coord == me:
                contribs = {m[1]: m for m in box if m[0] == "C"}
                if all(wr == me or wr in contribs for wr in alive):
                    value = flag
                    failed = set(known) | {f for f in w.failed if f in self._pos}
                    acked_all = set(acked)
                    for _, _, f, kn, ak in contribs.values():
                        value &= f
                        failed |= set(kn)
                        acked_all &= set(ak)
                    err = bool(failed - acked_all)
                    decision = ("D", me, value, tuple(sorted(failed)), err)
                    for wr in alive:
                        if wr != me:
                            w.post(wr, ("A", key[0], key[1]) + decision)
                    del w.boxes[key]
                    return value, frozenset(failed), err
            elif sent_to != coord:
                w.post(coord, ("A", key[0], key[1], "C", me, flag, tuple(known), tuple(acked)))
                sent_to = coord
            n += 1
            _backoff(n)


def _tag_for(cid: str) -> int:
    import zlib
    return zlib.crc32(cid.encode()) % 30000 + 1


def _idup(c: Any) -> tuple[Any, Any]:
    out = c.Idup()
    return out if isinstance(out, tuple) else (out, MPI.REQUEST_NULL)


_WORLD: SimWorld | None = None


def sim_world() -> SimComm:
    """The simulation's COMM_WORLD (creates the process-wide state on first call)."""
    global _WORLD
    if _WORLD is None:
        _WORLD = SimWorld()
    base = MPI.COMM_WORLD.Dup()
    return SimComm(_WORLD, base, "w", list(range(_WORLD.wsize)))


def sim_state() -> SimWorld | None:
    """The process-wide simulation state, if the sim backend is in use."""
    return _WORLD
