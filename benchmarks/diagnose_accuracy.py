"""Diagnosis accuracy on a corpus of faulty programs: is the FIRST root cause right the first time?

The corpus (``tests/diagnosis_corpus/``: one small faulty program per case and ``cases.toml``, the
answer a careful human gives) is run case by case, each in every mode that applies:

* ``ulfm`` / ``sim``: ``planaria run --backend B --on-hang abort`` with fast detection thresholds
  (``--detect-timeouts p2p=1,coll=1,probe=1``) and a hard ``--timeout``; the program uses
  ``planaria.world()``;
* ``plain``: the same program against ``MPI.COMM_WORLD`` without planaria (``CORPUS_MODE=plain``),
  under ``planaria run`` with a short ``--timeout`` (no runtime, so no run-time incidents: the
  launcher diagnoses from stacks before the timeout's kill).

When the job has ended, ``planaria diagnose JOBDIR --json`` gives the report a user gets (the
post-mortem, which opens with the launcher's last diagnosis when the launcher stopped a hung job).
Its first root cause is compared with the expected one: ``kind``, ``ranks`` (the same set) and
``site`` (the ``file:line`` of the root cause; a case may list several acceptable lines).
Outcome per case and mode: **right** (all three agree), **wrong** (a first root cause that differs,
with what it said), **no answer** (no root cause, the diagnosis failed, or the job did not end).

Time to answer (ulfm / sim): from the fault to the first incident line the launcher printed that
announces the correct root cause. The fault's time is the ``FAULT <epoch>`` line the faulty rank
prints just before the fault (``output.log``), or for an injected fault the rank's ``inject``
record in ``events.jsonl``; the incident's time is the controller's receipt (``t_recv``) of the
first ``incident`` record that the launcher announces (status ``confirmed`` or ``detected``) whose
kind is the expected kind or its run-time counterpart (``INCIDENT_KINDS``) and whose ranks share a
rank with the expected ones. Also reported: the time to the first announced incident of any kind,
to the launcher's diagnosis file (``diag-1.json``, written at ``--on-hang abort`` or at the
timeout; all modes), and to the job's end (``summary.json``; for jobs that end by themselves after
a failure, the post-mortem is the answer and is there from that moment).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import typer

from benchmarks import _launch
from planaria.util.env import PLANARIA_HOME, PREFIX

MODES = ("ulfm", "sim", "plain")
DETECT = "p2p=1,coll=1,probe=1"
RUNTIME_TIMEOUT = 30.0       # hard --timeout of a job with planaria's runtime (most end in < 10 s)
PLAIN_TIMEOUT = 14.0         # a plain program that hangs ends at its --timeout (no run-time detection)

#: report kind -> the incident kinds (run-time detection, rules.py) that announce the same root cause
INCIDENT_KINDS: dict[str, frozenset[str]] = {
    "no-state": frozenset({"no-state", "rank-failed", "unreachable", "host-down"}),
    "finished": frozenset({"finished", "not-sending", "rank-failed", "unreachable"}),
    "computing": frozenset({"computing", "not-sending"}),
    "io-fault": frozenset({"io-fault", "io-error"}),
    "lost-message": frozenset({"lost-message", "network"}),
    "injected": frozenset({"injected"}),
    "collective-mismatch": frozenset({"collective-mismatch"}),
    "self-wait": frozenset({"self-wait", "deadlock"}),
}
_ANNOUNCED = ("confirmed", "detected")     # launch/onhang.py: the incidents the launcher prints


def default_corpus() -> Path:
    """``tests/diagnosis_corpus`` of the source tree (``$PLANARIA_CORPUS`` overrides)."""
    env = os.environ.get("PLANARIA_CORPUS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "tests" / "diagnosis_corpus"


@dataclass(frozen=True)
class Case:
    name: str
    file: str
    n: int
    modes: tuple[str, ...]
    kind: str
    ranks: tuple[int, ...]
    sites: tuple[str, ...]
    options: tuple[str, ...] = ()
    suite: tuple[str, ...] = ()          # the modes the regression tests run (suite = true: every mode)
    note: str = ""
    all_ranks: bool = False              # ranks = "all": every rank of the job, whatever n
    xfail: tuple[str, ...] = ()          # modes in which the regression tests expect a wrong answer (strict)
    finding: str = ""                    # what the diagnosis says instead, when it is wrong today

    def expected_ranks(self, n: int) -> tuple[int, ...]:
        return tuple(range(n)) if self.all_ranks else self.ranks


def load_cases(corpus: Path | None = None) -> list[Case]:
    """The cases of ``cases.toml``; ValueError (one line) when the table is malformed."""
    corpus = Path(corpus or default_corpus())
    path = corpus / "cases.toml"
    try:
        table = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"cannot read the corpus table {path}: {e}") from None
    out: list[Case] = []
    for i, c in enumerate(table.get("case") or []):
        try:
            site = c["site"]
            sites = tuple([site] if isinstance(site, str) else site)
            all_ranks = c["ranks"] == "all"
            ranks = () if all_ranks else tuple(sorted(int(r) for r in c["ranks"]))
            suite = c.get("suite", False)
            modes = tuple(c["modes"])
            suite = modes if suite is True else () if suite is False else tuple(suite)
            case = Case(name=str(c["name"]), file=str(c["file"]), n=int(c["n"]), modes=modes,
                        kind=str(c["kind"]), ranks=ranks, sites=sites, all_ranks=all_ranks,
                        options=tuple(c.get("options") or ()), suite=suite, note=str(c.get("note") or ""),
                        xfail=tuple(c.get("xfail") or ()), finding=str(c.get("finding") or ""))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: case #{i + 1} is malformed ({e!r})") from None
        bad = [m for m in (*case.modes, *case.suite, *case.xfail) if m not in MODES or m not in case.modes]
        if set(case.suite) & set(case.xfail):
            raise ValueError(f"{path}: case {case.name}: a mode is both in suite and xfail")
        if bad or not (corpus / case.file).is_file():
            raise ValueError(f"{path}: case {case.name}: unknown mode(s) {bad}" if bad
                             else f"{path}: case {case.name}: no file {case.file}")
        out.append(case)
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: duplicate case names")
    return out


def site_of(site: Any) -> str | None:
    """``/abs/dir/prog.py:12 in <module>`` -> ``prog.py:12`` (None when there is no line)."""
    if not site:
        return None
    m = re.match(r"(.*?):(\d+)", str(site).split(" in ", 1)[0])
    if not m:
        return None
    return f"{Path(m.group(1)).name}:{m.group(2)}"


def first_root(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The first root cause as {kind, ranks, site, reason}, or None."""
    if not report:
        return None
    roots = report.get("root_causes") or []
    if not roots:
        return None
    rc = roots[0]
    ranks = rc.get("rank_list")
    if ranks is None:
        from planaria.diagnose.hangfilter import parse_rank_ranges
        ranks = parse_rank_ranges(str(rc.get("ranks") or "")).tolist()
    return {"kind": rc.get("kind"), "ranks": sorted(int(r) for r in ranks or []), "site": site_of(rc.get("site")),
            "reason": str(rc.get("reason") or "")[:300]}


