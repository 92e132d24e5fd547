"""Fault localization scenarios: run a faulty program under ``planaria run``, diagnose it, check the answer.

Each case (``benchmarks.faulty``) puts one fault into a 4-rank job: a rank killed while the
others are in a collective, an unmatched receive, a rank spinning in a compute loop, a message
dropped by injection, a slow rank (delayed messages), repeated I/O errors on the ranks of one
host; and, outside the default set, a rank holding the GIL and a plain mpi4py program without
planaria's runtime (``plain``). The driver waits until the job has reached the faulty state, lets the run-time detection
work for a few seconds, then asks for a global diagnosis (``planaria diagnose``; for the killed
rank, after the job has ended, from its event log) and checks that the report names the faulty
rank(s) and the call site. Every wait is bounded. Reported times: from the fault being in place
to the first incident of the localization service, and the wall time of the diagnosis itself.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from benchmarks import _launch, faulty
from planaria.util.env import PLANARIA_HOME, PLANARIA_HOSTS_DIR, PREFIX

DETECT = "p2p=1,coll=1.5,probe=1,slow=0.1"


@dataclass(frozen=True)
class Case:
    """One scenario: injected faults, the ranks and call-site marker the diagnosis must name."""

    name: str
    ranks: tuple[int, ...]
    site: str
    inject: tuple[str, ...] = ()
    live: bool = True            # diagnose the running job (else: after it ended, post-mortem)
    settle: float = 3.0          # seconds after READY before diagnosing (detection at work)
    words: tuple[str, ...] = field(default=())   # words the report must contain (lower case)


CASES: dict[str, Case] = {c.name: c for c in (
    Case("killcoll", (2,), "killcoll", ("kill:rank=2,iter=6",), live=False, words=("killed",)),
    Case("unmatched", (1,), "unmatched"),
    Case("spin", (2,), "spin"),
    Case("drop", (1, 2), "drop", ("drop:src=1,dst=2,p=0.2,seed=3",), words=("lost",)),
    Case("slow", (2,), "slow", ("delay:src=2,dst=0,p=1,ms=120",), settle=3.0, words=("slow messages",)),
    Case("ioerr", (2, 3), "ioerr", ("ioerror:rank=2+3,iter=5",), words=("i/o",)),
    Case("gil", (2,), "gil", words=("gil",)),
    Case("plain", (2,), "plain", words=("not in an mpi call", "mpi_barrier")),
)}
DEFAULT_CASES = ("killcoll", "unmatched", "spin", "drop", "slow", "ioerr")


def site_line(marker: str) -> int:
    """Line number of ``# SITE:<marker>`` in the scenario program."""
    for i, line in enumerate(Path(faulty.__file__).read_text().splitlines(), 1):
        if line.rstrip().endswith(f"SITE:{marker}"):
            return i
    raise KeyError(marker)


def run_env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    """The environment of a ``planaria run`` job kept in ``home`` (PLANARIA_HOME): this one without its
    PLANARIA_ settings, Open MPI's run-as-root permission when root, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    env[PLANARIA_HOME] = str(home)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(extra)
    return env


def wait_ready(job: Path, n: int, proc: subprocess.Popen, timeout: float) -> float:
    """Wait until job directory ``job``'s output has ``n`` READY lines (the scenario's faulty state is
    reached); the time then. RuntimeError if ``proc`` ends first or ``timeout`` seconds pass."""
    deadline = time.time() + timeout
    out = job / "output.log"
    while time.time() < deadline:
        text = out.read_text(errors="replace") if out.exists() else ""
        if sum(1 for ln in text.splitlines() if "READY" in ln) >= n:
            return time.time()
        if proc.poll() is not None:
            raise RuntimeError(f"the job ended before it was ready (exit {proc.returncode})")
        time.sleep(0.05)
    raise RuntimeError(f"the job was not ready within {timeout:g} s")


def job_dir(home: Path, timeout: float = 20.0) -> Path:
    """The newest job directory under ``home`` once its manifest is written; RuntimeError after ``timeout`` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        jobs = sorted((home / "jobs").iterdir()) if (home / "jobs").is_dir() else []
        if jobs and (jobs[-1] / "manifest.json").exists():
            return jobs[-1]
        time.sleep(0.05)
    raise RuntimeError("no job directory appeared")


