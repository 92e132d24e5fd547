"""The campaign's targets: how to launch a plan on each, bounded, and what its result should be.

* ``demo``: ``planaria demo --json`` (6 working ranks + 2 spares); its report says whether the
  final field equals the serial run bit for bit, or that the job stopped (``spares exhausted``,
  ``unrecoverable``, exit 3).
* ``app``: ``planaria run -n 6 --spares 2 -- python examples/resilient_app.py``; logical rank 0
  prints ``RESULT {..., "sha256": ...}``, compared with :func:`app_reference`, computed here
  from the formula in the app's docstring. A ``SparesExhausted`` / ``Unrecoverable`` named in
  the output with exit 3 is the documented stop. With a file store and ``damage`` in the plan,
  the app runs twice in the same checkpoint directory, with bits flipped in between.
* ``abft``: ``planaria abft slope|cutdepth`` on a small generated DEM; the output must equal,
  byte for byte, the failure-free serial kernel's written by the same writer (a clean run
  writes exactly those bytes). A report ``ok: false`` with exit 3 is the documented stop.

Every command runs in its own session with output to files, under the job's ``--timeout`` and
a bound 30 s above it; past that the launcher is interrupted, then its process group killed.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from planaria.campaign import plans
from planaria.campaign.classify import (
    BAD, CANNOT_CORRECT, EXIT_TIMEOUT, SPARES_EXHAUSTED, UNEXPLAINED, UNRECOVERABLE, Observation, classify, combine,
)
from planaria.util.env import PLANARIA_HOME, PREFIX

GRACE = 30.0                 # the campaign's own bound: --timeout plus this
_RESULT = re.compile(r"^\[(\d+)\] RESULT (\{.*\})\s*$", re.M)
_CRASH = ("Segmentation fault", "libmpi.so")
# a frame of Open MPI's backtrace, "[host:pid] [ 1] .../libmpi.so.40(ompi_comm_revoke_local+0x3f)[...]"
_KNOWN_CRASH = re.compile(r"\[([^\]\s]+:\d+)\] \[\s*\d+\] \S*libmpi\.so[.\d]*\(ompi_comm_revoke_local\+")
# the launcher's line on it, from the ranks' Python fatal-error traces (planaria run starts ranks with
# faulthandler on, and Open MPI then prints no backtrace): diagnose.postmortem.library_crash_text
_LIBRARY_LINE = re.compile(r"ranks ([\d,\-]+) crashed inside the MPI library \(")


def find_app() -> Path | None:
    """examples/resilient_app.py of this source tree (None when planaria was installed without it)."""
    here = Path(__file__).resolve()
    for up in here.parents[2:4]:
        cand = up / "examples" / "resilient_app.py"
        if cand.is_file():
            return cand
    return None


@dataclass
class Context:
    """Where a campaign's runs live and how they are bounded."""

    root: Path                        # one sub-directory per run
    timeout: float                    # each job's --timeout
    app: Path | None = None
    keep: bool = False                # keep every run's directory (else only bad runs')
    python: str = sys.executable

    @property
    def bound(self) -> float:
        """Seconds after which the campaign kills a command itself."""
        return self.timeout + GRACE


@dataclass
class RunRecord:
    """One run: its plan, the commands to replay it, what they did, and the verdict."""

    plan: plans.RunPlan
    cls: str = ""
    reason: str = ""
    replay: list[str] = field(default_factory=list)
    codes: list[int | None] = field(default_factory=list)
    seconds: float = 0.0
    directory: str | None = None
    tail: str = ""

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON data."""
        return {"index": self.plan.index, "target": self.plan.target, "backend": self.plan.backend,
                "class": self.cls, "reason": self.reason, "plan": self.plan.to_json(),
                "replay": self.replay, "exit": self.codes, "seconds": round(self.seconds, 3),
                "directory": self.directory, **({"output_tail": self.tail} if self.tail else {})}


def execute(plan: plans.RunPlan, ctx: Context) -> RunRecord:
    """Run ``plan`` on its target, bounded, and classify it."""
    rundir = ctx.root / f"run{plan.index:05d}-{plan.target}-{plan.backend}"
    shutil.rmtree(rundir, ignore_errors=True)
    rundir.mkdir(parents=True)
    rec = RunRecord(plan)
    t0 = time.monotonic()
    run = {"demo": _demo, "app": _app, "abft": _abft}[plan.target]
    verdicts = run(plan, ctx, rundir, rec)
    rec.seconds = time.monotonic() - t0
    rec.cls, rec.reason = combine(verdicts)
    if rec.cls not in BAD:
        rec.tail = ""
    if rec.cls in BAD or ctx.keep:
        rec.directory = str(rundir)
    else:
        shutil.rmtree(rundir, ignore_errors=True)
    return rec


# -- launching -------------------------------------------------------------------------------------
def _env(rundir: Path) -> dict[str, str]:
    """The environment of a launched command: this one without planaria's job variables, jobs under ``rundir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    env[PLANARIA_HOME] = str(rundir)
    return env