def judge(case: Case, root: dict[str, Any] | None, n: int | None = None) -> tuple[str, list[str]]:
    """('right' | 'wrong' | 'no answer', what differs) for a job of ``n`` ranks (default: the case's n)."""
    if root is None:
        return "no answer", ["no root cause"]
    diffs = []
    want = case.expected_ranks(n or case.n)
    if root["kind"] != case.kind:
        diffs.append(f"kind {root['kind']} (expected {case.kind})")
    if tuple(root["ranks"]) != want:
        diffs.append(f"ranks {root['ranks']} (expected {list(want)})")
    if root["site"] not in case.sites:
        diffs.append(f"site {root['site']} (expected {' or '.join(case.sites)})")
    return ("right" if not diffs else "wrong"), diffs


def _env(home: Path, mode: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX) and k != "CORPUS_MODE"}
    env[PLANARIA_HOME] = str(home)
    if mode == "plain":
        env["CORPUS_MODE"] = "plain"
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def run_command(case: Case, mode: str, corpus: Path, ranks: int | None = None,
                timeout: float | None = None, run_args: Sequence[str] = ()) -> list[str]:
    """The ``planaria run`` command line of one case in one mode (``run_args``: more of its options)."""
    n = max(case.n, ranks or 0)
    t = timeout or (PLAIN_TIMEOUT if mode == "plain" else RUNTIME_TIMEOUT)
    return [sys.executable, "-m", "planaria.cli.main", "run", "-n", str(n),
            "--backend", "sim" if mode == "sim" else "ulfm", "--timeout", f"{t:g}", "--on-hang", "abort",
            "--detect-timeouts", DETECT, *case.options, *run_args, "--", sys.executable, str(corpus / case.file)]


