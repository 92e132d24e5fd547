"""The diagnosis corpus (tests/diagnosis_corpus) as regression tests: the first root cause is right.

Each case marked ``suite`` in cases.toml runs as a real ``planaria run --on-hang abort`` job in the
modes listed there, then ``planaria diagnose JOB --json``; its first root cause must have the
expected kind, ranks and file:line. Only cases that are right today and end in a few seconds are
in the suite (about 2-3 minutes on 2 cores); a case that is wrong today, deterministically, can run
as a strict xfail (``xfail`` in the table, with the ``finding``; none today); the rest are measured by
``python -m benchmarks diagnose-accuracy`` (docs/benchmarks.md, "Diagnosis accuracy (corpus)").
"""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import diagnose_accuracy as da

CORPUS = Path(__file__).resolve().parents[1] / "diagnosis_corpus"
CASES = da.load_cases(CORPUS)
TIMEOUT = 15.0     # the jobs' --timeout: a hang the run-time detection does not stop ends here, diagnosed
PLAIN_TIMEOUT = 8.0   # a plain program has no run-time detection: every hang ends at the timeout
SUITE = [(c, m) for c in CASES for m in c.suite]
#: cases that are wrong today, deterministically: strict xfail, so that a fix shows up as XPASS (a failure)
WRONG = [(c, m) for c in CASES for m in c.xfail]
PARAMS = ([pytest.param(c, m, id=f"{c.name}-{m}") for c, m in SUITE]
          + [pytest.param(c, m, id=f"{c.name}-{m}-wrong-today",
                          marks=pytest.mark.xfail(strict=True, raises=AssertionError,
                                                       reason=c.finding or "wrong today")) for c, m in WRONG])


def test_the_corpus_table_is_consistent():
    """Every case's program exists, its sites are lines marked ``# ROOT``, the names are unique,
    and the corpus covers enough faults (no MPI job)."""
    assert len(CASES) >= 25
    for c in CASES:
        lines = (CORPUS / c.file).read_text().splitlines()
        assert c.modes and set(c.suite) <= set(c.modes) and set(c.xfail) <= set(c.modes), c.name
        assert not c.xfail or c.finding, f"{c.name}: an xfail case says what the diagnosis gets wrong"
        for s in c.sites:
            f, line = s.split(":")
            assert f == c.file and "# ROOT" in lines[int(line) - 1], (c.name, s)
    assert SUITE, "no case is marked suite"


@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("case,mode", PARAMS)
def test_first_root_cause_is_right(case, mode, tmp_path):
    row = da.run_case(case, mode, CORPUS, timeout=PLAIN_TIMEOUT if mode == "plain" else TIMEOUT,
                      home=tmp_path, grace=25)                                            # bounded: 15 + 25 + 25 s
    said = row.get("said") or {}
    assert row["result"] == "right", (f"{case.name} ({mode}): {'; '.join(row['diffs'])}; "
                                      f"said: {said.get('reason')!r}; job {row.get('job')}")