def _diagnose(job: Path, env: dict[str, str], timeout: float) -> tuple[dict[str, Any], float]:
    t0 = time.time()
    res = subprocess.run([sys.executable, "-m", "planaria.cli.main", "diagnose", str(job), "--json"],
                         capture_output=True, text=True, timeout=timeout, env=env)
    wall = time.time() - t0
    if res.returncode != 0 or "{" not in res.stdout:
        raise RuntimeError(f"planaria diagnose failed (exit {res.returncode}): {res.stderr.strip()[-400:]}")
    return json.loads(res.stdout[res.stdout.index("{"):]), wall


def _first_incident(job: Path, since: float) -> float | None:
    path = job / "events.jsonl"
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("type") == "incident":
            return max(float(ev.get("t_recv") or ev.get("t") or since) - since, 0.0)
    return None


def run_case(name: str, home: Path | None = None, backend: str = "ulfm", timeout: float = 90.0,
             netns: str | None = None, hosts_dir: str | None = None, detect: str = DETECT) -> dict[str, Any]:
    """Run scenario ``name`` once; the result holds the report, the checks and the times.

    ``netns``: run on the test hosts ``NAME1,NAME2`` made by ``planaria hosts up`` (state in
    ``hosts_dir``), two ranks on each.
    """
    case = CASES[name]
    home = Path(home or tempfile.mkdtemp(prefix="planaria-localize-"))
    home.mkdir(parents=True, exist_ok=True)
    extra = {}
    if name == "ioerr":
        extra["FAULTY_DIR"] = str(home)
    if hosts_dir:
        extra[PLANARIA_HOSTS_DIR] = str(hosts_dir)
    env = run_env(home, extra)
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", "4", "--backend", backend,
           "--timeout", str(timeout), "--detect-timeouts", detect, "--no-diagnose-on-timeout"]
    if netns:
        cmd += ["--netns", netns]
    for spec in case.inject:
        cmd += ["--inject", spec]
    cmd += ["--", sys.executable, "-m", "benchmarks.faulty", name]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        job = job_dir(home)
        t_ready = wait_ready(job, 1 if name in ("killcoll", "drop", "slow", "ioerr") else 4, proc, 40.0)
        if case.live:
            time.sleep(case.settle)
            report, wall = _diagnose(job, env, 60.0)
        else:
            proc.wait(timeout=60.0)
            report, wall = _diagnose(job, env, 60.0)
        incident_s = _first_incident(job, t_ready)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(20.0)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5.0)
    problems = check(case, report)
    return {"case": name, "backend": backend, "job": str(job), "ok": not problems, "problems": problems,
            "diagnose_s": round(wall, 3), "incident_s": None if incident_s is None else round(incident_s, 3),
            "verdict": report.get("verdict"), "text": report.get("text", "")}


def check(case: Case, report: dict[str, Any]) -> list[str]:
    """What the report fails to say: the faulty ranks, the call site, the case's key words."""
    text = report.get("text", "")
    low = text.lower()
    problems = []
    line = site_line(case.site)
    if f"faulty.py:{line}" not in text:
        problems.append(f"call site faulty.py:{line} not named")
    named = _named_ranks(report)
    for r in case.ranks:
        if r not in named:
            problems.append(f"rank {r} not named as a root cause")
    for w in case.words:
        if w not in low:
            problems.append(f"report does not say {w!r}")
    return problems


def _named_ranks(report: dict[str, Any]) -> set[int]:
    from planaria.diagnose.hangfilter import parse_rank_ranges
    out: set[int] = set()
    for rc in report.get("root_causes") or []:
        ranks = rc.get("rank_list")
        if ranks is None:
            ranks = parse_rank_ranges(str(rc.get("ranks") or "")).tolist()
        out.update(int(r) for r in ranks or [])
    return out


