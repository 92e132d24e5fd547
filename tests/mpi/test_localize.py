"""Fault localization on real jobs: each scenario's diagnosis names the faulty ranks and the call site.

Each case is a 4-rank job under ``planaria run`` with run-time detection on; the job hangs (or
runs slowly, or fails) and ``planaria diagnose`` is asked, as a user would. Bounded: the job
has its own --timeout and the driver kills it after the diagnosis.
"""
from __future__ import annotations

import pytest

from planaria.bench import localize

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case", list(localize.CASES))
def test_diagnosis_names_the_fault(case, tmp_path):
    res = localize.run_case(case, home=tmp_path, timeout=60)
    assert res["ok"], f"{case}: {res['problems']}\n{res['text']}"
    assert res["diagnose_s"] < 30


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case", ["unmatched", "spin"])
def test_diagnosis_on_simulated_failures_backend(case, tmp_path):
    res = localize.run_case(case, home=tmp_path, backend="sim", timeout=60)
    assert res["ok"], f"{case}: {res['problems']}\n{res['text']}"


def test_check_rejects_a_report_that_misses_the_fault():
    case = localize.CASES["spin"]
    line = localize.site_line("spin")
    good = {"text": f"rank 2 computing at faulty.py:{line} in main", "root_causes": [{"ranks": [2]}]}
    assert localize.check(case, good) == []
    assert localize.check(case, {"text": good["text"], "root_causes": [{"ranks": [1]}]})
    assert localize.check(case, {"text": "rank 2 computing", "root_causes": [{"ranks": "2"}]})