def _events(job: Path) -> list[dict[str, Any]]:
    out = []
    path = job / "events.jsonl"
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def fault_time(job: Path, events: list[dict[str, Any]]) -> float | None:
    """Epoch time of the fault: the earliest ``FAULT <t>`` line, else the earliest ``inject`` record."""
    ts = []
    out = job / "output.log"
    if out.exists():
        ts = [float(m.group(1)) for m in re.finditer(r"FAULT (\d+\.\d+)", out.read_text(errors="replace"))]
    if ts:
        return min(ts)
    inj = [float(e.get("t_recv") or e.get("t")) for e in events if e.get("type") == "inject" and (e.get("t") or e.get("t_recv"))]
    return min(inj) if inj else None


def incident_times(case: Case, events: list[dict[str, Any]], t_fault: float | None, n: int) -> dict[str, Any]:
    """Seconds from the fault to the first announced incident, and to the first correct one."""
    kinds = INCIDENT_KINDS.get(case.kind, frozenset({case.kind}))
    first = correct = None
    first_kind = None
    for e in sorted((e for e in events if e.get("type") == "incident" and isinstance(e.get("incident"), dict)),
                    key=lambda e: float(e.get("t_recv") or e.get("t") or 0)):
        inc = e["incident"]
        if inc.get("status") not in _ANNOUNCED:
            continue
        t = float(e.get("t_recv") or e.get("t") or 0)
        if first is None:
            first, first_kind = t, inc.get("kind")
        if correct is None and inc.get("kind") in kinds and set(inc.get("ranks") or ()) & set(case.expected_ranks(n)):
            correct = t
    def rel(t: float | None) -> float | None:
        return None if t is None or t_fault is None else round(max(t - t_fault, 0.0), 3)
    return {"first_incident_s": rel(first), "first_incident_kind": first_kind, "correct_incident_s": rel(correct)}


def _diagnose(job: Path, env: dict[str, str], timeout: float = 60.0) -> tuple[dict[str, Any] | None, str]:
    try:
        res = subprocess.run([sys.executable, "-m", "planaria.cli.main", "diagnose", str(job), "--json"],
                             capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"planaria diagnose did not answer within {timeout:g} s"
    if "{" not in res.stdout:
        return None, f"planaria diagnose failed (exit {res.returncode}): {res.stderr.strip()[-300:]}"
    try:
        return json.loads(res.stdout[res.stdout.index("{"):]), ""
    except ValueError as e:
        return None, f"planaria diagnose printed no JSON ({e})"


def run_case(case: Case, mode: str, corpus: Path | None = None, ranks: int | None = None,
             timeout: float | None = None, home: Path | None = None, grace: float = 40.0,
             run_args: Sequence[str] = ()) -> dict[str, Any]:
    """Run one case in one mode and judge the first root cause of ``planaria diagnose JOB --json``.

    ``timeout``: the job's ``--timeout`` (default by mode); the launcher gets ``grace`` seconds more
    to end it before it is killed, and ``planaria diagnose`` gets ``grace`` seconds too."""
    corpus = Path(corpus or default_corpus())
    own = home is None
    home = Path(home or tempfile.mkdtemp(prefix="planaria-corpus-"))
    env = _env(home, mode)
    cmd = run_command(case, mode, corpus, ranks, timeout, run_args)
    t_job = float(cmd[cmd.index("--timeout") + 1])
    t0 = time.time()
    _launch.sessiondirs.remove_stale()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, cwd=str(home))
    ended = True
    try:
        _, stderr = proc.communicate(timeout=t_job + grace)
    except subprocess.TimeoutExpired:
        ended = False
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
    wall = time.time() - t0
    jobs = sorted((home / "jobs").iterdir()) if (home / "jobs").is_dir() else []
    n = max(case.n, ranks or 0)
    row: dict[str, Any] = {"case": case.name, "mode": mode, "n": n, "exit": proc.returncode,
                           "wall_s": round(wall, 2), "expected": {"kind": case.kind, "ranks": list(case.expected_ranks(n)),
                                                                  "site": list(case.sites)},
                           "command": " ".join(cmd[2:]), "job": str(jobs[-1]) if jobs else None}
    if not jobs:
        row.update(result="no answer", diffs=["no job directory"], said=None, error=stderr.strip()[-400:])
        return row
    job = jobs[-1]
    report, err = _diagnose(job, env, grace)
    root = first_root(report)
    result, diffs = judge(case, root, n)
    if not ended:
        result, diffs = "no answer", [f"the job did not end within {t_job + grace:g} s"] + diffs
    events = _events(job)
    t_fault = fault_time(job, events)
    live = None
    diag1 = job / "diag-1.json"
    diag_s = None
    if diag1.exists():
        try:
            live = first_root(json.loads(diag1.read_text()))
        except ValueError:
            live = None
        if t_fault is not None:
            diag_s = round(max(diag1.stat().st_mtime - t_fault, 0.0), 3)
    end_s = None
    summary = job / "summary.json"
    if summary.exists() and t_fault is not None:
        end_s = round(max(summary.stat().st_mtime - t_fault, 0.0), 3)
    row.update(result=result, diffs=diffs, said=root, verdict=(report or {}).get("verdict"), error=err or None,
               live=live, diag_s=diag_s, end_s=end_s, fault_t=t_fault, **incident_times(case, events, t_fault, n))
    if own:
        import shutil
        shutil.rmtree(home, ignore_errors=True)
        row["job"] = None
    return row