def run(cases: list[str], backend: str = "ulfm", repeat: int = 1, timeout: float = 90.0,
        progress: Any = None, detect: str = DETECT) -> dict[str, Any]:
    """Every case ``repeat`` times; a case whose report misses its fault makes the result an error.

    ``detect``: the jobs' detection thresholds (``planaria run --detect-timeouts``).
    """
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise ValueError(f"unknown case(s) {', '.join(unknown)} (expected {', '.join(CASES)})")
    from planaria.localize.thresholds import Thresholds
    th = Thresholds.parse(detect)
    runs = []
    for c in cases:
        for i in range(repeat):
            if progress:
                progress(f"{c} ({i + 1}/{repeat})")
            runs.append(run_case(c, backend=backend, timeout=timeout, detect=detect))
    bad = [r for r in runs if not r["ok"]]
    return {"backend": backend, "detect": detect, "tick_s": th.tick(), "runs": runs, "ok": not bad,
            "error": None if not bad else "; ".join(f"{r['case']}: {', '.join(r['problems'])}" for r in bad)}


def show(result: dict[str, Any], as_json: bool = False) -> None:
    """Table: case, verdict, names the fault, time to the first incident, diagnosis wall time."""
    from benchmarks._launch import show as _show

    def table(res: dict[str, Any]) -> Any:
        from rich.table import Table
        t = Table(title=f"fault localization scenarios ({res['backend']}, 4 ranks, --detect-timeouts "
                        f"{res.get('detect', DETECT)}: service tick {res.get('tick_s', 0.05):g} s)")
        for col in ("case", "verdict", "fault named", "first incident", "diagnosis"):
            t.add_column(col)
        for r in res["runs"]:
            inc = "-" if r["incident_s"] is None else f"{r['incident_s']:.2f} s"
            t.add_row(r["case"], str(r["verdict"]), "yes" if r["ok"] else "NO: " + "; ".join(r["problems"]),
                      inc, f"{r['diagnose_s']:.2f} s")
        return t
    _show(result, as_json, table)


def command(
    cases: str = typer.Option("killcoll,unmatched,spin,drop,slow,ioerr", "--cases",
                              help="Scenarios, comma-separated: killcoll, unmatched, spin, drop, slow, ioerr; "
                                   "also gil (a rank holding the GIL) and plain (a program without "
                                   "planaria's runtime)."),
    backend: str = typer.Option("ulfm", "--backend", help="ulfm (mpiexec --with-ft ulfm) or sim."),
    repeat: int = typer.Option(1, "--repeat", min=1, help="Runs per scenario."),
    timeout: float = typer.Option(90.0, "--timeout", help="Seconds allowed per job."),
    json_out: bool = typer.Option(False, "--json", help="Print the result (with every report) as JSON."),
    detect_timeouts: str = typer.Option("p2p=1,coll=1.5,probe=1,slow=0.1", "--detect-timeouts",
                                        help="The jobs' detection thresholds (as planaria run --detect-timeouts)."),
) -> None:
    """Fault localization scenarios: does 'planaria diagnose' name the faulty ranks and call site, and how fast.

    Each scenario is a 4-rank job under 'planaria run' with one fault (a rank killed during a
    collective, an unmatched receive, an endless compute loop, a dropped message, a slow rank,
    repeated I/O errors on two ranks). Exit 1 when a report misses its fault.

    Example: python -m benchmarks localize --cases spin,drop --repeat 3
    """

    try:
        result = run([c for c in cases.replace(" ", "").split(",") if c], backend=backend,
                        repeat=repeat, timeout=timeout, progress=_launch.progress_printer(json_out), detect=detect_timeouts)
    except ValueError as e:
        print(f"python -m benchmarks localize: {e}", file=sys.stderr)
        raise typer.Exit(2) from None
    show(result, json_out)
    raise typer.Exit(0 if result["ok"] else 1)
