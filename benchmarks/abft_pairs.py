"""``python -m benchmarks abft --parts pairs``: two silent faults per trial, every pair of workers, counted to the last miss.

Two parts:

* A campaign in this process over the runtime's verification and recovery rules. Trial t has
  its own synthetic DEM (:func:`benchmarks.abft_faults.trial_dem`), a number of workers
  N from :data:`NS` and a pair of workers (a, b): the pairs of every N are taken in turn, so
  every adjacent pair and every other pair of blocks occurs. Both workers flip one bit in one
  of their compared rows (first row or check row) with the real kernel's output, in one of
  three ways, in turn: ``shared`` (adjacent pairs only: worker a's check row and worker b's
  first row, the same row, corrupted in the same cell and bit, so the two copies agree: the
  correlated fault of issue 27), ``same-bit`` (same cell and bit, rows drawn) and
  ``independent`` (rows, cells and bits drawn apart). Then the rounds of the runtime:
  :func:`planaria.abft.masterworker.abft_judge` against the masters' referee rows, the referee row
  recomputed once on a conflict, the flagged workers recomputing (faults are transient), until
  every worker verifies, or a conflict survives a second round (undecidable: reported, no
  output). A trial is *undetected* when it ends verified and its assembled output differs from
  the serial kernel's bit for bit. The paper's scheme alone (``locate`` on V) is scored on the
  same first-round rows for comparison.
* ``e2e``: the real runtime (``planaria abft``, N = 4 workers + 2 masters, ULFM) for every pair
  of workers with forced ``silent`` faults and the seed parity that makes an adjacent pair
  corrupt its shared row alike; each run's output is compared with the serial one.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from planaria.util.env import PLANARIA_HOME

NS = (2, 3, 4, 5, 6, 8)
WAYS = ("shared", "same-bit", "independent")
MAX_ROUNDS = 8


def pairs_of(n: int) -> list[tuple[int, int]]:
    """Every pair of workers a < b of N workers, adjacent pairs first."""
    adj = [(a, a + 1) for a in range(n - 1)]
    return adj + [p for p in itertools.combinations(range(n), 2) if p not in adj]


def trial_plan(seed: int, t: int) -> dict[str, Any]:
    """N, the pair, the way and the two flips of trial ``t`` (before the DEM is known: columns as fractions)."""
    n = NS[t % len(NS)]
    ps = pairs_of(n)
    a, b = ps[(t // len(NS)) % len(ps)]
    adjacent = b == a + 1
    way = WAYS[(t // (len(NS) * len(ps))) % len(WAYS)]
    if way == "shared" and not adjacent:
        way = "same-bit"
    rng = np.random.default_rng([seed, t, 3])
    col_u, bit = float(rng.random()), int(rng.integers(64))
    flips = {}
    for w in (a, b):
        copies = ([] if w == 0 else ["first"]) + ([] if w == n - 1 else ["check"])
        if way == "shared":
            copy = "check" if w == a else "first"
        else:
            copy = copies[int(rng.integers(len(copies)))]
        if way == "independent":
            flips[w] = {"copy": copy, "col_u": float(rng.random()), "bit": int(rng.integers(64))}
        else:
            flips[w] = {"copy": copy, "col_u": col_u, "bit": bit}
    return {"n": n, "pair": [a, b], "adjacent": adjacent, "way": way, "flips": flips}


class _Trial:
    """One trial's DEM, blocks and worker outputs, with the referee rows the masters have computed."""

    def __init__(self, seed: int, t: int) -> None:
        from benchmarks.abft_faults import trial_dem
        from planaria.abft.partition import partition
        from planaria.terrain import kernels

        self.z, self.nodata, self.kernel = trial_dem(seed, t)
        self.plan = trial_plan(seed, t)
        self.n = self.plan["n"]
        self.fn, self.window = kernels[self.kernel]
        self.blocks = partition(self.z.shape[0], self.n, self.window)
        self.width = self.z.shape[1]
        self.referee: dict[int, np.ndarray] = {}
        self.outs: list[np.ndarray] = []

    def compute(self, w: int, faulty: bool) -> np.ndarray:
        from planaria.abft.masterworker import flip_bit
        from planaria.terrain.window import slab_bounds
        blk = self.blocks[w]
        s0, s1 = slab_bounds(blk.computed[0], blk.computed[1], self.z.shape[0], self.window)
        out = self.fn(self.z[s0:s1], nodata=self.nodata, rows=blk.computed)
        if faulty and w in self.plan["flips"]:
            fl = self.plan["flips"][w]
            flip_bit(out, -1 if fl["copy"] == "check" else 0, int(fl["col_u"] * self.width), fl["bit"])
        return out

    def referee_row(self, k: int) -> np.ndarray:
        from planaria.terrain.window import slab_bounds
        r = self.blocks[k].r1
        s0, s1 = slab_bounds(r, r + 1, self.z.shape[0], self.window)
        return self.fn(self.z[s0:s1], nodata=self.nodata, rows=(r, r + 1))[0]

    def ref(self, k: int) -> np.ndarray:
        if k not in self.referee:
            self.referee[k] = self.referee_row(k)
        return self.referee[k]

    def firsts(self) -> list[np.ndarray]:
        return [o[0] for o in self.outs]

    def checks(self) -> list[np.ndarray | None]:
        return [o[-1] if blk.check_row is not None else None for o, blk in zip(self.outs, self.blocks, strict=False)]

    def rounds(self) -> dict[str, Any]:
        """The runtime's rounds until every worker verifies or a conflict survives a second round."""
        from planaria.abft.masterworker import abft_judge
        from planaria.abft.verify import CORRECT, UNRECOVERABLE
        n = self.n
        refreshed: set[int] = set()
        conflict_rounds: dict[int, int] = {}
        first_flagged: list[int] | None = None
        conflicts_seen: list[int] = []
        verified, undecidable, rounds = False, False, 0
        for rnd in range(MAX_ROUNDS):
            rounds = rnd + 1
            judged = abft_judge([CORRECT] * n, self.firsts(), self.checks(), self.ref)
            changed = False
            for k in judged.conflicts:
                if k not in refreshed:
                    refreshed.add(k)
                    fresh = self.referee_row(k)
                    if fresh.tobytes() != self.referee[k].tobytes():
                        self.referee[k], changed = fresh, True
            if changed:
                judged = abft_judge([CORRECT] * n, self.firsts(), self.checks(), self.ref)
            conflicts_seen += judged.conflicts
            for k in judged.conflicts:
                conflict_rounds[k] = conflict_rounds.get(k, 0) + 1
            if any(conflict_rounds[k] >= 2 for k in judged.conflicts):
                undecidable = True
                break
            flagged = [w for w in range(n) if judged.f[w] not in (CORRECT, UNRECOVERABLE)]
            if first_flagged is None:
                first_flagged = flagged
            if not flagged:
                verified = True
                break
            for w in flagged:
                self.outs[w] = self.compute(w, False)
        return {"first_flagged": first_flagged, "conflicts_seen": conflicts_seen, "rounds": rounds,
                "verified": verified, "undecidable": undecidable}