def launch(argv: list[str], ctx: Context, rundir: Path, name: str) -> tuple[int | None, str, str]:
    """``planaria ARGV`` in its own session, output to files; (exit status or None if killed, stdout, stderr)."""
    out_p, err_p = rundir / f"{name}.out", rundir / f"{name}.err"
    cmd = [ctx.python, "-m", "planaria.cli.main", *argv]
    with open(out_p, "wb") as out, open(err_p, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=_env(rundir),
                                cwd=rundir, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=ctx.bound)
        except subprocess.TimeoutExpired:
            code = None
            _stop(proc)
        except KeyboardInterrupt:
            _stop(proc)
            raise
    return code, out_p.read_text(errors="replace"), err_p.read_text(errors="replace")


def _stop(proc: subprocess.Popen) -> None:
    """End a command that outlived its bound: Ctrl-C to the launcher (it tears its job down), then SIGKILL."""
    for sig, wait in ((signal.SIGINT, 15.0), (signal.SIGKILL, 10.0)):
        try:
            if sig == signal.SIGINT:
                proc.send_signal(sig)
            else:
                os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def replay_line(argv: list[str]) -> str:
    """The shell command that replays ``planaria ARGV``."""
    return shlex.join(["planaria", *argv])


def _notes(text: str) -> list[str]:
    """Remarks on a command's output worth showing with its verdict."""
    if any(s in text for s in _CRASH) or _LIBRARY_LINE.search(text):
        return ["a process crashed inside the MPI library (see docs/recovery.md)"]
    return []


def library_crashes(text: str) -> int:
    """Processes that Open MPI's known crash took: a failure learned while a communicator is being
    created (``ompi_comm_set_rank_failed`` -> ``ompi_comm_revoke_local``), counted from Open MPI's
    backtraces or from the launcher's line on it, whichever names more (one process may show in both)."""
    from planaria.diagnose.hangfilter import parse_rank_ranges
    ranks = {int(r) for m in _LIBRARY_LINE.finditer(text) for r in parse_rank_ranges(m.group(1))}
    return max(len(set(_KNOWN_CRASH.findall(text))), len(ranks))


def _tail(out: str, err: str) -> str:
    """The end of a command's output, kept with bad runs."""
    text = (out + "\n" + err).strip()
    return text[-3000:]


def _inject(plan: plans.RunPlan) -> list[str]:
    """``--inject SPEC`` for each fault of the plan."""
    return [a for f in plan.faults for a in ("--inject", f)]


# -- demo ------------------------------------------------------------------------------------------
def demo_argv(plan: plans.RunPlan, timeout: float) -> list[str]:
    """``planaria demo`` arguments of a demo plan."""
    s = plan.settings
    return ["demo", "--json", "--backend", plan.backend, "-n", str(plans.WORKING), "--spares", str(plans.SPARES),
            "--checkpoint", s["checkpoint"], "--steps", str(plans.DEMO_STEPS), "--every", str(plans.DEMO_EVERY),
            "--file-every", str(2 * plans.DEMO_EVERY), "--cells-per-rank", str(plans.DEMO_CELLS),
            "--when-exhausted", s["when_exhausted"], "--timeout", _num(timeout), *_inject(plan)]


def demo_observation(code: int | None, out: str, err: str, plan: plans.RunPlan) -> Observation:
    """What a demo run did, from its exit status and JSON report."""
    obs = Observation(code, failures=plans.possible_failures(plan), spares=plans.SPARES,
                      exhaust_stops=plan.settings.get("when_exhausted", "stop") == "stop", notes=_notes(out + err),
                      crashed=library_crashes(out + err))
    report = _json(out)
    outcome = report.get("outcome")
    if outcome == "finished":
        obs.result = "match" if report.get("bit_identical") is True else "differs"
    elif outcome in (SPARES_EXHAUSTED, UNRECOVERABLE):
        obs.stop = outcome
    elif report:
        obs.notes.append(f"outcome {outcome!r}")
    return obs


