"""The multi-process tests' hook (tests/mpi/conftest.py): a test that failed after Open MPI's known
crash ended one of its jobs is xfailed with the crash named; other failures stay failures."""
from __future__ import annotations

import json

import pytest

# imported here, before the in-process runs below: each run drops the modules it imported, and
# numpy (under the hook's imports) cannot be imported twice in one process
import planaria.diagnose.postmortem  # noqa: F401
import tests.mpi.conftest  # noqa: F401

pytest_plugins = ["pytester"]

CRASH = {"rank": 3, "in_call": "split", "how": "killed by signal 11 (SIGSEGV)"}
KILLED = {"rank": 3, "in_call": "split", "how": "killed by signal 9 (SIGKILL)"}


def _outcome(pytester: pytest.Pytester, row: dict, body: str, marker: str = "") -> dict[str, int]:
    """Run one test that leaves a job summary with ``row`` under its tmp_path, then runs ``body``."""
    pytester.makeconftest("from tests.mpi.conftest import pytest_runtest_makereport  # noqa: F401\n")
    pytester.makepyfile(test_job=f"""
import json
import pytest
{marker}
def test_job(tmp_path):
    d = tmp_path / "home" / "jobs" / "job-1"
    d.mkdir(parents=True)
    d.joinpath("summary.json").write_text(json.dumps({{"ranks": [{json.dumps(row)}]}}))
    {body}
""")
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-rx").parseoutcomes()


def test_a_failure_after_the_known_crash_is_xfailed_with_the_crash_named(pytester: pytest.Pytester) -> None:
    res = _outcome(pytester, CRASH, "assert False, 'no results'")
    assert res == {"xfailed": 1}


def test_a_failure_without_the_crash_stays_a_failure(pytester: pytest.Pytester) -> None:
    assert _outcome(pytester, KILLED, "assert False") == {"failed": 1}


def test_a_test_that_passed_in_spite_of_the_crash_stays_passed(pytester: pytest.Pytester) -> None:
    assert _outcome(pytester, CRASH, "pass") == {"passed": 1}


def test_a_test_that_causes_the_crash_on_purpose_keeps_its_failure(pytester: pytest.Pytester) -> None:
    marker = "pytestmark = pytest.mark.library_crash_expected"
    pytester.makeini("[pytest]\nmarkers =\n    library_crash_expected: x\n")
    assert _outcome(pytester, CRASH, "assert False", marker) == {"failed": 1}