def run_trial(seed: int, t: int) -> dict[str, Any]:
    """One trial: inject, verify and recover as the runtime does, then score against the serial output."""
    from planaria.abft.verify import CORRECT, locate, verification_rows

    tr = _Trial(seed, t)
    n, plan, blocks, z = tr.n, tr.plan, tr.blocks, tr.z
    tr.outs = [tr.compute(w, True) for w in range(n)]
    serial = tr.fn(z, nodata=tr.nodata)
    # the paper's scheme alone on the first round's rows
    v = verification_rows(tr.checks()[:-1], tr.firsts()[1:]) if n > 1 else np.empty((0, tr.width))
    paper = locate([CORRECT] * n, v, ambiguous="both")
    paper_flagged = sorted(w for w in range(n) if paper[w] != CORRECT)
    r = tr.rounds()
    assembled = np.concatenate([o[: blk.local_size] for o, blk in zip(tr.outs, blocks, strict=False)])
    wrong = assembled.tobytes() != serial.tobytes()
    a, b = plan["pair"]
    ff = r["first_flagged"] or []
    verified = r["verified"]
    return {"t": t, "kernel": tr.kernel, "shape": list(z.shape), "n": n, "pair": [a, b], "adjacent": plan["adjacent"],
            "way": plan["way"], "copies": [plan["flips"][a]["copy"], plan["flips"][b]["copy"]],
            "faults": 2, "detected": bool(ff), "located": [a in ff, b in ff], "innocent_flagged": sorted(set(ff) - {a, b}),
            "conflicts": sorted(set(r["conflicts_seen"])), "rounds": r["rounds"], "verified": verified,
            "undecidable": r["undecidable"], "wrong_output": wrong, "undetected": verified and wrong,
            "paper_located": [a in paper_flagged, b in paper_flagged], "paper_detected": bool(paper_flagged)}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over all trials and per way and adjacency: faults, located, undetected, undecidable."""
    def count(rs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"trials": len(rs), "faults": sum(r["faults"] for r in rs),
                "faults_located_first_round": sum(sum(r["located"]) for r in rs),
                "trials_innocent_flagged": sum(bool(r["innocent_flagged"]) for r in rs),
                "trials_with_conflict": sum(bool(r["conflicts"]) for r in rs),
                "recovered": sum(r["verified"] and not r["wrong_output"] for r in rs),
                "undetected": sum(r["undetected"] for r in rs),
                "undecidable": sum(r["undecidable"] for r in rs),
                "paper_faults_located": sum(sum(r["paper_located"]) for r in rs),
                "paper_trials_missed": sum(not r["paper_detected"] for r in rs),
                "max_rounds": max((r["rounds"] for r in rs), default=0)}
    out: dict[str, Any] = {"all": count(records)}
    for way in WAYS:
        for adj in (True, False):
            rs = [r for r in records if r["way"] == way and r["adjacent"] == adj]
            if rs:
                out[f"{way}/{'adjacent' if adj else 'apart'}"] = count(rs)
    seen = {(r["n"], tuple(r["pair"])) for r in records}
    out["pairs_covered"] = {str(n): sum((n, p) in seen for p in pairs_of(n)) for n in NS}
    out["pairs_total"] = {str(n): len(pairs_of(n)) for n in NS}
    return out


def campaign(trials: int, seed: int = 0, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``trials`` trials of two faults each; records of the trials that went wrong kept, the rest summarized."""
    t0 = time.perf_counter()
    records = []
    for t in range(trials):
        records.append(run_trial(seed, t))
        if progress and (t + 1) % 1000 == 0:
            progress(f"abft pairs: {t + 1}/{trials} trials, {time.perf_counter() - t0:.0f} s")
    bad = [r for r in records if r["undetected"] or r["undecidable"] or not r["verified"]]
    return {"trials": trials, "seed": seed, "faults": 2 * trials, "total_s": time.perf_counter() - t0,
            "summary": summarize(records), "bad_trials": bad}


