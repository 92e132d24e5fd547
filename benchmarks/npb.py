"""NPB-like kernels (CG, MG, FT, EP, IS, HALO) on ``planaria.world()``, for measuring planaria's own costs.

Run in every rank: ``mpiexec [--with-ft ulfm] -n N python -m benchmarks.npb --kernel cg,mg --class S``.
Each kernel builds its problem (untimed), runs its iterations between a barrier and the end of the
last iteration (timed, ``time.perf_counter``), calls ``planaria.step(i)`` once per iteration and
then checks its answer (untimed). Rank 0 prints one ``RESULT {json}`` line (and writes ``--out``):
per kernel the timed region (max over ranks), the verification flag (every rank agreed), the
iteration count and the communication calls started per rank (a rate: per-message costs scale with it).

The kernels follow the NAS Parallel Benchmarks in spirit, small enough for a laptop and with
many messages per second. Every class checks the communication pattern against a whole-problem
computation on rank 0; class S (or ``--serial-check on``) also repeats the whole run serially there:

- ``cg``: inverse power iteration with ``cgit`` CG steps per outer iteration on a random sparse
  SPD matrix (row blocks; the search direction is allgathered, dot products are Allreduces);
  verified by the true residual of every solve and the distributed product A v against the whole
  matrix.
- ``mg``: V-cycles (red-black Gauss-Seidel, cell-centred averaging/trilinear transfer) for the
  periodic 3-D Poisson problem of NPB MG, z slabs with a Sendrecv halo exchange per half-sweep;
  verified by the residual reduction per cycle and the distributed Laplacian against np.roll.
- ``ft``: NPB FT: forward 3-D FFT once, then per step a spectral decay and an inverse FFT (local
  2-D FFTs plus an Alltoall transpose) and a checksum; verified by Parseval at every step and the
  checksums of ``numpy.fft.fftn`` on the whole field (first, middle and last step; every step at S).
- ``ep``: NPB EP (Gaussian pairs by the polar method, counts in square annuli), batches dealt out
  round-robin, one Allreduce; verified by counts and acceptance rate.
- ``is``: integer sort of NPB IS: bucket histogram Allreduce, Alltoall of counts, Alltoallv of keys,
  local counting sort; verified: globally sorted and the same multiset of keys.
- ``halo``: 5-point diffusion on a periodic 2-D grid over a 2-D process grid, Isend/Irecv halo
  exchange every step; verified by conservation and one step against np.roll on the whole grid.

Run with one BLAS thread per rank (``OPENBLAS_NUM_THREADS=1``; the detect driver sets it): the
kernels avoid BLAS, but idle BLAS threads spinning on an oversubscribed machine distort timings.

``--alternate PAIRS`` (with ``PLANARIA_DETECT=1``; ``python -m benchmarks detect --within-job``) times
blocks of iterations instead of whole runs: after one warm-up run, whose time per iteration sets
the block to about ``--block-s`` seconds, the kernel runs again and again while ``BlockTimer``,
called at the start of every iteration, switches detection off or on (``set_detection``) before
each block in ABBA order, meets the other ranks in a barrier and times the block; a block still
open when a run ends is dropped. Every run is verified as usual.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from planaria.runtime.bootstrap import DETECTION_PARTS
from planaria.runtime.bootstrap import step as _pl_step
from planaria.util.env import PLANARIA_DETECT

#: what ``--detect-part`` may switch: a part of detection, or ``none``, an A/A control whose 'off'
#: blocks switch nothing, so its ratio is the timing's own bias and spread on this machine
CONTROL_PART = "none"
PARTS = (*DETECTION_PARTS, CONTROL_PART)

MODULE = "benchmarks.npb"
KERNELS = ("cg", "mg", "ft", "ep", "is", "halo")
CLASSES = ("S", "W", "A")
SEED = 314159

# Problem sizes per kernel and class. S: tests (well under 1 s); W and A: ~1-3 s of timed region
# at 4 ranks on 2 cores, with thousands of messages per second per rank.
PARAMS: dict[str, dict[str, dict[str, int]]] = {
    "cg": {"S": dict(na=1400, nonzer=7, niter=4, cgit=25),
           "W": dict(na=7000, nonzer=8, niter=60, cgit=25),
           "A": dict(na=14000, nonzer=11, niter=75, cgit=25)},
    "mg": {"S": dict(n=32, cycles=4, nu=2, coarse=8),
           "W": dict(n=64, cycles=20, nu=2, coarse=8),
           "A": dict(n=128, cycles=6, nu=2, coarse=8)},
    "ft": {"S": dict(nx=32, ny=32, nz=32, niter=6),
           "W": dict(nx=64, ny=64, nz=32, niter=300),
           "A": dict(nx=64, ny=64, nz=64, niter=350)},
    "ep": {"S": dict(m=18, batch=1 << 14),
           "W": dict(m=25, batch=1 << 15),
           "A": dict(m=26, batch=1 << 15)},
    "is": {"S": dict(logn=16, logb=11, niter=10),
           "W": dict(logn=18, logb=16, niter=150),
           "A": dict(logn=20, logb=19, niter=100)},
    "halo": {"S": dict(n=64, niter=200),
             "W": dict(n=256, niter=4000),
             "A": dict(n=512, niter=3000)},
}


@dataclass
class KernelRun:
    """One kernel's outcome on one rank."""
    time_s: float                 # this rank's timed region
    iters: int                    # iterations (each starts with planaria.step)
    calls: int                    # communication calls this rank started in the timed region
    ok: bool                      # this rank's verification verdict
    detail: dict[str, Any] = field(default_factory=dict)


