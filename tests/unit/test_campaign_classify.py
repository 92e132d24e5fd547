"""Campaign classification: each target's output reduced to an observation, and the class it gets."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from planaria.campaign import plans, targets
from planaria.campaign.classify import (
    CORRECT, DOCUMENTED, HUNG, LIBRARY, SPARES_EXHAUSTED, UNEXPLAINED, UNRECOVERABLE, WRONG, Observation, classify, combine,
)


@pytest.mark.parametrize("obs,cls", [
    (Observation(None), HUNG),
    (Observation(124), HUNG),
    (Observation(0, "match", timed_out=True), HUNG),
    (Observation(0, "match"), CORRECT),
    (Observation(0, "differs"), WRONG),
    (Observation(1, "differs"), WRONG),
    (Observation(3, "differs", stop=UNRECOVERABLE, failures=3), WRONG),
    (Observation(0, "missing"), WRONG),
    (Observation(3, stop=SPARES_EXHAUSTED, failures=3, spares=2), DOCUMENTED),
    (Observation(3, stop=SPARES_EXHAUSTED, failures=2, spares=2), UNEXPLAINED),
    (Observation(3, stop=SPARES_EXHAUSTED, failures=5, spares=2, exhaust_stops=False), UNEXPLAINED),
    (Observation(3, stop=UNRECOVERABLE, failures=2, spares=2), DOCUMENTED),
    (Observation(3, stop=UNRECOVERABLE, failures=1, spares=2), UNEXPLAINED),
    (Observation(3, stop=UNRECOVERABLE, failures=0, spares=2, damaged=True), DOCUMENTED),
    (Observation(3, stop="cannot correct: undecidable"), DOCUMENTED),
    (Observation(3), UNEXPLAINED),
    (Observation(1), UNEXPLAINED),
    (Observation(1, "match"), UNEXPLAINED),
    (Observation(-11), UNEXPLAINED),
])
def test_classes(obs: Observation, cls: str) -> None:
    got, why = classify(obs)
    assert got == cls, why
    assert why and "\n" not in why


def test_notes_are_part_of_the_reason() -> None:
    _, why = classify(Observation(1, notes=["a process crashed inside the MPI library (see docs/recovery.md)"]))
    assert why.startswith("exit 1") and "MPI library" in why


def test_combine_takes_the_worst_and_names_the_command() -> None:
    assert combine([(CORRECT, "fine")]) == (CORRECT, "fine")
    cls, why = combine([(CORRECT, "a"), (HUNG, "b"), (DOCUMENTED, "c")])
    assert cls == HUNG and why.startswith("command 2 of 3")
    assert combine([(HUNG, "x"), (WRONG, "y")])[0] == WRONG
    assert combine([(DOCUMENTED, "x"), (UNEXPLAINED, "y")])[0] == UNEXPLAINED
    assert combine([])[0] == UNEXPLAINED


def _demo_plan(faults: list[str], when: str = "stop") -> plans.RunPlan:
    return plans.RunPlan(0, "demo", "ulfm", faults, {"checkpoint": "memory", "when_exhausted": when})


def test_demo_reports() -> None:
    plan = _demo_plan(["kill:rank=1,iter=5", "kill:rank=2,iter=9", "kill:rank=3,iter=20"])
    ok = json.dumps({"outcome": "finished", "bit_identical": True})
    assert classify(targets.demo_observation(0, ok, "", plan))[0] == CORRECT
    diff = json.dumps({"outcome": "finished", "bit_identical": False})
    assert classify(targets.demo_observation(1, diff, "", plan))[0] == WRONG
    out = json.dumps({"outcome": "spares exhausted", "message": "3 working rank(s) lost"})
    assert classify(targets.demo_observation(3, out, "", plan))[0] == DOCUMENTED
    assert classify(targets.demo_observation(3, out, "", _demo_plan(["kill:rank=1,iter=5"])))[0] == UNEXPLAINED
    assert classify(targets.demo_observation(3, out, "", _demo_plan(plan.faults, "continue")))[0] == UNEXPLAINED
    assert classify(targets.demo_observation(1, "", "planaria demo: the job ended without a result", plan))[0] \
        == UNEXPLAINED
    assert classify(targets.demo_observation(124, ok, "", plan))[0] == HUNG
    cls, why = classify(targets.demo_observation(1, "", "[3!] Segmentation fault in libmpi.so", plan))
    assert cls == UNEXPLAINED and "MPI library" in why


def test_app_output() -> None:
    plan = plans.RunPlan(0, "app", "sim", ["kill:rank=2+3,iter=10", "kill:rank=4,iter=3"], {"store": "memory"})
    good = '[0] RESULT {"cells": 6000, "steps": 200, "sha256": "abc"}\n'
    assert classify(targets.app_observation(0, good, "", plan, "abc"))[0] == CORRECT
    assert classify(targets.app_observation(0, good.replace("[0]", "[6]"), "", plan, "abc"))[0] == CORRECT
    assert classify(targets.app_observation(0, good, "", plan, "abd"))[0] == WRONG
    assert classify(targets.app_observation(0, good + good.replace("abc", "xyz"), "", plan, "abc"))[0] == WRONG
    assert classify(targets.app_observation(0, "[0] no result here\n", "", plan, "abc"))[0] == WRONG
    stop = "[1!] planaria: rank 1: SparesExhausted: 3 working rank(s) lost\n"
    assert classify(targets.app_observation(3, "", stop, plan, "abc"))[0] == DOCUMENTED
    assert classify(targets.app_observation(1, "", stop, plan, "abc"))[0] == UNEXPLAINED
    unrec = "[2!] Unrecoverable: no checkpoint version can be restored\n"
    assert classify(targets.app_observation(3, "", unrec, plan, "abc"))[0] == DOCUMENTED
    one = plans.RunPlan(0, "app", "sim", ["kill:rank=4,iter=3"], {"store": "file"})
    assert classify(targets.app_observation(3, "", unrec, one, "abc"))[0] == UNEXPLAINED
    assert classify(targets.app_observation(3, "", unrec, one, "abc", damaged=True, inject=False))[0] == DOCUMENTED
    assert classify(targets.app_observation(None, "", "", plan, "abc"))[0] == HUNG


def test_abft_reports(tmp_path: Path) -> None:
    ref = b"reference bytes"
    out = tmp_path / "out.npy"
    out.write_bytes(ref)
    ok = json.dumps({"ok": True, "errors": [], "job_exit": 0})
    assert classify(targets.abft_observation(0, ok, "", out, ref))[0] == CORRECT
    out.write_bytes(b"reference bytez")
    assert classify(targets.abft_observation(0, ok, "", out, ref))[0] == WRONG      # ok: true, output differs
    out.unlink()
    assert classify(targets.abft_observation(0, ok, "", out, ref))[0] == WRONG
    fatal = json.dumps({"ok": False, "fatal": "no live worker left", "job_exit": 0})
    assert classify(targets.abft_observation(3, fatal, "", out, ref))[0] == DOCUMENTED
    none = json.dumps({"ok": False, "error": "the job ended without a report", "job_exit": 1})
    assert classify(targets.abft_observation(3, none, "", out, ref))[0] == UNEXPLAINED
    late = json.dumps({"ok": True, "errors": [], "job_exit": 124})
    out.write_bytes(ref)
    assert classify(targets.abft_observation(0, late, "", out, ref))[0] == HUNG


def test_app_reference_follows_the_recurrence() -> None:
    """Two steps by hand on 2 ranks of 2 cells, against the vectorised reference."""
    import hashlib

    import numpy as np
    m = 2 ** 64
    a = 6364136223846793005
    x = [0, 1, 2, 3]
    for i in range(2):
        t = x[0] % 1000003 + x[2] % 1000003
        x = [(v * a + (g + 1) * (i + 1) + t) % m for g, v in enumerate(x)]
    want = hashlib.sha256(np.array(x, dtype="<u8").tobytes()).hexdigest()
    assert targets.app_reference(2, 2, 2) == want


def test_damage_flips_one_bit_in_the_chosen_version(tmp_path: Path) -> None:
    for v in (20, 40):
        d = tmp_path / f"v{v:08d}"
        d.mkdir()
        (d / "manifest.json").write_text("{}")
        (d / "rank00001.bin").write_bytes(bytes(100))
    flips = targets.damage(tmp_path, [{"which": "newest", "file": "rank00001.bin", "pos": 0.5, "bit": 3},
                                      {"which": "older", "file": "manifest.json", "pos": 0.0, "bit": 0}])
    assert [f["offset"] for f in flips] == [50, 0]
    newest = (tmp_path / "v00000040" / "rank00001.bin").read_bytes()
    assert newest[50] == 8 and sum(newest) == 8
    assert (tmp_path / "v00000020" / "manifest.json").read_text() == "z}"
    assert (tmp_path / "v00000020" / "rank00001.bin").read_bytes() == bytes(100)
    assert "rank00001.bin" in targets.flip_line(flips[0])


# Open MPI 5.0.11's backtrace of a survivor that learned of a failure while creating a communicator
_FRAMES = """[{r}!] [vm:{pid}] Signal: Segmentation fault (11)
[{r}!] [vm:{pid}] [ 1] /v/lib/libmpi.so.40(ompi_comm_revoke_local+0x3f)[0x7f36c5a745df]
[{r}!] [vm:{pid}] [ 2] /v/lib/libmpi.so.40(ompi_comm_set_rank_failed+0x4c)[0x7f36c5a720ec]
[{r}!] [vm:{pid}] [13] /v/lib/libmpi.so.40(ompi_comm_split_with_info+0xacb)[0x7f36c5a687db]
"""


def test_a_known_library_crash_is_told_apart_only_when_it_explains_the_stop() -> None:
    plan = plans.RunPlan(0, "app", "ulfm", ["kill:rank=3,time=0.008", "kill:rank=0,time=0.536"], {"store": "memory"})
    stop = "[6!] planaria: rank 6: SparesExhausted: 6 working rank(s) lost\n"
    crashes = "".join(_FRAMES.format(r=r, pid=100 + r) for r in (0, 1, 2))
    assert targets.library_crashes(crashes + crashes) == 3          # distinct processes
    cls, why = classify(targets.app_observation(3, "", crashes + stop, plan, "abc"))
    assert cls == LIBRARY and "3 process(es) crashed inside the MPI library" in why
    # without the backtraces, 2 planned kills do not exhaust 2 spares
    assert classify(targets.app_observation(3, "", stop, plan, "abc"))[0] == UNEXPLAINED
    one_kill = plans.RunPlan(0, "app", "ulfm", ["kill:rank=3,time=0.008"], {"store": "memory"})
    one_crash = _FRAMES.format(r=1, pid=101)
    assert classify(targets.app_observation(3, "", one_crash + stop, one_kill, "abc"))[0] == UNEXPLAINED
    # a segfault elsewhere in the library is not the known crash
    other = one_crash.replace("ompi_comm_revoke_local", "mca_pml_ob1_send")
    assert targets.library_crashes(other) == 0
    # a crash never excuses a wrong result or a non-documented exit
    assert classify(targets.app_observation(1, "", crashes, plan, "abc"))[0] == UNEXPLAINED
    assert combine([(LIBRARY, "x"), (UNEXPLAINED, "y")])[0] == UNEXPLAINED


def test_the_launchers_line_on_the_library_crash_counts_its_ranks() -> None:
    """Under ``planaria run`` ranks crash with faulthandler's trace, and Open MPI prints no backtrace:
    the launcher's line (``postmortem.library_crash_text``) names them, as the demo's output shows."""
    from planaria.diagnose.postmortem import library_crash_text
    plan = plans.RunPlan(0, "demo", "ulfm", ["kill:mtbf=0.314,seed=736,count=1,ranks=0-7"],
                         {"checkpoint": "file", "when_exhausted": "stop"})
    line = "planaria demo: " + library_crash_text([0, 1, 3, 4, 5], [2], "SIGSEGV", ["split"]) + "\n"
    assert targets.library_crashes(line) == 5
    assert targets.library_crashes(line + line) == 5              # the same ranks, said twice
    out = json.dumps({"outcome": SPARES_EXHAUSTED})
    cls, why = classify(targets.demo_observation(3, out, line, plan))
    assert cls == LIBRARY and "5 process(es) crashed inside the MPI library" in why
    assert classify(targets.demo_observation(3, out, "", plan))[0] == UNEXPLAINED


def test_the_report_lists_library_crashes_apart_from_bad_runs() -> None:
    import io

    from rich.console import Console

    from planaria.campaign.report import print_report
    from planaria.campaign.targets import RunRecord

    plan = plans.RunPlan(5, "app", "ulfm", ["kill:rank=3,time=0.008"], {"store": "memory"})
    rec = RunRecord(plan)
    rec.cls, rec.reason, rec.replay = LIBRARY, "exit 3: spares exhausted after 3 process(es) crashed", ["planaria run x"]
    buf = io.StringIO()
    print_report([rec], {"seed": 7, "timeout": 90.0}, console=Console(file=buf, width=200))
    text = buf.getvalue()
    assert "1 run(s) where the MPI library crashed" in text and "run 5 app on ulfm: library crash" in text
    assert "no run was wrong, hung or unexplained" in text