def _serial(dem: Path, kernel: str) -> np.ndarray:
    from planaria.terrain import kernels, read_dem
    d = read_dem(dem)
    return kernels[kernel][0](d.data, cell_size=d.cell_size, nodata=d.nodata)


def e2e(scratch: Path, timeout: float = 120.0, backend: str = "ulfm",
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The real runtime on 4 workers for every pair of workers with forced silent faults, both kernels."""
    from benchmarks.abft import synthetic_dem
    n = 4
    dem = synthetic_dem(scratch / "pairs-dem.npy", 120, 80, 7)
    runs = []
    env = dict(os.environ)
    env[PLANARIA_HOME] = str(scratch / "home")
    for kernel in ("slope", "cutdepth"):
        serial = _serial(dem, kernel)
        for a, b in pairs_of(n):
            # seed parity: worker a takes its check row when a + seed is even, so an adjacent pair shares a row
            seed = a % 2
            out = scratch / f"pairs-{kernel}-{a}{b}.npy"
            cmd = [sys.executable, "-m", "planaria.cli.main", "abft", kernel, "--dem", str(dem), "-n", str(n),
                   "--out", str(out), "--json", "--backend", backend, "--timeout", str(timeout),
                   "--seed", str(seed), "--force", f"silent:{a}", "--force", f"silent:{b}"]
            t0 = time.perf_counter()
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout + 30)
            rep = json.loads(res.stdout[res.stdout.index("{"):]) if "{" in res.stdout else {}
            wrong = None
            if out.is_file():
                wrong = np.load(out).tobytes() != serial.tobytes()
            runs.append({"kernel": kernel, "pair": [a, b], "seed": seed, "exit": res.returncode, "ok": rep.get("ok"),
                         "faults": len(rep.get("injected", [])), "conflicts": len(rep.get("conflicts", [])),
                         "rounds": rep.get("rounds"), "wrong_output": wrong,
                         "undetected": bool(rep.get("ok")) and res.returncode == 0 and wrong is not False,
                         "wall_s": time.perf_counter() - t0})
            if progress:
                progress(f"abft pairs e2e: {kernel} workers {a},{b}: exit {res.returncode}, ok {rep.get('ok')}")
    return {"workers": n, "runs": runs, "faults": sum(r["faults"] for r in runs),
            "undetected": sum(r["undetected"] for r in runs),
            "not_ok": sum(not r["ok"] or r["exit"] != 0 for r in runs)}


def run(trials: int, seed: int, scratch: Path | None = None, timeout: float = 120.0, backend: str = "ulfm",
        progress: Callable[[str], None] | None = None, with_e2e: bool = True) -> dict[str, Any]:
    """Both parts: the campaign of ``trials`` trials (2 faults each) and the end-to-end runs."""
    out = {"campaign": campaign(trials, seed, progress)}
    if with_e2e:
        own = scratch is None
        d = Path(tempfile.mkdtemp(prefix="planaria-abft-pairs-")) if own else scratch
        try:
            out["e2e"] = e2e(d, timeout, backend, progress)
        finally:
            if own:
                import shutil
                shutil.rmtree(d, ignore_errors=True)
    return out
