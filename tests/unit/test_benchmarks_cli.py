"""``python -m benchmarks``: one command for every benchmark, each with its options and an example."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from benchmarks.cli import COMMANDS, app
from planaria.cli.helptext import reflow

ROOT = Path(__file__).resolve().parents[2]


def test_help_from_the_repository_root_lists_every_benchmark() -> None:
    res = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={**__import__("os").environ, "COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "Usage: python -m benchmarks" in res.stdout
    for name in COMMANDS:
        assert f" {name} " in res.stdout, name


def test_every_benchmark_help_has_an_example_and_is_reflowed() -> None:
    group = typer.main.get_command(app)
    assert sorted(group.commands) == sorted(COMMANDS)
    for name, cmd in group.commands.items():
        assert cmd.help and reflow(cmd.help) == cmd.help, name
        assert f"Example: python -m benchmarks {name} " in cmd.help, name
        res = CliRunner().invoke(app, [name, "--help"])
        assert res.exit_code == 0 and "--json" in res.stdout, (name, res.output)


def test_checkpoint_options_are_complete() -> None:
    res = CliRunner().invoke(app, ["checkpoint", "--help"], env={"COLUMNS": "200"})
    for opt in ("--group-size", "--lost", "--sizes", "--stores", "--reps", "--warmup", "--cold"):
        assert opt in res.stdout, opt


def test_fragments_balancer_options_are_named_as_the_balancer_config() -> None:
    res = CliRunner().invoke(app, ["fragments", "--help"], env={"COLUMNS": "200"})
    assert "--jobs-left-threshold" in res.stdout and "--jobs-difference-ratio" in res.stdout
    assert "--overhead-workers" in res.stdout


def test_the_diagnosis_accuracy_benchmark_finds_the_corpus_of_the_source_tree(monkeypatch) -> None:
    """``python -m benchmarks diagnose-accuracy`` without ``--corpus`` reads tests/diagnosis_corpus."""
    from benchmarks import diagnose_accuracy as da
    monkeypatch.delenv("PLANARIA_CORPUS", raising=False)
    corpus = da.default_corpus()
    assert (corpus / "cases.toml").is_file(), corpus
    assert len(da.load_cases(corpus)) >= 25
