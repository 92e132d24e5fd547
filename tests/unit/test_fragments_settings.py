"""The fragments runtime's environment settings: defaults when unset, and a bad value named in one line."""
from __future__ import annotations

import pytest

import planaria.fragments as fr
from planaria.fragments import settings
from planaria.fragments.balancer import BalancerConfig


@fr.atomic
def _put(x: fr.Name, v: int):
    x.set(v)


@fr.sub
def _main():
    _put(fr.df("x"), 1)


def test_number_reads_parses_and_bounds(monkeypatch):
    monkeypatch.delenv("PLANARIA_FRAGMENT_THREADS", raising=False)
    assert settings.number("PLANARIA_FRAGMENT_THREADS", int, 2, minimum=1) == 2
    monkeypatch.setenv("PLANARIA_FRAGMENT_THREADS", " ")
    assert settings.number("PLANARIA_FRAGMENT_THREADS", int, 2, minimum=1) == 2
    monkeypatch.setenv("PLANARIA_FRAGMENT_THREADS", " 3 ")
    assert settings.number("PLANARIA_FRAGMENT_THREADS", int, 2, minimum=1) == 3
    monkeypatch.setenv("PLANARIA_FRAGMENT_THREADS", "two")
    with pytest.raises(settings.SettingError, match=r"^PLANARIA_FRAGMENT_THREADS must be an integer, not 'two'$"):
        settings.number("PLANARIA_FRAGMENT_THREADS", int, 2, minimum=1)
    monkeypatch.setenv("PLANARIA_FRAGMENT_THREADS", "0")
    with pytest.raises(settings.SettingError, match=r">= 1, not '0'"):
        settings.number("PLANARIA_FRAGMENT_THREADS", int, 2, minimum=1)


def test_choice_accepts_any_case_and_names_the_allowed_values(monkeypatch):
    monkeypatch.setenv("PLANARIA_TERMINATION", "Paper")
    assert settings.choice("PLANARIA_TERMINATION", ("safra", "paper"), "safra") == "paper"
    monkeypatch.setenv("PLANARIA_TERMINATION", "ring")
    with pytest.raises(ValueError, match=r"^PLANARIA_TERMINATION must be one of safra, paper, not 'ring'$"):
        settings.choice("PLANARIA_TERMINATION", ("safra", "paper"), "safra")


@pytest.mark.parametrize("name, value", [
    ("PLANARIA_FRAGMENT_THREADS", "many"),
    ("PLANARIA_FRAGMENT_TIMEOUT", "10s"),
    ("PLANARIA_TRACE_FLUSH_BYTES", "1e3x"),
    ("PLANARIA_TERMINATION", "fast"),
])
def test_run_names_the_variable_it_cannot_use(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(fr.SettingError, match=f"^{name} must be"):
        fr.run(_main, comm=None, trace=False)


def test_run_uses_good_settings(monkeypatch):
    monkeypatch.setenv("PLANARIA_FRAGMENT_THREADS", "1")
    monkeypatch.setenv("PLANARIA_FRAGMENT_TIMEOUT", "30")
    monkeypatch.setenv("PLANARIA_TERMINATION", "paper")
    res = fr.run(_main, comm=None, trace=False)
    assert res.status == "finished" and res.cfs_done == 2


def test_balancer_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("PLANARIA_JOBS_LEFT_THRESHOLD", "4")
    monkeypatch.setenv("PLANARIA_JOBS_DIFFERENCE_RATIO", "0.3")
    monkeypatch.setenv("PLANARIA_BALANCER_CAP", "donor")
    assert BalancerConfig.from_env() == BalancerConfig(4, 0.3, "donor")
    monkeypatch.setenv("PLANARIA_JOBS_DIFFERENCE_RATIO", "half")
    with pytest.raises(ValueError, match="^PLANARIA_JOBS_DIFFERENCE_RATIO must be a number, not 'half'$"):
        BalancerConfig.from_env()
    monkeypatch.delenv("PLANARIA_JOBS_DIFFERENCE_RATIO")
    monkeypatch.setenv("PLANARIA_BALANCER_CAP", "max")
    with pytest.raises(ValueError, match="^PLANARIA_BALANCER_CAP must be one of mean, donor"):
        BalancerConfig.from_env()
