"""``planaria trace``: post-mortem analysis and Perfetto export of fragmented-program traces."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

app = typer.Typer(help="Analyse or export the traces of a fragmented program (planaria.fragments).",
                  no_args_is_help=True)


def _resolve(directory: Path) -> Path:
    """Accept the trace directory itself or a job directory holding trace/."""
    if directory.is_dir() and not list(directory.glob("trace-r*.jsonl")) and (directory / "trace").is_dir():
        return directory / "trace"
    return directory


@app.command("analyze")
def analyze(
    directory: Path = typer.Argument(..., help="Trace directory (trace-r*.jsonl) or a job directory with trace/."),
    all_hung: bool = typer.Option(False, "--all", help="Describe every hung CF, not only the root causes."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Explain a hung or failed fragmented program from its per-rank traces.

    Prints the CFs that never finished and caused the hang (root causes: they wait for no other
    hung CF), each with its expression, file:line and call history, the DFs it awaits as index
    ranges with local and declared names, and where those DFs were probably meant to be set;
    dependency cycles; DFs initialized more than once with every writer; type mismatches.

    Examples:

      planaria trace analyze .planaria/jobs/<id>/trace

      planaria trace analyze /tmp/t1 --all --json > report.json

    Exit status: 0 the report found nothing wrong; 1 it names problems (hung CFs, a cycle, a DF
    initialized twice, a type mismatch, a CF that raised); 2 no trace records in DIR. Lines that
    are not trace records are named on stderr and skipped.
    """
    from planaria.trace.analyze import analyze_dir, found_problems
    problems: list[str] = []
    try:
        rep = analyze_dir(_resolve(directory), all_hung=all_hung, problems=problems)
    except (FileNotFoundError, ValueError) as e:
        print(f"planaria trace analyze: {e}", file=sys.stderr)
        raise typer.Exit(2) from None
    for p in problems:
        print(f"planaria trace analyze: warning: {p}", file=sys.stderr)
    if json_out:
        sys.stdout.write(json.dumps(rep, indent=2, default=repr) + "\n")
    else:
        sys.stdout.write(rep["text"])
    if found_problems(rep):
        raise typer.Exit(1)


@app.command("export")
def export(
    directory: Path = typer.Argument(..., help="Trace directory (trace-r*.jsonl) or a job directory with trace/."),
    out: Path = typer.Option(..., "--out", "-o", help="Chrome/Perfetto trace JSON to write."),
    json_out: bool = typer.Option(False, "--json", help="Print a one-line JSON summary."),
) -> None:
    """Write a Chrome/Perfetto trace (open it in ui.perfetto.dev) with flow arrows for data dependencies.

    Examples:

      planaria trace export .planaria/jobs/<id> --out run.json
    """
    from planaria.util.fsutil import atomic_write
    from planaria.trace.perfetto import to_chrome
    from planaria.trace.writer import read_traces
    problems: list[str] = []
    try:
        recs = read_traces(_resolve(directory), problems)
    except (FileNotFoundError, ValueError) as e:
        print(f"planaria trace export: {e}", file=sys.stderr)
        raise typer.Exit(2) from None
    for p in problems:
        print(f"planaria trace export: warning: {p}", file=sys.stderr)
    from planaria.util.fsutil import output_problem
    why = output_problem(out)
    if why:
        print(f"planaria trace export: --out {out}: {why}", file=sys.stderr)
        raise typer.Exit(2)
    doc = to_chrome(recs)
    atomic_write(out, json.dumps(doc))
    n = sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
    flows = sum(1 for e in doc["traceEvents"] if e["ph"] == "s")
    if json_out:
        print(json.dumps({"out": str(out), "cfs": n, "flows": flows}))
    else:
        print(f"wrote {out}: {n} CFs, {flows} data-flow arrows")
