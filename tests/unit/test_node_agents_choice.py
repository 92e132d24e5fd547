"""When ``planaria run`` puts node agents between the ranks and the controller (pure choice)."""
from __future__ import annotations

import pytest

from planaria.launch.layout import initial_layout
from planaria.launch.options import RunOptions


@pytest.mark.parametrize("hosts, asked, env, want", [
    (None, None, {}, False),                                   # this machine alone: direct
    (None, True, {}, True),                                    # asked for
    ("farhost1:2,farhost2:2", None, {}, True),                 # other hosts: on
    ("farhost1:2,farhost2:2", False, {}, False),               # turned off
    ("localhost:4", None, {}, False),
    (None, None, {"SLURM_JOB_NODELIST": "cn[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}, True),   # an allocation
])
def test_node_agents_go_with_other_hosts(monkeypatch: pytest.MonkeyPatch, hosts: str | None, asked: bool | None,
                                         env: dict[str, str], want: bool) -> None:
    for k in ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_TASKS_PER_NODE", "PBS_NODEFILE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    opts = RunOptions(command=["python", "x.py"], nprocs=4, hosts=hosts, node_agents=asked)
    assert initial_layout(opts, 4, None).node_agents(opts) is want
