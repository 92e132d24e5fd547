"""Campaign plan drawing: determinism from the seed, valid specs, and coverage of every fault the campaign promises."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from planaria.abft.names import KINDS
from planaria.campaign import plans
from planaria.checkpoint._fileio import RETRY_DELAYS
from planaria.inject.plan import Plan

ALL = list(plans.TARGETS)
BOTH = list(plans.BACKENDS)


def _dump(ps: list[plans.RunPlan]) -> str:
    return json.dumps([p.to_json() for p in ps], sort_keys=True)


def test_same_seed_same_plans_other_seed_other_plans() -> None:
    a = plans.schedule(11, 60, ALL, BOTH)
    assert _dump(a) == _dump(plans.schedule(11, 60, ALL, BOTH))
    assert _dump(a) != _dump(plans.schedule(12, 60, ALL, BOTH))


def test_a_run_does_not_depend_on_the_campaign_length() -> None:
    assert _dump(plans.schedule(5, 9, ALL, BOTH)) == _dump(plans.schedule(5, 40, ALL, BOTH)[:9])
    # parts of one long campaign are that campaign's runs
    assert _dump(plans.schedule(5, 9, ALL, BOTH) + plans.schedule(5, 31, ALL, BOTH, first=9)) == \
        _dump(plans.schedule(5, 40, ALL, BOTH))


def test_plans_are_the_same_in_another_process_with_another_hash_seed() -> None:
    code = ("import json; from planaria.campaign import plans; "
            "print(json.dumps([p.to_json() for p in plans.schedule(3, 30, ['demo','app','abft'], ['ulfm','sim'])],"
            " sort_keys=True))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert out.stdout.strip() == _dump(plans.schedule(3, 30, ALL, BOTH))


def test_targets_and_backends_take_turns() -> None:
    ps = plans.schedule(1, 12, ALL, BOTH)
    pairs = [(p.target, p.backend) for p in ps]
    assert pairs[:6] == [("demo", "ulfm"), ("app", "ulfm"), ("abft", "ulfm"),
                         ("demo", "sim"), ("app", "sim"), ("abft", "sim")]
    assert pairs[6:] == pairs[:6]
    assert [p.index for p in ps] == list(range(12))


def test_every_spec_parses_and_fits_the_job() -> None:
    for p in plans.schedule(2, 600, ALL, BOTH):
        size = plans.WORLD if p.target != "abft" else plans.ABFT_WORKERS + 2
        Plan.parse(p.faults).validate(size)            # raises on a bad spec or rank
        if p.target == "abft":
            args = p.settings["abft_args"]
            for kind, _, worker in (a.partition(":") for a, flag in zip(args[1:], args, strict=False) if flag == "--force"):
                assert kind in KINDS and 0 <= int(worker) < plans.ABFT_WORKERS
        else:
            assert 1 <= len(p.faults) <= 3


def _specs(target: str, n: int = 900) -> list[str]:
    return [f for p in plans.schedule(4, n, ALL, BOTH) if p.target == target for f in p.faults]


@pytest.mark.parametrize("target", ["demo", "app"])
def test_demo_and_app_get_every_kind_of_kill(target: str) -> None:
    specs = _specs(target)
    for phase in ("checkpoint", "recover", "finish"):
        assert any(f"phase={phase}" in s for s in specs), phase
    assert any(re.fullmatch(rf"kill:rank={s},\S+", f) for f in specs for s in (6, 7))       # spares
    pairs = [re.fullmatch(r"kill:rank=(\d)\+(\d),iter=\d+", f) for f in specs]
    assert any(m and int(m.group(2)) == int(m.group(1)) + 1 for m in pairs)                # adjacent, same iteration
    times = [float(m.group(1)) for f in specs if (m := re.search(r",time=([0-9.]+)$", f))]
    seconds = plans.DEMO_SECONDS if target == "demo" else plans.APP_SECONDS
    assert any(t < 0.05 for t in times) and any(t >= 0.7 * seconds for t in times)
    assert any(f.startswith("kill:mtbf=") for f in specs)


def test_bit_flips_only_in_the_app_and_io_errors_only_with_file_checkpoints() -> None:
    ps = plans.schedule(6, 900, ALL, BOTH)
    for p in ps:
        if any(f.startswith("bitflip:") for f in p.faults):
            assert p.target == "app"
            assert all(",array=x," in f for f in p.faults if f.startswith("bitflip:"))
        if any(f.startswith("ioerror:") for f in p.faults):
            assert p.settings.get("store") == "file" or p.settings.get("checkpoint") in ("file", "multi")
        if p.damage:
            assert p.target == "app" and p.settings["store"] == "file"
    assert any(f.startswith("bitflip:") for p in ps for f in p.faults)
    assert any("path=*manifest.json*" in f for p in ps for f in p.faults)
    assert any("path=*rank*.bin*" in f for p in ps for f in p.faults)
    # one failed open (a read tries it again) and more than the file store's tries (it gives up)
    counts = {int(f.rsplit("count=", 1)[1]) for p in ps for f in p.faults if f.startswith("ioerror:")}
    assert counts == set(plans.IO_ERROR_COUNTS) and max(counts) > len(RETRY_DELAYS) + 1
    assert any(len(p.damage) == 2 for p in ps) and any(d["file"] == "manifest.json" for p in ps for d in p.damage)


def test_abft_plans_cover_random_forced_adjacent_and_master_faults() -> None:
    ps = [p for p in plans.schedule(8, 600, ALL, BOTH) if p.target == "abft"]
    args = [" ".join(p.settings["abft_args"]) for p in ps]
    assert any("--error-rate" in a for a in args)
    assert any(re.search(rf"--force silent:{w} --force silent:{w + 1}", a) for a in args for w in range(3))
    assert any(f.startswith("kill:rank=0,") for p in ps for f in p.faults)
    assert any(f.startswith("kill:rank=1,") for p in ps for f in p.faults)
    assert {p.settings["kernel"] for p in ps} == {"slope", "cutdepth"}


def test_possible_failures_counts_distinct_processes() -> None:
    p = plans.RunPlan(0, "app", "ulfm", ["kill:rank=2+3,iter=5", "bitflip:rank=3,array=x,iter=1",
                                         "ioerror:rank=7,iter=2,path=*rank*.bin*,count=1"])
    assert plans.possible_failures(p) == 3
    p.faults = ["kill:mtbf=0.5,seed=4,count=2,ranks=0-7", "kill:rank=1,phase=finish"]
    victims = {v for _, v in Plan.parse("kill:mtbf=0.5,seed=4,count=2,ranks=0-7").faults[0].schedule(8)}
    assert plans.possible_failures(p) == len(victims | {1})


def test_parse_list_accepts_known_names_and_refuses_others() -> None:
    assert plans.parse_list("app, demo,app", plans.TARGETS, "targets") == ["app", "demo"]
    for bad in ("", "demo,", "demo,foo", "ULFM"):
        with pytest.raises(ValueError):
            plans.parse_list(bad, plans.BACKENDS if bad == "ULFM" else plans.TARGETS,
                             "backends" if bad == "ULFM" else "targets")