def _demo(plan: plans.RunPlan, ctx: Context, rundir: Path, rec: RunRecord) -> list[tuple[str, str]]:
    """Run a demo plan; its verdict."""
    argv = demo_argv(plan, ctx.timeout)
    rec.replay.append(replay_line(argv))
    code, out, err = launch(argv, ctx, rundir, "demo")
    rec.codes.append(code)
    verdict = classify(demo_observation(code, out, err, plan))
    rec.tail = _tail(out, err)
    return [verdict]


# -- app -------------------------------------------------------------------------------------------
def app_argv(plan: plans.RunPlan, timeout: float, app: Path, ckdir: Path | None, inject: bool = True) -> list[str]:
    """``planaria run ... -- python resilient_app.py`` arguments of an app plan."""
    argv = ["run", "-n", str(plans.WORKING), "--spares", str(plans.SPARES), "--backend", plan.backend,
            "--timeout", _num(timeout), *(_inject(plan) if inject else []), "--",
            "python", str(app), "--store", plan.settings["store"], "--steps", str(plans.APP_STEPS),
            "--every", str(plans.APP_EVERY), "--cells", str(plans.APP_CELLS)]
    if ckdir is not None:
        argv += ["--dir", str(ckdir)]
    return argv


@lru_cache(maxsize=4)
def app_reference(working: int = plans.WORKING, cells: int = plans.APP_CELLS, steps: int = plans.APP_STEPS) -> str:
    """sha256 of the app's exact final array (the recurrence in examples/resilient_app.py, serially)."""
    import numpy as np

    a = np.uint64(6364136223846793005)
    x = np.arange(working * cells, dtype=np.uint64)
    g1 = np.arange(1, working * cells + 1, dtype=np.uint64)
    for i in range(steps):
        t = sum(int(x[b * cells]) % 1000003 for b in range(working))
        x *= a
        x += g1 * np.uint64(i + 1) + np.uint64(t)
    return hashlib.sha256(x.astype("<u8").tobytes()).hexdigest()


def app_observation(code: int | None, out: str, err: str, plan: plans.RunPlan, expect: str,
                    damaged: bool = False, inject: bool = True) -> Observation:
    """What an app run did: the RESULT lines against ``expect``, and a documented stop in the output."""
    failures = plans.possible_failures(plan) if inject else 0
    obs = Observation(code, failures=failures, spares=plans.SPARES, damaged=damaged, notes=_notes(out + err),
                      crashed=library_crashes(out + err))
    digests = []
    for _, payload in _RESULT.findall(out):
        try:
            digests.append(json.loads(payload).get("sha256"))
        except ValueError:
            digests.append(None)
    if digests:
        obs.result = "match" if all(d == expect for d in digests) else "differs"
    text = out + err
    if "SparesExhausted" in text:
        obs.stop = SPARES_EXHAUSTED
    elif "Unrecoverable" in text:
        obs.stop = UNRECOVERABLE
    return obs


def _app(plan: plans.RunPlan, ctx: Context, rundir: Path, rec: RunRecord) -> list[tuple[str, str]]:
    """Run an app plan (twice, with bits flipped in between, when it damages checkpoints); the verdicts."""
    if ctx.app is None:
        return [(UNEXPLAINED, "examples/resilient_app.py not found (pass --app)")]
    ckdir = rundir / "checkpoints" if plan.settings["store"] == "file" else None
    expect = app_reference()
    argv = app_argv(plan, ctx.timeout, ctx.app, ckdir)
    rec.replay.append(replay_line(argv))
    code, out, err = launch(argv, ctx, rundir, "app")
    rec.codes.append(code)
    rec.tail = _tail(out, err)
    verdicts = [classify(app_observation(code, out, err, plan, expect))]
    if not plan.damage or ckdir is None or verdicts[0][0] in BAD:
        return verdicts
    flips = damage(ckdir, plan.damage)
    if not flips:
        return verdicts
    rec.replay += [flip_line(f) for f in flips]
    argv2 = app_argv(plan, ctx.timeout, ctx.app, ckdir, inject=False)
    rec.replay.append(replay_line(argv2))
    code, out, err = launch(argv2, ctx, rundir, "app-again")
    rec.codes.append(code)
    rec.tail = _tail(out, err)
    verdicts.append(classify(app_observation(code, out, err, plan, expect, damaged=True, inject=False)))
    return verdicts


