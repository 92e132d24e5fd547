"""``planaria diagnose``: explain a hung or failed job -- live through the collection tree, or from files."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer


def diagnose(
    job: Optional[str] = typer.Argument(None, help="Job id or job directory (default: the latest job)."),
    offline: Optional[Path] = typer.Option(None, "--offline", metavar="STATEFILE",
                                           help="Analyse a state file (.state) written by an earlier collection."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    k: int = typer.Option(8, "--fanout", min=2, help="Children per node of the collection tree."),
    hop: float = typer.Option(1.0, "--hop-timeout", min=0.05, help="Seconds each tree level may take; a subtree that does not answer in time is recorded as missing."),
    samples: int = typer.Option(0, "--samples", min=0, help="Stack samples per thread for the hang filter (0: the smallest s with s > 1 + ln n / ln 250)."),
    interval: float = typer.Option(0.2, "--interval", min=0.0, help="Seconds between stack samples."),
    dot: Optional[Path] = typer.Option(None, "--dot", help="Also write the picture of the diagnosis as Graphviz dot: the wait graph and the merged call tree of the stable threads, root causes highlighted."),
    svg: Optional[Path] = typer.Option(None, "--svg", help="Also write that picture as SVG (runs Graphviz dot, which must be on PATH)."),
) -> None:
    """Tell why a job hangs or failed: who waits on whom, what the root-cause ranks do, and where.

    On a running job (started by 'planaria run') every rank's state is collected through a
    k-ary tree of rank agents with per-hop timeouts ([Gao 2024], section 2.3): the MPI
    operation it is blocked in, peer and tag, collective sequence numbers per communicator,
    and every thread's Python stack, sampled a few times. The state file and the report are
    written to the job directory (diag-N.state, diag-N.json, diag-N.txt). The analysis
    merges the states, counts ranks without state (dead or unreachable, grouped by host),
    matches collectives per communicator, follows point-to-point waits to root causes
    (ranks without state, computing, blocked outside MPI, wait cycles), and runs the
    stack-sampling hang filter (threads whose stack never changed, in classes).

    On a job that is no longer running, the report comes from its event log (post-mortem:
    which rank failed first, which failures it explains).

    Examples:

      planaria diagnose                     # the latest job

      planaria diagnose 20261122-013000-ab12 --json > report.json

      planaria diagnose --offline .planaria/jobs/<id>/diag-1.state

    Sending SIGUSR1 to 'planaria run' does the same collection from the launcher.

    Exit status: 0 a report was produced (see its verdict), 1 the job did not answer,
    2 bad arguments, an unusable state file or a directory that is not a job's (or --svg
    without Graphviz dot), 3 the report was produced but dot could not draw the SVG.
    """
    import math
    for name, value in (("--hop-timeout", hop), ("--interval", interval)):
        if not math.isfinite(value):          # the parser's range check lets inf through
            print(f"planaria diagnose: {name} must be a finite number of seconds (got {value})", file=sys.stderr)
            raise typer.Exit(2)
    _check_pictures(dot, svg)
    pictures = (dot, svg)
    if offline is not None:
        if job is not None:
            print("planaria diagnose: give a JOB or --offline STATEFILE, not both", file=sys.stderr)
            raise typer.Exit(2)
        raise typer.Exit(run_offline(offline, json_out, pictures))
    raise typer.Exit(online(job, json_out, k, hop, samples, interval, pictures))


def _check_pictures(dot: Path | None, svg: Path | None) -> None:
    """Exit 2 with one line when a picture could not be written (before the work)."""
    from planaria.util.fsutil import output_problem
    for name, path in (("--dot", dot), ("--svg", svg)):
        why = output_problem(path) if path is not None else None
        if why:
            print(f"planaria diagnose: {name} {path}: {why}", file=sys.stderr)
            raise typer.Exit(2)
    if svg is not None:
        from planaria.diagnose.picture import dot_missing
        why = dot_missing()
        if why:
            print(f"planaria diagnose: --svg {svg}: {why}", file=sys.stderr)
            raise typer.Exit(2)


# files of a job directory of 'planaria run' (the event log is there from its creation on)
JOB_FILES = ("manifest.json", "events.jsonl", "summary.json")     # jobdir.MANIFEST, EVENTS, SUMMARY


Pictures = tuple[Optional[Path], Optional[Path]]      # --dot, --svg


def _emit(report: dict, json_out: bool, pictures: Pictures = (None, None), drawn: dict | None = None) -> int:
    """Print the report and write the pictures of ``drawn`` (default: the report); 3 when dot could
    not draw the SVG, else 0."""
    if json_out:
        from planaria.launch.jobdir import dump_json
        sys.stdout.write(dump_json(report))
    else:
        sys.stdout.write(report.get("text", ""))
    sys.stdout.flush()
    dot, svg = pictures
    if dot is None and svg is None:
        return 0
    from planaria.diagnose.picture import DotError, render_svg, to_dot
    from planaria.util.fsutil import atomic_write
    text = to_dot(drawn if drawn is not None else report)
    if dot is not None:
        atomic_write(dot, text)
    if svg is not None:
        try:
            atomic_write(svg, render_svg(text))
        except DotError as exc:
            print(f"planaria diagnose: --svg {svg}: {exc}", file=sys.stderr)
            return 3
    return 0


def online(job: str | None, json_out: bool, k: int = 8, hop: float = 1.0, samples: int = 0,
           interval: float = 0.2, pictures: Pictures = (None, None)) -> int:
    """Collect the state of a running job and analyse it; post-mortem when it is no longer running."""
    from planaria.diagnose import collect
    from planaria.launch.client import ToolError, find_job, request
    try:
        jd = find_job(job)
    except (ToolError, FileNotFoundError) as e:
        print(f"planaria diagnose: {e}", file=sys.stderr)
        return 2
    if not any((jd.path / name).is_file() for name in JOB_FILES):
        # an empty or unrelated directory has no event log either: a post-mortem of it would
        # report "no rank failed" about a job that never existed
        print(f"planaria diagnose: {jd.path} is not a job directory (it has no {', '.join(JOB_FILES[:-1])} "
              f"or {JOB_FILES[-1]})", file=sys.stderr)
        return 2
    manifest: dict = {}
    try:
        manifest = jd.manifest()
    except (OSError, ValueError):
        pass
    status = manifest.get("status")
    if status not in ("running", "starting", "restarting"):
        from planaria.diagnose.postmortem import postmortem
        rows = None
        try:
            rows = json.loads((jd.path / "summary.json").read_text()).get("ranks")
        except (OSError, ValueError, AttributeError):
            pass                          # no summary yet (the launcher was killed): events only
        from planaria.comm.flight import read_dir
        live = _last_live(jd.path)
        report = postmortem(jd.events(), jd.id, summary=rows if isinstance(rows, list) else None,
                            last_live=live, flight=read_dir(jd.path), outcome=status)
        report["job"] = jd.id
        drawn = report
        if live is not None and any(rc.get("source") == live[0] for rc in report.get("root_causes") or []):
            # the root causes are the last live diagnosis's: so are the wait graph and call tree drawn
            drawn = {**report, "wait_graph": live[1].get("wait_graph"), "hang_filter": live[1].get("hang_filter")}
        return _emit(report, json_out, pictures, drawn)
    n = int(manifest.get("nranks") or 1) + int(manifest.get("spares") or 0)
    budget = collect.budget_for(n, k, hop, max(samples, 8), interval) + 30.0
    try:
        reply = request(jd, {"type": "diagnose", "k": k, "hop": hop, "rounds": samples,
                             "interval": interval}, timeout=budget)
    except ToolError as e:
        print(f"planaria diagnose: {e}", file=sys.stderr)
        return 1
    if reply.get("error"):
        print(f"planaria diagnose: the controller could not diagnose: {reply['error']}", file=sys.stderr)
        return 1
    report = reply["report"]
    report["files"] = {"state": reply.get("state"), "json": reply.get("json"), "text": reply.get("text_path")}
    code = _emit(report, json_out, pictures)
    if not json_out:
        print(f"state file {reply.get('state')}", file=sys.stderr)
    return code


def _last_live(jobdir: Path) -> tuple[str, dict] | None:
    """The newest ``diag-N.json`` the launcher wrote while the job ran (name, report), or None."""
    found = []
    for p in jobdir.glob("diag-*.json"):
        n = p.stem[len("diag-"):]
        if n.isdigit():
            found.append((int(n), p))
    for _, p in sorted(found, reverse=True):
        try:
            return p.name, json.loads(p.read_text())
        except (OSError, ValueError):
            continue
    return None


def run_offline(path: Path, json_out: bool, pictures: Pictures = (None, None)) -> int:
    """Read ``path``, analyse it, print the report; 2 with one line on stderr if the file is unusable."""
    from planaria.diagnose.report import analyze
    from planaria.diagnose.state import read_state

    try:
        report = analyze(read_state(path))
    except ValueError as e:
        print(f"planaria diagnose: {e}", file=sys.stderr)
        return 2
    return _emit(report, json_out, pictures)
