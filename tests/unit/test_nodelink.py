"""A rank's way to its node agent (planaria.runtime.nodelink) when the node agent cannot start:
the start is tried once per host, and the rank connects to the controller itself (None here)."""
from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from planaria.runtime import nodelink


def test_a_node_agent_that_cannot_start_is_tried_once_per_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s")
    monkeypatch.setenv(nodelink.ENV, "1")
    monkeypatch.setenv("PLANARIA_JOB_DIR", str(tmp_path))
    monkeypatch.setenv("PLANARIA_SECRET_FILE", str(secret))
    t0 = time.monotonic()
    assert nodelink.connect_node("garbage") is None          # the node agent ends at once: a bad address
    assert time.monotonic() - t0 < nodelink.START_TIMEOUT    # not waited for in vain
    host = socket.gethostname()
    assert (tmp_path / "nodes" / f"{host}.failed").exists()
    assert "controller address 'garbage'" in (tmp_path / "nodes" / f"{host}.log").read_text()
    t1 = time.monotonic()
    assert nodelink.connect_node("garbage") is None          # the next rank: straight to the controller
    assert time.monotonic() - t1 < 0.5
    monkeypatch.setenv(nodelink.ENV, "0")
    assert nodelink.connect_node("garbage") is None          # not asked for