def damage(ckdir: Path, spec: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flip the bits ``spec`` names in the newest / older complete checkpoint version; the flips made."""
    from planaria.checkpoint.file import MANIFEST, vdir_name

    versions = sorted(int(p.name[1:]) for p in ckdir.glob("v*") if p.name[1:].isdigit() and (p / MANIFEST).is_file())
    done = []
    for d in spec:
        k = {"newest": -1, "older": -2}[d["which"]]
        if len(versions) < -k:
            continue
        path = ckdir / vdir_name(versions[k]) / d["file"]
        if not path.is_file() or path.stat().st_size == 0:
            continue
        data = bytearray(path.read_bytes())
        offset = min(int(d["pos"] * len(data)), len(data) - 1)
        data[offset] ^= 1 << d["bit"]
        path.write_bytes(bytes(data))
        done.append({"path": str(path), "offset": offset, "bit": d["bit"]})
    return done


def flip_line(flip: dict[str, Any]) -> str:
    """A shell command that flips the same bit again (to replay a damaged-checkpoint run)."""
    code = ('import sys; p, o, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]); '
            'd = bytearray(open(p, "rb").read()); d[o] ^= 1 << b; open(p, "wb").write(d)')
    return shlex.join(["python", "-c", code, flip["path"], str(flip["offset"]), str(flip["bit"])])


# -- abft ------------------------------------------------------------------------------------------
def make_dem(path: Path) -> Path:
    """The campaign's small DEM: 120 x 80 cells, a NoData column and a few NaN holes (seeded)."""
    import numpy as np

    from planaria.terrain import Dem, write_dem

    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:120, 0:80]
    z = 100 + 10 * np.sin(y / 9.0) + 5 * np.cos(x / 7.0) + rng.normal(0, 0.5, (120, 80))
    z[:, 40] = -9999.0
    z[5, 5] = np.nan
    z[60:63, 20:22] = np.nan
    write_dem(path, Dem(z, nodata=-9999.0, cell_size=(10.0, 10.0)))
    return path


def abft_reference(dem: Path, kernel: str, out: Path) -> bytes:
    """The bytes a failure-free run writes: the serial kernel's result through the same .npy writer."""
    from planaria.terrain import Dem, kernels, read_dem, write_dem

    if not out.is_file():
        d = read_dem(dem)
        write_dem(out, Dem(kernels[kernel][0](d.data, cell_size=d.cell_size, nodata=d.nodata)))
    return out.read_bytes()


def abft_argv(plan: plans.RunPlan, timeout: float, dem: Path, out: Path) -> list[str]:
    """``planaria abft`` arguments of an abft plan."""
    return ["abft", plan.settings["kernel"], "--dem", str(dem), "-n", str(plans.ABFT_WORKERS), "--out", str(out),
            "--json", "--backend", plan.backend, "--timeout", _num(timeout), *plan.settings["abft_args"],
            *_inject(plan)]


def abft_observation(code: int | None, out: str, err: str, output: Path, reference: bytes) -> Observation:
    """What an abft run did: its report, and its output against the reference bytes."""
    obs = Observation(code, notes=_notes(out + err))
    report = _json(out)
    obs.timed_out = report.get("job_exit") == EXIT_TIMEOUT
    if report.get("ok") is True:
        got = output.read_bytes() if output.is_file() else None
        obs.result = "match" if got == reference else "differs"
        if got is None:
            obs.notes.append("report ok but no output file")
    elif report.get("ok") is False and "without a report" not in str(report.get("error", "")):
        obs.stop = CANNOT_CORRECT + ": " + str(report.get("fatal") or report.get("error") or "not verified")
    return obs


def _abft(plan: plans.RunPlan, ctx: Context, rundir: Path, rec: RunRecord) -> list[tuple[str, str]]:
    """Run an abft plan on the campaign's DEM; its verdict."""
    shared = ctx.root / "abft"
    shared.mkdir(exist_ok=True)
    dem = shared / "dem.npz"
    if not dem.is_file():
        make_dem(dem)
    kernel = plan.settings["kernel"]
    reference = abft_reference(dem, kernel, shared / f"reference-{kernel}.npy")
    output = rundir / f"{kernel}.npy"
    argv = abft_argv(plan, ctx.timeout, dem, output)
    rec.replay.append(replay_line(argv))
    code, out, err = launch(argv, ctx, rundir, "abft")
    rec.codes.append(code)
    rec.tail = _tail(out, err)
    return [classify(abft_observation(code, out, err, output, reference))]


# -- helpers ---------------------------------------------------------------------------------------
def _json(text: str) -> dict[str, Any]:
    """The JSON object a command printed on stdout ({} when none)."""
    start = text.find("{")
    if start < 0:
        return {}
    try:
        value = json.loads(text[start:])
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _num(x: float) -> str:
    """A number as the shortest exact text (60.0 -> 60)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))