def parse_list(spec: str | None, allowed: list[str] | tuple[str, ...], what: str) -> list[str] | None:
    if spec is None or spec.strip() in ("", "all"):
        return None
    items = [s for s in spec.replace(" ", "").split(",") if s]
    bad = [s for s in items if s not in allowed]
    if bad:
        raise ValueError(f"unknown {what} {', '.join(bad)} (expected some of {', '.join(allowed)})")
    return items


def run(cases: str | None = None, modes: str | None = None, ranks: int | None = None, corpus: Path | None = None,
        suite_only: bool = False, keep: Path | None = None,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every selected case in every selected mode that applies to it, one job at a time."""
    corpus = Path(corpus or default_corpus())
    all_cases = load_cases(corpus)
    names = parse_list(cases, [c.name for c in all_cases], "case(s)")
    mode_list = parse_list(modes, MODES, "mode(s)") or list(MODES)
    if ranks is not None and ranks < 2:
        raise ValueError(f"--ranks must be >= 2 (got {ranks})")
    chosen = [c for c in all_cases if names is None or c.name in names]
    plan = [(c, m) for c in chosen for m in mode_list if m in (c.suite if suite_only else c.modes)]
    rows = []
    for i, (c, m) in enumerate(plan, 1):
        if progress:
            progress(f"diagnose-accuracy: [{i}/{len(plan)}] {c.name} ({m})")
        home = None
        if keep is not None:
            home = Path(keep) / f"{c.name}-{m}"
            home.mkdir(parents=True, exist_ok=True)
        row = run_case(c, m, corpus, ranks, home=home)
        rows.append(row)
        if progress:
            said = row.get("said")
            what = "" if row["result"] == "right" else ": " + "; ".join(row["diffs"])
            progress(f"diagnose-accuracy:   {row['result']}{what}"
                     + (f" ({said['reason'][:120]})" if said and row['result'] != 'right' else ""))
    totals: dict[str, dict[str, int]] = {}
    for r in rows:
        t = totals.setdefault(r["mode"], {"right": 0, "wrong": 0, "no answer": 0})
        t[r["result"]] += 1
    times = sorted(r["correct_incident_s"] for r in rows if r.get("correct_incident_s") is not None)
    per_mode = {}
    for m in mode_list:
        ts = sorted(r["correct_incident_s"] for r in rows if r["mode"] == m and r.get("correct_incident_s") is not None)
        ends = sorted(r["end_s"] for r in rows if r["mode"] == m and r["result"] == "right" and r.get("end_s") is not None)
        per_mode[m] = {"incident_n": len(ts), "incident_median": _launch.median(ts) if ts else None,
                       "incident_max": max(ts) if ts else None,
                       "right_end_median": _launch.median(ends) if ends else None, "right_end_max": max(ends) if ends else None}
    return {"benchmark": "diagnose-accuracy", "corpus": str(corpus), "modes": mode_list, "ranks": ranks,
            "detect": DETECT, "cores": os.cpu_count(), "loadavg": _launch.loadavg(),
            "command": _launch.command_line(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "rows": rows, "totals": totals,
            "time_to_answer_s": {"n": len(times), "median": _launch.median(times) if times else None,
                                 "max": max(times) if times else None, "per_mode": per_mode}}


def _fmt_s(x: Any) -> str:
    return "-" if x is None else f"{x:.1f} s"


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    t = Table(title=f"Diagnosis accuracy on the corpus ({len(result['rows'])} runs, --detect-timeouts "
                    f"{result['detect']}, {result['cores']} cores)")
    for col in ("case", "mode", "result", "first root cause said (when not right)", "to correct incident",
                "to first incident", "to diag-1", "to job end"):
        t.add_column(col)
    for r in result["rows"]:
        said = r.get("said")
        what = ""
        if r["result"] != "right":
            what = "; ".join(r["diffs"])
            if said:
                what += f" -- {said['reason'][:100]}"
        t.add_row(r["case"], r["mode"], r["result"], what, _fmt_s(r.get("correct_incident_s")),
                  _fmt_s(r.get("first_incident_s")), _fmt_s(r.get("diag_s")), _fmt_s(r.get("end_s")))
    tot = result["totals"]
    tta = result["time_to_answer_s"]
    t.caption = ("totals: " + "; ".join(f"{m}: {v['right']} right, {v['wrong']} wrong, {v['no answer']} no answer"
                                        for m, v in tot.items())
                 + f". Time to the correct incident: {tta['n']} runs, median {_fmt_s(tta['median'])}, "
                   f"max {_fmt_s(tta['max'])}; load average {result['loadavg']}")
    return t


def show(result: dict[str, Any], as_json: bool) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table, min_width=160)


def command(
    cases: str = typer.Option("all", "--cases", help="Corpus cases, comma-separated (names in cases.toml), or all."),
    modes: str = typer.Option("ulfm,sim,plain", "--modes",
                              help="Modes, comma-separated: ulfm, sim (planaria's runtime on that backend), plain "
                                   "(the same program on MPI.COMM_WORLD without planaria); a case runs only in the "
                                   "modes that apply to it."),
    ranks: int | None = typer.Option(None, "--ranks", help="Ranks per job (at least each case's own n; default: the case's n)."),
    corpus: str | None = typer.Option(None, "--corpus", help="Corpus directory (default: tests/diagnosis_corpus of the source tree)."),
    suite: bool = typer.Option(False, "--suite", help="Only the cases marked suite = true (the regression tests)."),
    keep: str | None = typer.Option(None, "--keep", help="Keep every job directory under this directory."),
    json_out: bool = typer.Option(False, "--json", help="Print the result (every run, with what the report said) as JSON."),
) -> None:
    """Diagnosis accuracy on the corpus of faulty programs: is the first root cause (kind, ranks, file:line) right?

    Every case runs as a real 'planaria run --on-hang abort' job (fast detection thresholds, a hard
    --timeout), then 'planaria diagnose JOB --json'; per case and mode: right / wrong (what it said) /
    no answer, and the time from the fault to the first incident announcing the correct root cause.
    Exit 0 (whatever the accuracy), 2 for bad options.

    Example: python -m benchmarks diagnose-accuracy --cases deadlock_pair,compute_loop --modes ulfm,plain
    """
    from pathlib import Path


    def compute() -> dict[str, Any]:
        return run(cases, modes, ranks, Path(corpus) if corpus else None, suite_only=suite,
                       keep=Path(keep) if keep else None, progress=_launch.progress_printer(json_out))
    raise typer.Exit(_launch.run_and_show("diagnose-accuracy", compute, show, json_out))
