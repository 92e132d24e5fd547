"""Job directory and atomic writes."""
from __future__ import annotations

import json
import os
import re
import stat

from planaria.util.fsutil import atomic_write
from planaria.launch.jobdir import JobDir, jobs_root, new_job_id


def test_job_id_format():
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", new_job_id())


def test_root_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("PLANARIA_HOME", raising=False)
    assert jobs_root(tmp_path) == tmp_path / ".planaria" / "jobs"
    monkeypatch.setenv("PLANARIA_HOME", str(tmp_path / "h"))
    assert jobs_root() == tmp_path / "h" / "jobs"
    jd = JobDir.create()
    assert jd.path.parent == tmp_path / "h" / "jobs"


def test_create_layout_and_secret_mode(tmp_path):
    jd = JobDir.create(tmp_path)
    assert jd.path.is_dir() and jd.path.parent == tmp_path
    mode = stat.S_IMODE(os.stat(jd.secret_path).st_mode)
    assert mode == 0o600
    assert len(jd.secret()) == 64
    assert jd.events_path.exists() and jd.output_path.exists()
    other = JobDir.create(tmp_path)
    assert other.id != jd.id and other.secret() != jd.secret()


def test_json_files_and_events(tmp_path):
    jd = JobDir.create(tmp_path)
    jd.write_manifest({"status": "starting", "n": 2})
    jd.update_manifest(status="finished")
    assert jd.manifest() == {"status": "finished", "n": 2}
    jd.write_summary({"ranks": [], "raw": b"bytes"})
    assert json.loads((jd.path / "summary.json").read_text())["raw"] == "bytes"
    jd.append_event({"type": "hello", "rank": 0})
    jd.append_event({"type": "bye", "rank": 0, "code": 0})
    assert [e["type"] for e in jd.events()] == ["hello", "bye"]
    jd.write_control_uri("ipc:///x")
    assert jd.control_uri() == "ipc:///x"
    assert not [p for p in jd.path.iterdir() if p.name.endswith(".tmp")]


def test_atomic_write_replaces(tmp_path):
    p = tmp_path / "f.json"
    atomic_write(p, "one")
    atomic_write(p, b"two")
    assert p.read_text() == "two"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["f.json"]
