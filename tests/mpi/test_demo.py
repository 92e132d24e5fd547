"""`planaria demo` end to end: two failures replaced by spares, result equal to the serial run bit for bit."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpi.mpijob import root_env
from tests.mpi.mpijob import run_demo as demo

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(180)]


@pytest.mark.parametrize("backend,checkpoint", [("ulfm", "memory"), ("ulfm", "xor"), ("ulfm", "file"),
                                                ("ulfm", "multi"), ("sim", "memory"), ("sim", "xor")])
def test_demo_survives_two_failures(tmp_path, backend: str, checkpoint: str) -> None:
    res, report = demo(tmp_path, "--backend", backend, "--checkpoint", checkpoint,
                       "--inject", "kill:rank=1,iter=45", "--inject", "kill:rank=4,iter=110")
    assert res.returncode == 0, res.stderr[-3000:]
    assert report["bit_identical"] is True
    assert report["ranks"] == 6 and report["spares"] == 2
    assert [ev["version"] for ev in report["failures"]] == [40, 100]
    assert [ev["lost"] for ev in report["failures"]] == [[1], [4]]
    assert sorted(v for v in report["roles"].values()) == ["recovered"] * 2 + ["survivor"] * 4
    # the temperature profile the job keeps in its directory, in the JSON too
    prof = report["profile"]
    assert len(prof["x"]) == len(prof["initial"]) == len(prof["final"]) == 2000
    assert prof["x"][0] == 0.0 and prof["x"][-1] == 1.0 and prof["final"] != prof["initial"]
    assert json.loads(Path(report["report_file"]).read_text())["profile"] == prof
    assert Path(report["report_file"]).parent == Path(report["jobdir"])


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_a_checkpoint_one_rank_cannot_write_is_left_out_and_the_run_goes_on(tmp_path, backend: str) -> None:
    """An I/O error on one rank's checkpoint file: every rank gives that save up (``SaveFailed``), the
    run goes on, a later failure resumes from the version saved before, and the result is exact."""
    res, report = demo(tmp_path, "--backend", backend, "--checkpoint", "file",
                       "--inject", "ioerror:rank=4,iter=25,path=*rank*.bin*,count=1",
                       "--inject", "kill:rank=1,iter=55")
    assert res.returncode == 0, res.stderr[-3000:]
    assert report["bit_identical"] is True
    assert ("file checkpoint version 40 was not saved: another rank could not write its file; going on, "
            "a recovery would resume from version 20") in res.stderr, res.stderr[-3000:]
    assert [ev["version"] for ev in report["failures"]] == [20]


def test_read_errors_while_a_recovery_checks_the_files_cost_no_version(tmp_path) -> None:
    """Two I/O errors on one rank's checkpoint files after version 40 was saved, then a kill: the
    recovery's reads are tried again, it resumes from version 40, and the result is exact."""
    res, report = demo(tmp_path, "--checkpoint", "file",
                       "--inject", "ioerror:rank=4,iter=45,path=*rank*.bin*,count=2",
                       "--inject", "kill:rank=1,iter=55")
    assert res.returncode == 0, res.stderr[-3000:]
    assert report["bit_identical"] is True
    assert [ev["version"] for ev in report["failures"]] == [40]


def test_demo_spares_exhausted_is_reported(tmp_path) -> None:
    res, report = demo(tmp_path, "--spares", "0", "--inject", "kill:rank=1,iter=45")
    assert res.returncode == 3, res.stderr[-3000:]
    assert report["outcome"] == "spares exhausted"


def test_demo_plot(tmp_path) -> None:
    png = tmp_path / "heat"            # a PNG under the name given, whatever it ends with
    png.write_bytes(b"an older plot")
    res, report = demo(tmp_path, "--backend", "sim", "--plot", str(png), "--inject", "kill:rank=2,iter=70")
    assert res.returncode == 0, res.stderr[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20000
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("heat", ".heat"))) == ["heat"]


def test_serial_reference_detects_a_changed_cell() -> None:
    """The bit-for-bit check is sensitive: one ulp in one cell is a difference."""
    import numpy as np

    from planaria.demo.heat import serial_reference
    ref = serial_reference(1000, 50, 0.25, 1)
    other = ref.copy()
    other[500] = np.nextafter(other[500], np.inf)
    assert ref.tobytes() != other.tobytes()
    assert serial_reference(1000, 50, 0.25, 1).tobytes() == ref.tobytes()


@pytest.mark.parametrize("args,message", [(["-n", "0"], "-n must be at least 1"),
                                          (["--steps", "-5"], "--steps must be at least 1"),
                                          (["--checkpoint", "bogus"], "unknown --checkpoint 'bogus'"),
                                          (["--backend", "xyz"], "unknown backend 'xyz'"),
                                          (["--inject", "bogus"], "bad inject spec 'bogus'"),
                                          (["--plot", "/nonexistent-dir/heat.png"],
                                           "--plot /nonexistent-dir/heat.png: directory /nonexistent-dir does not"),
                                          (["--plot", "{tmp}"], "--plot {tmp}: is a directory"),
                                          (["--timeout", "nan"],
                                           "--timeout must be a positive, finite number of seconds (got nan)"),
                                          (["--timeout", "inf"],
                                           "--timeout must be a positive, finite number of seconds (got inf)"),
                                          (["--steps", "x"], "invalid value for '--steps'"),
                                          (["--bogus"], "no such option: --bogus")])
def test_demo_bad_options_exit_2_with_one_line(tmp_path, args: list[str], message: str) -> None:
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    args = [a.format(tmp=tmp_path) for a in args]
    message = message.format(tmp=tmp_path)
    res = subprocess.run([sys.executable, "-m", "planaria.cli.main", "demo", *args],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"planaria demo: {message}"), res.stderr
    assert not (tmp_path / "jobs").exists() or not list((tmp_path / "jobs").glob("*/demo.json"))