class Net:
    """The communication a kernel needs, on a planaria communicator, counting the calls it starts.

    A serial stand-in (``comm=None``, one rank) runs the same kernel code for reference answers.
    """

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.rank = comm.rank if comm is not None else 0
        self.size = comm.size if comm is not None else 1
        self.calls = 0

    def sums(self, values: list[float] | np.ndarray) -> np.ndarray:
        """Global sums of a few float64 values (one Allreduce)."""
        a = np.asarray(values, dtype=np.float64)
        if self.comm is None:
            return a.copy()
        out = np.empty_like(a)
        self.comm.Allreduce(a, out)
        self.calls += 1
        return out

    def allgatherv(self, local: np.ndarray, counts: np.ndarray, displs: np.ndarray,
                   out: np.ndarray) -> np.ndarray:
        """Concatenate every rank's float64 block into ``out`` (one Allgatherv)."""
        if self.comm is None:
            out[:] = local
            return out
        from mpi4py import MPI
        self.comm.Allgatherv(local, [out, (counts, displs), MPI.DOUBLE])
        self.calls += 1
        return out


def _timed(comm: Any, body: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``body`` after a barrier; (its value, seconds on this rank)."""
    comm.Barrier()
    t0 = time.perf_counter()
    out = body()
    return out, time.perf_counter() - t0


def _blocks(n: int, parts: int) -> np.ndarray:
    """Offsets of ``parts`` near-equal contiguous blocks of ``n`` items (length parts+1)."""
    base, extra = divmod(n, parts)
    sizes = np.full(parts, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate(([0], np.cumsum(sizes)))


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Dot product without BLAS: a multi-threaded BLAS in every rank of an oversubscribed job crawls."""
    return float(np.multiply(a, b).sum())


def _energy(a: np.ndarray) -> float:
    """Sum of |a|^2 of a complex array (no BLAS, see _dot)."""
    return float(np.square(a.real).sum() + np.square(a.imag).sum())


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


# =========================================================================== CG
def cg_rows(na: int, nonzer: int, lo: int, hi: int) -> tuple[np.ndarray, ...]:
    """Rows lo..hi of a random sparse SPD matrix (symmetric, strictly diagonally dominant): COO sorted by row."""
    rng = np.random.default_rng([SEED, 1])
    rows = np.repeat(np.arange(na, dtype=np.int64), nonzer)
    cols = rng.integers(0, na, size=rows.size)
    vals = rng.uniform(0.1, 1.0, size=rows.size)
    margin = rng.uniform(1e-3, 1e-2, size=na)
    keep = rows != cols
    r = np.concatenate((rows[keep], cols[keep]))
    c = np.concatenate((cols[keep], rows[keep]))
    v = -np.concatenate((vals[keep], vals[keep]))
    diag = np.bincount(r, weights=-v, minlength=na) + margin
    sel = (r >= lo) & (r < hi)
    r, c, v = r[sel] - lo, c[sel], v[sel]
    order = np.lexsort((c, r))
    return r[order], c[order], v[order], diag[lo:hi]


class CGSolver:
    """NPB CG on this rank's row block: solve A z = x with ``cgit`` CG steps, zeta = shift + 1/(x.z), x = z/|z|."""

    SHIFT = 10.0

    def __init__(self, net: Net, p: dict[str, int]) -> None:
        self.net, self.p, na = net, p, p["na"]
        off = _blocks(na, net.size)
        self.lo, self.hi = int(off[net.rank]), int(off[net.rank + 1])
        self.counts, self.displs = np.diff(off), off[:-1].copy()
        self.rows, self.cols, self.vals, self.diag = cg_rows(na, p["nonzer"], self.lo, self.hi)
        self.nloc = self.hi - self.lo
        self.full = np.empty(na)

    def apply(self, v_loc: np.ndarray) -> np.ndarray:
        """This rank's block of A v (v given by blocks: one Allgatherv)."""
        vf = self.net.allgatherv(v_loc, self.counts, self.displs, self.full)
        return np.bincount(self.rows, weights=self.vals * vf[self.cols], minlength=self.nloc) + self.diag * vf[self.lo:self.hi]

    def iterate(self, step: Callable[[int], None] | None) -> dict[str, Any]:
        net, p = self.net, self.p
        x = np.ones(self.nloc)
        zeta, worst = 0.0, 0.0
        for it in range(p["niter"]):
            if step is not None:
                step(it)
            z = np.zeros(self.nloc)
            r = x.copy()
            d = r.copy()
            rho = net.sums([_dot(r, r)])[0]
            for _ in range(p["cgit"]):
                q = self.apply(d)
                dq = net.sums([_dot(d, q)])[0]
                alpha = rho / dq if dq != 0.0 else 0.0
                z += alpha * d
                r -= alpha * q
                rho_new = net.sums([_dot(r, r)])[0]
                beta = rho_new / rho if rho != 0.0 else 0.0
                d = r + beta * d
                rho = rho_new
            res = x - self.apply(z)
            s = net.sums([_dot(res, res), _dot(x, x), _dot(x, z), _dot(z, z)])
            worst = max(worst, math.sqrt(s[0] / s[1]))
            zeta = self.SHIFT + 1.0 / s[2]
            x = z / math.sqrt(s[3])
        return {"zeta": float(zeta), "max_rel_residual": float(worst)}


def _gathered(comm: Any, lo: int, block: np.ndarray) -> list[tuple[int, np.ndarray]] | None:
    """Every rank's (offset, block) at rank 0 (untimed checks only)."""
    return comm.gather((lo, np.ascontiguousarray(block)), root=0)


def _agree(comm: Any, flag: bool) -> bool:
    """Rank 0's verdict, on every rank."""
    return bool(comm.bcast(bool(flag), root=0))


def cg(comm: Any, p: dict[str, int], serial_check: bool) -> KernelRun:
    net = Net(comm)
    prob = CGSolver(net, p)
    out, t = _timed(comm, lambda: prob.iterate(_step))
    calls = net.calls
    detail: dict[str, Any] = dict(out)
    # the distributed operator against the whole matrix on rank 0, for a random vector
    v = np.random.default_rng([SEED, 7]).random(p["na"])
    parts = _gathered(comm, prob.lo, prob.apply(v[prob.lo:prob.hi]))
    same = True
    if comm.rank == 0:
        rows, cols, vals, diag = cg_rows(p["na"], p["nonzer"], 0, p["na"])
        ref = np.bincount(rows, weights=vals * v[cols], minlength=p["na"]) + diag * v
        got = np.concatenate([blk for _, blk in sorted(parts, key=lambda x: x[0])])
        same = bool(np.allclose(got, ref, rtol=1e-13, atol=0))
    detail["operator_match"] = _agree(comm, same)
    ok = out["max_rel_residual"] < 1e-4 and detail["operator_match"]
    if serial_check:
        ref_run = CGSolver(Net(None), p).iterate(None) if comm.rank == 0 else None
        detail["serial_match"] = _agree(comm, ref_run is None or _rel(ref_run["zeta"], out["zeta"]) < 1e-9)
        ok = ok and detail["serial_match"]
    return KernelRun(t, p["niter"], calls, ok, detail)


# =========================================================================== MG
class _MGLevel:
    """One grid level of this rank's z slab: solution with one halo plane each side, right-hand side, colour masks."""

    def __init__(self, n: int, nz: int, z0: int) -> None:
        self.n, self.nz, self.z0 = n, nz, z0
        self.h2 = (1.0 / n) ** 2
        self.u = np.zeros((nz + 2, n, n))
        self.f = np.zeros((nz, n, n))
        k, j, i = np.meshgrid(np.arange(nz) + z0, np.arange(n), np.arange(n), indexing="ij")
        red = (k + j + i) % 2 == 0
        self.masks = (red, ~red)


class MGSolver:
    """V-cycles for the periodic 3-D Poisson equation on z slabs (ring halo exchange with Sendrecv)."""

    def __init__(self, net: Net, n: int, coarsest: int, nu: int, coarse_sweeps: int) -> None:
        if n % net.size:
            raise ValueError(f"mg: grid {n} not divisible by {net.size} ranks")
        self.net, self.nu, self.coarse_sweeps = net, nu, coarse_sweeps
        self.levels: list[_MGLevel] = []
        nz, z0 = n // net.size, (n // net.size) * net.rank
        while True:
            self.levels.append(_MGLevel(n, nz, z0))
            if n <= coarsest:
                break
            if nz % 2:
                raise ValueError(f"mg: {net.size} ranks cannot coarsen grid {n} (need a power-of-two rank count)")
            n, nz, z0 = n // 2, nz // 2, z0 // 2
        self.up = (net.rank + 1) % net.size
        self.down = (net.rank - 1) % net.size

    def exchange(self, u: np.ndarray) -> None:
        """Fill the two halo planes of ``u`` from the ring neighbours (periodic in z)."""
        net = self.net
        if net.comm is None:
            u[0] = u[-2]
            u[-1] = u[1]
            return
        net.comm.Sendrecv(u[-2], self.up, 11, u[0], self.down, 11)
        net.comm.Sendrecv(u[1], self.down, 12, u[-1], self.up, 12)
        net.calls += 2

    @staticmethod
    def _nbr(u: np.ndarray) -> np.ndarray:
        ui = u[1:-1]
        return (u[:-2] + u[2:] + np.roll(ui, 1, 1) + np.roll(ui, -1, 1)
                + np.roll(ui, 1, 2) + np.roll(ui, -1, 2))

    def smooth(self, lv: _MGLevel, sweeps: int) -> None:
        for _ in range(sweeps):
            for mask in lv.masks:
                self.exchange(lv.u)
                new = (self._nbr(lv.u) + lv.h2 * lv.f) / 6.0
                np.copyto(lv.u[1:-1], new, where=mask)

    def residual(self, lv: _MGLevel) -> np.ndarray:
        self.exchange(lv.u)
        return lv.f - (6.0 * lv.u[1:-1] - self._nbr(lv.u)) / lv.h2

    @staticmethod
    def _interp(c: np.ndarray, lo: np.ndarray, hi: np.ndarray, axis: int) -> np.ndarray:
        """Cell-centred linear interpolation to twice the cells along ``axis`` (lo/hi: c shifted by -1/+1)."""
        out = np.stack((0.75 * c + 0.25 * lo, 0.75 * c + 0.25 * hi), axis=axis + 1)
        shape = list(c.shape)
        shape[axis] *= 2
        return out.reshape(shape)

    def prolong(self, uc: np.ndarray) -> np.ndarray:
        self.exchange(uc)
        a = self._interp(uc[1:-1], uc[:-2], uc[2:], 0)
        a = self._interp(a, np.roll(a, 1, 1), np.roll(a, -1, 1), 1)
        return self._interp(a, np.roll(a, 1, 2), np.roll(a, -1, 2), 2)

    @staticmethod
    def restrict(r: np.ndarray) -> np.ndarray:
        nz, n, _ = r.shape
        return r.reshape(nz // 2, 2, n // 2, 2, n // 2, 2).mean(axis=(1, 3, 5))

    def vcycle(self, k: int = 0) -> None:
        lv = self.levels[k]
        if k == len(self.levels) - 1:
            self.smooth(lv, self.coarse_sweeps)
            return
        self.smooth(lv, self.nu)
        nxt = self.levels[k + 1]
        nxt.f[:] = self.restrict(self.residual(lv))
        nxt.u[:] = 0.0
        self.vcycle(k + 1)
        lv.u[1:-1] += self.prolong(nxt.u)
        self.smooth(lv, self.nu)

    def norm(self) -> float:
        r = self.residual(self.levels[0])
        return math.sqrt(self.net.sums([_dot(r, r)])[0])


def _mg_problem(mg: MGSolver) -> None:
    """NPB MG's right-hand side: +1 at 10 random cells, -1 at 10 others (zero mean, as the periodic problem needs)."""
    top = mg.levels[0]
    rng = np.random.default_rng([SEED, 2])
    pts = rng.integers(0, top.n, size=(20, 3))
    sign = np.repeat([1.0, -1.0], 10)
    mine = (pts[:, 0] >= top.z0) & (pts[:, 0] < top.z0 + top.nz)
    np.add.at(top.f, (pts[mine, 0] - top.z0, pts[mine, 1], pts[mine, 2]), sign[mine])


def mg_setup(net: Net, p: dict[str, int], coarsest: int) -> MGSolver:
    """The MG solver of parameters ``p`` (a ``PARAMS["mg"]`` class) on ``net``, with the benchmark's problem set."""
    mg = MGSolver(net, p["n"], coarsest, p["nu"], p["coarse"])
    _mg_problem(mg)
    return mg


def mg_iterate(mg: MGSolver, cycles: int, step: Callable[[int], None] | None) -> list[float]:
    """``cycles`` V-cycles; the residual norm before the first and after every cycle."""
    norms = [mg.norm()]
    for c in range(cycles):
        if step is not None:
            step(c)
        mg.vcycle()
        norms.append(mg.norm())
    return norms


MG_FACTOR = 0.2        # required residual reduction per V-cycle
MG_FLOOR = 1e-12       # relative residual where rounding stops the reduction


def mg_converged(norms: list[float]) -> bool:
    """Every V-cycle reduced the residual by MG_FACTOR or ended at the rounding floor."""
    floor = MG_FLOOR * norms[0]
    return all(b <= MG_FACTOR * a or b <= floor for a, b in zip(norms, norms[1:], strict=False))


def _mg_operator_check(comm: Any, mg: MGSolver) -> bool:
    """The distributed Laplacian (halo exchange included) of a random field against np.roll on the whole grid."""
    lv = mg.levels[0]
    n = lv.n
    field = np.random.default_rng([SEED, 8]).random((n, n, n))
    lv.u[1:-1] = field[lv.z0:lv.z0 + lv.nz]
    lv.f[:] = 0.0
    parts = _gathered(comm, lv.z0, -mg.residual(lv))
    if comm.rank != 0:
        return _agree(comm, True)
    nbr = sum(np.roll(field, s, ax) for ax in range(3) for s in (1, -1))
    ref = (6.0 * field - nbr) / lv.h2
    got = np.concatenate([blk for _, blk in sorted(parts, key=lambda x: x[0])])
    return _agree(comm, bool(np.allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())))


def mg(comm: Any, p: dict[str, int], serial_check: bool) -> KernelRun:
    net = Net(comm)
    coarsest = max(4, comm.size)
    solver = mg_setup(net, p, coarsest)
    norms, t = _timed(comm, lambda: mg_iterate(solver, p["cycles"], _step))
    calls = net.calls
    factor = (norms[-1] / norms[0]) ** (1.0 / p["cycles"])
    detail: dict[str, Any] = {"residual_0": norms[0], "residual_end": norms[-1], "reduction_per_cycle": factor,
                              "operator_match": _mg_operator_check(comm, solver)}
    ok = mg_converged(norms) and detail["operator_match"]
    if serial_check:
        ref = mg_iterate(mg_setup(Net(None), p, coarsest), p["cycles"], None) if comm.rank == 0 else None
        detail["serial_match"] = _agree(comm, ref is None or max(_rel(a, b) for a, b in zip(ref, norms, strict=False)) < 1e-6)
        ok = ok and detail["serial_match"]
    return KernelRun(t, p["cycles"], calls, ok, detail)


# =========================================================================== FT
FT_ALPHA = 1e-6


def _ft_plane(z: int, ny: int, nx: int) -> np.ndarray:
    """Initial complex values of z plane ``z`` (a function of the plane alone, so any split gives the same field)."""
    a = np.random.default_rng([SEED, 3, z]).random((ny, nx, 2))
    return a[..., 0] + 1j * a[..., 1]


def _ft_kbar2(n: int) -> np.ndarray:
    k = np.arange(n)
    return np.where(k < n // 2, k, k - n).astype(np.float64) ** 2


def _ft_sample(nx: int, ny: int, nz: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NPB FT's checksum points: j = 1..1024 -> (z, y, x) = (5j mod nz, 3j mod ny, j mod nx)."""
    j = np.arange(1, 1025)
    return j * 5 % nz, j * 3 % ny, j % nx


def ft(comm: Any, p: dict[str, int], serial_check: bool) -> KernelRun:
    nx, ny, nz, niter = p["nx"], p["ny"], p["nz"], p["niter"]
    P, me = comm.size, comm.rank
    if nz % P or ny % P:
        raise ValueError(f"ft: grid {nz}x{ny}x{nx} not divisible by {P} ranks")
    nzl, nyl = nz // P, ny // P
    ntot = nx * ny * nz
    net = Net(comm)
    u0 = np.stack([_ft_plane(z, ny, nx) for z in range(me * nzl, (me + 1) * nzl)])
    # spectral layout: (nz, nyl, nx), y block of this rank
    kz, ky, kx = _ft_kbar2(nz), _ft_kbar2(ny)[me * nyl:(me + 1) * nyl], _ft_kbar2(nx)
    expo = -4.0 * FT_ALPHA * math.pi ** 2 * (kz[:, None, None] + ky[None, :, None] + kx[None, None, :])
    twiddle = np.exp(expo)
    sz, sy, sx = _ft_sample(nx, ny, nz)
    own = (sz >= me * nzl) & (sz < (me + 1) * nzl)
    sz, sy, sx = sz[own] - me * nzl, sy[own], sx[own]
    sbuf = np.empty((P, nzl, nyl, nx), dtype=np.complex128)
    rbuf = np.empty_like(sbuf)

    def forward(u: np.ndarray) -> np.ndarray:
        a = np.fft.fft2(u, axes=(1, 2))
        sbuf[:] = a.reshape(nzl, P, nyl, nx).transpose(1, 0, 2, 3)
        comm.Alltoall(sbuf, rbuf)
        net.calls += 1
        return np.fft.fft(rbuf.reshape(nz, nyl, nx), axis=0)

    def inverse(a: np.ndarray) -> np.ndarray:
        sbuf[:] = np.fft.ifft(a, axis=0).reshape(P, nzl, nyl, nx)
        comm.Alltoall(sbuf, rbuf)
        net.calls += 1
        return np.fft.ifft2(rbuf.transpose(1, 0, 2, 3).reshape(nzl, ny, nx), axes=(1, 2))

    def body() -> dict[str, Any]:
        spec = forward(u0)
        e0 = net.sums([_energy(u0), _energy(spec) / ntot])
        sums, worst = [], _rel(e0[0], e0[1])
        for it in range(niter):
            _step(it)
            spec *= twiddle
            u = inverse(spec)
            cs = u[sz, sy, sx].sum()
            s = net.sums([cs.real, cs.imag, _energy(u), _energy(spec) / ntot])
            sums.append(complex(s[0], s[1]))
            worst = max(worst, _rel(s[2], s[3]))
        return {"checksums": sums, "parseval_rel_err": worst}

    out, t = _timed(comm, body)
    ok = out["parseval_rel_err"] < 1e-10
    detail: dict[str, Any] = {"checksum_last": [out["checksums"][-1].real, out["checksums"][-1].imag],
                              "parseval_rel_err": out["parseval_rel_err"]}
    # checksums against numpy.fft.fftn of the whole field on rank 0: every step at class S (serial
    # check), else the first, middle and last (step t's spectrum is the initial one times twiddle**(t+1))
    steps = list(range(niter)) if serial_check else sorted({0, niter // 2, niter - 1})
    same = True
    if me == 0:
        full = np.stack([_ft_plane(z, ny, nx) for z in range(nz)])
        spec0 = np.fft.fftn(full)
        tw = np.exp(-4.0 * FT_ALPHA * math.pi ** 2 * (_ft_kbar2(nz)[:, None, None]
                                                      + _ft_kbar2(ny)[None, :, None] + _ft_kbar2(nx)[None, None, :]))
        gz, gy, gx = _ft_sample(nx, ny, nz)
        for it in steps:
            ref = np.fft.ifftn(spec0 * tw ** (it + 1))[gz, gy, gx].sum()
            same = same and abs(ref - out["checksums"][it]) <= 1e-9 * abs(ref)
    detail["checksums_match"] = _agree(comm, same)
    detail["checksums_checked"] = len(steps)
    ok = ok and detail["checksums_match"]
    return KernelRun(t, niter, net.calls, ok, detail)


# =========================================================================== EP
EP_ANNULI = 10


def _ep_batch(b: int, batch: int) -> np.ndarray:
    """Counts per annulus, sum X, sum Y and accepted pairs of batch ``b`` (float64 vector)."""
    xy = np.random.default_rng([SEED, 4, b]).uniform(-1.0, 1.0, size=(2, batch))
    t = xy[0] ** 2 + xy[1] ** 2
    acc = (t <= 1.0) & (t > 0.0)
    t = t[acc]
    f = np.sqrt(-2.0 * np.log(t) / t)
    gx, gy = xy[0, acc] * f, xy[1, acc] * f
    ring = np.minimum(np.maximum(np.abs(gx), np.abs(gy)).astype(np.int64), EP_ANNULI - 1)
    out = np.zeros(EP_ANNULI + 3)
    out[:EP_ANNULI] = np.bincount(ring, minlength=EP_ANNULI)
    out[EP_ANNULI:] = (gx.sum(), gy.sum(), float(acc.sum()))
    return out


def ep(comm: Any, p: dict[str, int], serial_check: bool) -> KernelRun:
    npairs, batch = 1 << p["m"], p["batch"]
    nb = npairs // batch
    net = Net(comm)
    mine = range(comm.rank, nb, comm.size)

    def body() -> np.ndarray:
        acc = np.zeros(EP_ANNULI + 3)
        for i, b in enumerate(mine):
            _step(i)
            acc += _ep_batch(b, batch)
        return net.sums(acc)

    tot, t = _timed(comm, body)
    q, nacc = tot[:EP_ANNULI], tot[EP_ANNULI + 2]
    frac, sd = nacc / npairs, math.sqrt(math.pi / 4 * (1 - math.pi / 4) / npairs)
    mean_sd = math.sqrt(nacc) * 6.0
    ok = bool(q.sum() == nacc and abs(frac - math.pi / 4) < 6 * sd
              and abs(tot[EP_ANNULI]) < mean_sd and abs(tot[EP_ANNULI + 1]) < mean_sd)
    detail: dict[str, Any] = {"pairs": npairs, "accepted": int(nacc), "counts": [int(c) for c in q],
                              "sx": float(tot[EP_ANNULI]), "sy": float(tot[EP_ANNULI + 1])}
    if serial_check:
        same = True
        if comm.rank == 0:
            ref = sum(_ep_batch(b, batch) for b in range(nb))
            same = bool(np.array_equal(ref[:EP_ANNULI], q) and ref[-1] == nacc
                        and all(abs(ref[EP_ANNULI + k] - tot[EP_ANNULI + k]) <= 1e-8 * math.sqrt(nacc) for k in (0, 1)))
        same = bool(comm.bcast(same))
        ok = ok and same
        detail["serial_match"] = same
    return KernelRun(t, len(mine), net.calls, ok, detail)


# =========================================================================== IS
IS_BUCKETS_LOG = 10


def is_(comm: Any, p: dict[str, int], serial_check: bool) -> KernelRun:
    """NPB IS ranking: keys redistributed by bucket ranges so that rank i holds the i-th key range."""
    from mpi4py import MPI
    P, me = comm.size, comm.rank
    ntot, bmax, niter = 1 << p["logn"], 1 << p["logb"], p["niter"]
    off = _blocks(ntot, P)
    nloc = int(off[me + 1] - off[me])
    rng = np.random.default_rng([SEED, 5, me])
    keys = (rng.random((4, nloc)).sum(axis=0) * (bmax / 4)).astype(np.int32)
    shift = max(p["logb"] - IS_BUCKETS_LOG, 0)
    nbuckets = bmax >> shift
    net = Net(comm)
    recv = np.empty(0, dtype=np.int32)
    state: dict[str, Any] = {}

    def one(it: int) -> None:
        nonlocal recv
        # NPB IS changes two keys per iteration, so every iteration sorts a different set
        g0, g1 = it, it + niter
        for g, val in ((g0, it), (g1, bmax - 1 - it)):
            if off[me] <= g < off[me + 1]:
                keys[g - off[me]] = val
        bucket = keys >> shift
        local = np.bincount(bucket, minlength=nbuckets).astype(np.int64)
        glob = np.empty_like(local)
        comm.Allreduce(local, glob)
        before = np.concatenate(([0], np.cumsum(glob)[:-1]))
        owner = np.minimum(before * P // ntot, P - 1)          # bucket -> rank (contiguous ranges)
        dest = owner[bucket]
        order = np.argsort(dest, kind="stable")
        send = keys[order]
        scount = np.bincount(dest, minlength=P).astype(np.int64)
        rcount = np.empty(P, dtype=np.int64)
        comm.Alltoall(scount, rcount)
        recv = np.empty(int(rcount.sum()), dtype=np.int32)
        comm.Alltoallv([send, (scount, np.concatenate(([0], np.cumsum(scount)[:-1]))), MPI.INT],
                       [recv, (rcount, np.concatenate(([0], np.cumsum(rcount)[:-1]))), MPI.INT])
        net.calls += 3
        # local counting sort over this rank's key range; ranks start after the lower ranks' keys
        mine = np.nonzero(owner == me)[0]
        klo = int(mine[0]) << shift if mine.size else 0
        khi = (int(mine[-1]) + 1) << shift if mine.size else 0
        cnt = np.bincount(recv - klo, minlength=khi - klo) if recv.size else np.zeros(khi - klo, np.int64)
        state["first_rank"] = int(glob[owner < me].sum())
        state["counts"], state["klo"] = cnt, klo

    def body() -> None:
        for it in range(niter):
            _step(it)
            one(it)

    _, t = _timed(comm, body)
    # verification (untimed): sorted order = keys by value; ranges ordered across ranks; same multiset
    cnt, klo = state["counts"], state["klo"]
    ordered = np.repeat(np.arange(klo, klo + cnt.size, dtype=np.int64), cnt)
    sorted_ok = bool(np.array_equal(ordered, np.sort(recv)))
    lo_hi = np.array([ordered[0] if ordered.size else -1, ordered[-1] if ordered.size else -1,
                      ordered.size, state["first_rank"]], dtype=np.int64)
    every = np.empty(4 * P, dtype=np.int64)
    comm.Allgather(lo_hi, every)
    every = every.reshape(P, 4)
    nonempty = every[every[:, 2] > 0]
    across = bool(np.all(nonempty[1:, 0] >= nonempty[:-1, 1]) and every[:, 2].sum() == ntot
                  and np.array_equal(every[:, 3], np.concatenate(([0], np.cumsum(every[:-1, 2])))))
    h_keys = np.bincount(keys, minlength=bmax).astype(np.int64)
    h_sorted = np.bincount(ordered, minlength=bmax).astype(np.int64)
    g = np.empty((2, bmax), dtype=np.int64)
    comm.Allreduce(np.stack((h_keys, h_sorted)), g)
    ok_here = np.array([int(sorted_ok and across and np.array_equal(g[0], g[1]))], dtype=np.int64)
    ok_all = np.empty_like(ok_here)
    comm.Allreduce(ok_here, ok_all, MPI.MIN)
    return KernelRun(t, niter, net.calls, bool(ok_all[0]),
                     {"keys": ntot, "max_key": bmax, "keys_per_rank_max": int(every[:, 2].max())})


# =========================================================================== HALO
def _grid2(P: int) -> tuple[int, int]:
    """A near-square process grid px * py = P (px <= py)."""
    px = int(math.isqrt(P))
    while P % px:
        px -= 1
    return px, P // px


def _halo_field(n: int, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    return np.stack([np.random.default_rng([SEED, 6, r]).random(n)[c0:c1] for r in range(r0, r1)])


HALO_KAPPA = 0.2


def _halo_serial(n: int, niter: int) -> np.ndarray:
    u = _halo_field(n, 0, n, 0, n)
    for _ in range(niter):
        u = u + HALO_KAPPA * (np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) - 4 * u)
    return u


def halo(comm: Any, p: dict[str, int], serial_check: bool) -> KernelRun:
    """Explicit diffusion on a periodic n x n grid; halo rows and columns exchanged with Isend/Irecv every step."""
    n, niter = p["n"], p["niter"]
    P, me = comm.size, comm.rank
    px, py = _grid2(P)
    if n < 2 * max(px, py):
        raise ValueError(f"halo: grid {n} too small for {px}x{py} ranks")
    pr, pc = divmod(me, py)
    ro, co = _blocks(n, px), _blocks(n, py)
    r0, r1, c0, c1 = int(ro[pr]), int(ro[pr + 1]), int(co[pc]), int(co[pc + 1])
    lr, lc = r1 - r0, c1 - c0
    u = np.zeros((lr + 2, lc + 2))
    u[1:-1, 1:-1] = _halo_field(n, r0, r1, c0, c1)
    up, down = ((pr - 1) % px) * py + pc, ((pr + 1) % px) * py + pc
    left, right = pr * py + (pc - 1) % py, pr * py + (pc + 1) % py
    net = Net(comm)
    sl, sr_, rl, rr = (np.empty(lr) for _ in range(4))
    sum0 = net.sums([u[1:-1, 1:-1].sum()])[0]
    net.calls = 0

    def exchange() -> None:
        sl[:] = u[1:-1, 1]
        sr_[:] = u[1:-1, -2]
        reqs = [comm.Irecv(u[0, 1:-1], up, 1), comm.Irecv(u[-1, 1:-1], down, 2),
                comm.Irecv(rl, left, 3), comm.Irecv(rr, right, 4),
                comm.Isend(u[-2, 1:-1], down, 1), comm.Isend(u[1, 1:-1], up, 2),
                comm.Isend(sr_, right, 3), comm.Isend(sl, left, 4)]
        for q in reqs:
            q.Wait()
        net.calls += 8
        u[1:-1, 0] = rl
        u[1:-1, -1] = rr

    def advance() -> None:
        exchange()
        c = u[1:-1, 1:-1]
        c += HALO_KAPPA * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c)

    def body() -> None:
        for it in range(niter):
            _step(it)
            advance()

    def matches(ref_of: Callable[[], np.ndarray]) -> bool:
        """This field, gathered to rank 0, against the whole-grid reference ``ref_of()`` built there."""
        blocks = comm.gather((r0, c0, np.ascontiguousarray(u[1:-1, 1:-1])), root=0)
        same = True
        if me == 0:
            ref = ref_of()
            for a, b, blk in blocks:
                same = same and bool(np.allclose(ref[a:a + blk.shape[0], b:b + blk.shape[1]], blk, rtol=0, atol=1e-12))
        return _agree(comm, same)

    _, t = _timed(comm, body)
    calls = net.calls
    sum1 = net.sums([u[1:-1, 1:-1].sum()])[0]
    detail: dict[str, Any] = {"grid": n, "procs": [px, py], "sum_rel_change": _rel(sum0, sum1)}
    ok = detail["sum_rel_change"] < 1e-12
    if serial_check:
        detail["serial_match"] = matches(lambda: _halo_serial(n, niter))
        ok = ok and detail["serial_match"]
    # one step from the initial field (halo exchange included) against np.roll on the whole grid
    u[1:-1, 1:-1] = _halo_field(n, r0, r1, c0, c1)
    advance()
    detail["operator_match"] = matches(lambda: _halo_serial(n, 1))
    ok = ok and detail["operator_match"]
    return KernelRun(t, niter, calls, ok, detail)


RUNNERS: dict[str, Callable[[Any, dict[str, int], bool], KernelRun]] = {
    "cg": cg, "mg": mg, "ft": ft, "ep": ep, "is": is_, "halo": halo,
}


# =========================================================================== rank program
def parse_kernels(spec: str) -> list[str]:
    """``"cg,mg"`` -> ["cg", "mg"]; ``"all"`` -> every kernel."""
    names = [k for k in spec.replace(" ", "").lower().split(",") if k]
    if names == ["all"]:
        return list(KERNELS)
    bad = [k for k in names if k not in KERNELS]
    if bad or not names:
        raise ValueError(f"unknown kernel(s) {','.join(bad) or spec!r} (choose from {','.join(KERNELS)})")
    return names


def check_class(klass: str) -> str:
    k = klass.upper()
    if k not in CLASSES:
        raise ValueError(f"unknown class {klass!r} (choose from {','.join(CLASSES)})")
    return k


def problem_error(name: str, klass: str, ranks: int) -> str | None:
    """Why ``name`` at ``klass`` cannot run on ``ranks`` ranks, or None when it can."""
    p = PARAMS[name][klass]
    if ranks < 1:
        return f"need at least 1 rank, not {ranks}"
    if name == "mg":
        n, coarsest = p["n"], max(4, ranks)
        if n % ranks:
            return f"mg class {klass}: grid {n} not divisible by {ranks} ranks"
        nz = n // ranks
        while n > coarsest:
            if nz % 2:
                return f"mg class {klass}: {ranks} ranks cannot coarsen grid {n} (use a power-of-two rank count)"
            n, nz = n // 2, nz // 2
    elif name == "ft" and (p["nz"] % ranks or p["ny"] % ranks):
        return f"ft class {klass}: grid {p['nz']}x{p['ny']}x{p['nx']} not divisible by {ranks} ranks"
    elif name == "halo" and p["n"] < 2 * max(_grid2(ranks)):
        return f"halo class {klass}: grid {p['n']} too small for {ranks} ranks"
    elif name == "cg" and p["na"] < ranks:
        return f"cg class {klass}: {p['na']} rows for {ranks} ranks"
    elif name == "is" and (1 << p["logn"]) < 2 * p["niter"] + ranks:
        return f"is class {klass}: too few keys for {ranks} ranks"
    return None


def run_kernel(comm: Any, name: str, klass: str, serial_check: bool | None = None) -> dict[str, Any]:
    """Run one kernel in every rank; the same summary on every rank (time = max over ranks)."""
    from mpi4py import MPI
    p = PARAMS[name][klass]
    check = (klass == "S") if serial_check is None else serial_check
    res = RUNNERS[name](comm, p, check)
    mine = np.array([res.time_s, float(res.ok is False), float(res.calls)])
    agg = np.empty(3)
    comm.Allreduce(mine, agg, MPI.MAX)
    time_s, calls = float(agg[0]), int(agg[2])
    return {"kernel": name, "class": klass, "ranks": comm.size, "time_s": time_s,
            "verified": bool(agg[1] == 0.0), "serial_checked": check, "iters": res.iters,
            "calls_per_rank": calls, "calls_per_s": calls / time_s if time_s > 0 else float("nan"),
            "params": p, "detail": res.detail}


def rank_main(args: argparse.Namespace) -> int:
    import planaria as pl
    from benchmarks._launch import emit
    comm = pl.world(args.backend)
    errors = [e for e in (problem_error(k, args.klass, comm.size) for k in args.kernels) if e]
    if args.alternate:
        errors += [e for e in (alternate_error(k, args.klass, comm.size) for k in args.kernels) if e]
    if errors:
        if comm.rank == 0:
            print(f"benchmarks.npb: {errors[0]}", file=sys.stderr)
        return 2
    serial = {"auto": None, "on": True, "off": False}[args.serial_check]
    if args.alternate:
        return _alternate(comm, args, serial)
    results = [run_kernel(comm, k, args.klass, serial) for k in args.kernels]
    if comm.rank == 0:
        emit({"benchmark": "npb", "ranks": comm.size, "backend": args.backend, "class": args.klass,
              "detect_env": os.environ.get(PLANARIA_DETECT), "kernels": results}, args.out)
    return 0 if all(r["verified"] for r in results) else 1


def schedule(pairs: int) -> list[tuple[int, str]]:
    """Run order: (pair, mode) with off,on for even pairs and on,off for odd pairs."""
    order: list[tuple[int, str]] = []
    for i in range(pairs):
        first, second = ("off", "on") if i % 2 == 0 else ("on", "off")
        order += [(i, first), (i, second)]
    return order


class BlockTimer:
    """Times blocks of ``every`` iterations of a kernel, switching detection before each block.

    Called at the start of every iteration (``_step``): at every ``every``-th iteration it ends
    the running block, sets the next block's mode (``order``: "off"/"on" per block), meets the
    other ranks in a barrier and starts the clock. A block still open when a kernel run ends is
    dropped; ``new_run`` starts counting iterations again. Every rank must see the same
    iterations, so the blocks and their modes agree across ranks.
    """

    def __init__(self, comm: Any, every: int, order: list[str], switch: Callable[[bool], None]) -> None:
        self.comm, self.every, self.order, self.switch = comm, every, order, switch
        self.times: list[float] = []       # this rank's completed blocks, in order
        self.n = 0
        self.t0: float | None = None

    def new_run(self) -> None:
        """Forget the open block (its run has ended) and count iterations from zero."""
        self.n, self.t0 = 0, None

    @property
    def done(self) -> bool:
        return len(self.times) >= len(self.order)

    def __call__(self, i: int) -> None:
        if self.n % self.every == 0 and not (self.t0 is None and self.done):
            now = time.perf_counter()
            if self.t0 is not None:
                self.times.append(now - self.t0)
                self.t0 = None
            if not self.done:
                self.switch(self.order[len(self.times)] == "on")
                self.comm.Barrier()
                self.t0 = time.perf_counter()
        self.n += 1


_BLOCKS: BlockTimer | None = None


def _step(i: int) -> None:
    """``planaria.step(i)`` at the start of every iteration, then the block timer of ``--alternate`` (when set)."""
    _pl_step(i)
    if _BLOCKS is not None:
        _BLOCKS(i)


def alternate_error(name: str, klass: str, ranks: int) -> str | None:
    """Why ``name`` at ``klass`` cannot be timed in blocks on ``ranks`` ranks (every rank must run the same iterations)."""
    p = PARAMS[name][klass]
    if name == "ep" and ((1 << p["m"]) // p["batch"]) % ranks:
        return f"ep class {klass}: {(1 << p['m']) // p['batch']} batches do not split evenly over {ranks} ranks"
    iters = (1 << p["m"]) // p["batch"] // max(ranks, 1) if name == "ep" else p.get("niter", p.get("cycles", 0))
    if iters < 2:
        return f"{name} class {klass}: {iters} iteration(s) per run, too few to time in blocks"
    return None


def block_size(iters: int, time_s: float, block_s: float) -> int:
    """Iterations per block: about ``block_s`` seconds, at least 1, at most iters - 1 (a run must close a block)."""
    per = time_s / iters if iters > 0 and time_s > 0 else block_s
    return int(max(1, min(max(iters - 1, 1), round(block_s / per))))


def _no_switch(active: bool) -> None:
    """The A/A control's switch (``--detect-part none``): detection stays on in every block."""


def _alternate(comm: Any, args: argparse.Namespace, serial: bool | None) -> int:
    """Per kernel, ``2 * alternate`` timed blocks of iterations, detection off and on in ABBA order.

    One untimed run first (warm-up; its time per iteration sets the block length to about
    ``--block-s`` seconds), then kernel runs until every block of the schedule has been timed.
    Each block's figure is the maximum over ranks; every run must pass verification.
    """
    global _BLOCKS
    from mpi4py import MPI

    from benchmarks._launch import emit
    from planaria.runtime.bootstrap import set_detection
    out, ok = [], True
    order = [mode for _, mode in schedule(args.alternate)]
    switch = _no_switch if args.detect_part == CONTROL_PART else partial(set_detection, part=args.detect_part)
    for k in args.kernels:
        set_detection(True)
        warm = run_kernel(comm, k, args.klass, serial)
        ok = ok and warm["verified"]
        every = block_size(warm["iters"], warm["time_s"], args.block_s)
        timer = BlockTimer(comm, every, order, switch)
        runs, times = [], []
        per_run = max((warm["iters"] - 1) // every, 1)
        limit = -(-len(order) // per_run) + 2
        _BLOCKS = timer
        try:
            while not timer.done and len(runs) < limit:
                timer.new_run()
                before = len(timer.times)
                r = run_kernel(comm, k, args.klass, serial)
                ok = ok and r["verified"]
                mine = np.array(timer.times[before:], dtype=np.float64)
                worst = np.empty_like(mine)
                comm.Allreduce(mine, worst, MPI.MAX)
                times += worst.tolist()
                runs.append({"time_s": r["time_s"], "verified": r["verified"], "iters": r["iters"],
                             "blocks": len(mine), "calls_per_rank": r["calls_per_rank"],
                             "calls_per_s": r["calls_per_s"]})
        finally:
            _BLOCKS = None
            set_detection(True)
        blocks = [{"pair": pair, "mode": mode, "time_s": t}
                  for (pair, mode), t in zip(schedule(args.alternate), times, strict=False)]
        out.append({"kernel": k, "class": args.klass, "ranks": comm.size, "every": every,
                    "block_s": args.block_s, "warmup": {"time_s": warm["time_s"], "iters": warm["iters"],
                                                        "verified": warm["verified"]},
                    "runs": runs, "blocks": blocks})
    if comm.rank == 0:
        emit({"benchmark": "npb", "ranks": comm.size, "backend": args.backend, "class": args.klass,
              "detect_env": os.environ.get(PLANARIA_DETECT), "alternate": args.alternate,
              "detect_part": args.detect_part, "kernels": out}, args.out)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m benchmarks.npb",
                                description="NPB-like kernels on planaria.world(); run under mpiexec.")
    p.add_argument("--kernel", default="all", help=f"kernels, comma-separated ({','.join(KERNELS)}) or all")
    p.add_argument("--class", dest="klass", default="S", help="problem class: S, W or A")
    p.add_argument("--backend", default="auto", help="planaria backend: auto, ulfm or sim")
    p.add_argument("--serial-check", default="auto", choices=("auto", "on", "off"),
                   help="compare with a serial run on rank 0 (auto: class S only)")
    p.add_argument("--alternate", type=int, default=0, metavar="PAIRS",
                   help="time 2*PAIRS blocks of iterations of each kernel in this job, detection off and on "
                        "in ABBA order (needs PLANARIA_DETECT=1)")
    p.add_argument("--block-s", type=float, default=0.25, help="seconds per block with --alternate (about)")
    p.add_argument("--detect-part", default="all", choices=PARTS,
                   help="with --alternate: what the blocks switch off: all of detection, the message log "
                        "or the probe service (the other part stays on), or none (an A/A control)")
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--scratch", default=".", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        args.kernels = parse_kernels(args.kernel)
        args.klass = check_class(args.klass)
    except ValueError as e:
        print(f"benchmarks.npb: {e}", file=sys.stderr)
        return 2
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
