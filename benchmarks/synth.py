"""Synthetic state files of hung jobs ([Gao 2024] §3.3: one known-faulty node in a big job) for tests and benchmarks.

Every rank has a main thread and an agent thread (5-10 frame stacks), counters for four communicators
("world", its dup "world.d1", the per-local-index split "world.s2c<l>" and the per-node split
"world.s3c<host>"); the scenario decides what the ranks are blocked in. ``state["synth"]`` records the truth:
the root-cause ranks, the faulty host and the root cause's call site.
"""
from __future__ import annotations

import random
from typing import Any

from planaria.diagnose.state import FORMAT

AUTO = -1  # faulty_host default: pick one host from the seed
SCENARIOS = ("collective", "p2p-chain", "deadlock", "spin", "no-hang")

_BASE = [["app/main.py", 57, "<module>"], ["app/main.py", 41, "main"], ["app/driver.py", 117, "run"],
         ["app/solver.py", 203, "timestep"]]
_ALLREDUCE = _BASE + [["app/solver.py", 88, "residual_norm"], ["planaria/comm/base.py", 412, "Allreduce"],
                      ["planaria/comm/base.py", 160, "_call"]]
_BARRIER = _BASE[:3] + [["app/driver.py", 131, "checkpoint_due"], ["planaria/comm/base.py", 455, "Barrier"],
                        ["planaria/comm/base.py", 160, "_call"]]
_HALO = _BASE + [["app/solver.py", 150, "update_halo"], ["app/halo.py", 61, "exchange"],
                 ["planaria/comm/base.py", 300, "Recv"], ["planaria/comm/base.py", 160, "_call"]]
_ORDERED = _BASE + [["app/solver.py", 152, "update_halo"], ["app/halo.py", 75, "exchange_ordered"],
                    ["planaria/comm/base.py", 300, "Recv"], ["planaria/comm/base.py", 160, "_call"]]
_SPIN = _BASE + [["app/solver.py", 190, "update_state"], ["app/physics.py", 140, "iterate_eos"],
                 ["app/physics.py", 152, "newton_step"]]
_COMPUTE = _BASE + [["app/solver.py", 171, "flux"], ["app/kernels.py", 33, "stencil"]]
_AGENT = [["threading.py", 1002, "_bootstrap"], ["threading.py", 1045, "_bootstrap_inner"],
          ["threading.py", 982, "run"], ["planaria/runtime/agent.py", 88, "_loop"],
          ["zmq/sugar/poll.py", 106, "poll"]]
STACKS = [_ALLREDUCE, _BARRIER, _HALO, _ORDERED, _SPIN, _COMPUTE, _AGENT]
S_ALLREDUCE, S_BARRIER, S_HALO, S_ORDERED, S_SPIN, S_COMPUTE, S_AGENT = range(len(STACKS))


def site_of(stack: list[list[Any]]) -> str:
    """``"file:line in func"`` of the application frame that called planaria (or of the innermost frame)."""
    app = [f for f in stack if not str(f[0]).startswith(("planaria/", "threading", "zmq/"))]
    f = (app or stack)[-1]
    return f"{f[0]}:{f[1]} in {f[2]}"


def synthetic_state(hosts: int, per_host: int = 6, faulty_host: int | None = AUTO, scenario: str = "collective",
                    seed: int = 0) -> dict[str, Any]:
    """A state of ``hosts * per_host`` ranks hung as ``scenario`` says, around ``faulty_host`` (None: no fault).

    collective  faulty host's ranks have no state; everyone else waits in Allreduce #W on "world"
                (faulty_host None: everyone is in it, all arrived: a stuck collective)
    p2p-chain   faulty host's ranks have no state; halo chains of Recv lead to them across the next hosts
                (on "world.s2c<l>"); everyone else waits in the world Allreduce
    deadlock    faulty host's ranks wait in a Recv cycle on their node comm; everyone else in the Allreduce
    spin        faulty host's first rank computes forever (op None); its host-mates wait in Recv from it
    no-hang     everyone computes (nobody in MPI)
    """
    rng = random.Random(seed)
    faulty_host = _checked(hosts, per_host, faulty_host, scenario, rng)
    n = hosts * per_host
    names = [f"cn{h:05d}" for h in range(hosts)]
    F = [] if faulty_host is None else list(range(faulty_host * per_host, (faulty_host + 1) * per_host))
    missing = set(F) if scenario in ("collective", "p2p-chain") else set()
    special, root, root_site = _special_ranks(scenario, F, hosts, per_host, faulty_host)
    ranks = _rank_records(scenario, n, per_host, names, missing, special, rng)
    comms: dict[str, Any] = {"world": list(range(n)), "world.d1": list(range(n))}
    for loc in range(per_host):
        comms[f"world.s2c{loc}"] = list(range(loc, n, per_host))
    for h in range(hosts):
        comms[f"world.s3c{h}"] = list(range(h * per_host, (h + 1) * per_host))
    return {
        "format": FORMAT, "job": f"synth-{scenario}-{n}", "t": _T0 + 1.0, "size": n,
        "hosts": {names[h]: list(range(h * per_host, (h + 1) * per_host)) for h in range(hosts)},
        "comms": comms,
        "stacks": [[list(f) for f in s] for s in STACKS],
        "ranks": ranks,
        "missing": sorted(missing),
        "collect": {"k": 32, "hop_timeout": 2.0, "seconds": 0.0},
        "synth": {"scenario": scenario, "faulty_host": None if faulty_host is None else names[faulty_host],
                  "root_ranks": [] if scenario == "no-hang" else sorted(root), "root_site": root_site},
    }


#: the counters of the four communicators (world, its dup, the two splits), the step and the clock
_W, _D, _C, _S, _STEP, _T0 = 4321, 17, 250, 3, 1234, 1_700_000_000.0
_SITES = {i: site_of(s) for i, s in enumerate(STACKS)}


def _checked(hosts: int, per_host: int, faulty_host: int | None, scenario: str, rng: random.Random) -> int | None:
    """``synthetic_state``'s arguments checked (ValueError); the faulty host (AUTO: drawn from ``rng``)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r} (one of {', '.join(SCENARIOS)})")
    if hosts < 2 or per_host < 1:
        raise ValueError("need hosts >= 2 and per_host >= 1")
    if faulty_host == AUTO:
        faulty_host = rng.randrange(hosts)
    if faulty_host is None and scenario not in ("collective", "no-hang"):
        raise ValueError(f"scenario {scenario!r} needs a faulty host")
    if faulty_host is not None and not 0 <= faulty_host < hosts:
        raise ValueError(f"faulty_host {faulty_host} not in 0..{hosts - 1}")
    if scenario == "deadlock" and per_host < 2:
        raise ValueError("scenario 'deadlock' needs per_host >= 2")
    return faulty_host


def _coll_op(stack: int, name: str, comm: str, seq: int, since: float) -> dict[str, Any]:
    return {"name": name, "kind": "coll", "comm": comm, "peer": None, "tag": None, "size": 8, "seq": seq,
            "since": since, "site": _SITES[stack]}


def _recv_op(stack: int, comm: str, peer: int, tag: int, since: float) -> dict[str, Any]:
    return {"name": "Recv", "kind": "p2p", "comm": comm, "peer": peer, "tag": tag, "size": 65536,
            "seq": None, "since": since, "site": _SITES[stack]}


def _special_ranks(scenario: str, F: list[int], hosts: int, per_host: int, faulty_host: int | None
                   ) -> tuple[dict[int, tuple[dict[str, Any] | None, int, int]], list[int], str | None]:
    """What each special rank does (rank -> (op, main stack, world colls)), the root-cause ranks and site."""
    n = hosts * per_host
    special: dict[int, tuple[dict[str, Any] | None, int, int]] = {}
    root, root_site = list(F), None
    if scenario == "p2p-chain":
        length = min(16, hosts - 1)
        for f in F:
            loc = f % per_host
            for j in range(1, length + 1):
                r, prev = (f + j * per_host) % n, (f + (j - 1) * per_host) % n
                special[r] = (_recv_op(S_HALO, f"world.s2c{loc}", prev, 7, 300.0 - j), S_HALO, _W - 1)
    elif scenario == "deadlock":
        for i, f in enumerate(F):
            nxt = F[(i + 1) % len(F)]
            special[f] = (_recv_op(S_ORDERED, f"world.s3c{faulty_host}", nxt, 9, 310.0), S_ORDERED, _W - 1)
        root_site = _SITES[S_ORDERED]
    elif scenario == "spin":
        special[F[0]] = (None, S_SPIN, _W - 1)
        for f in F[1:]:
            special[f] = (_recv_op(S_HALO, f"world.s3c{faulty_host}", F[0], 7, 305.0), S_HALO, _W - 1)
        root, root_site = [F[0]], _SITES[S_SPIN]
    return special, root, root_site


def _rank_records(scenario: str, n: int, per_host: int, names: list[str], missing: set[int],
                  special: dict[int, tuple[dict[str, Any] | None, int, int]], rng: random.Random) -> list[dict[str, Any]]:
    """The state records of the ranks not missing: the special ones as given, the others in the world Allreduce."""
    ranks = []
    for r in range(n):
        if r in missing:
            continue
        h, loc = divmod(r, per_host)
        if scenario == "no-hang":
            op, st, w = None, S_COMPUTE, _W
        elif r in special:
            op, st, w = special[r]
        else:
            op, st, w = _coll_op(S_ALLREDUCE, "Allreduce", "world", _W, 290.0 + rng.random()), S_ALLREDUCE, _W
        ranks.append({
            "rank": r, "host": names[h], "pid": 4000 + rng.randrange(60000), "t": _T0 + rng.random() * 0.05,
            "step": _STEP - (1 if op is None and scenario == "spin" else 0),
            "op": op,
            "colls": {"world": w, "world.d1": _D, f"world.s2c{loc}": _C, f"world.s3c{h}": _S},
            "threads": [{"name": "MainThread", "ident": 139_900_000_000_000 + r * 4096, "stack": st},
                        {"name": "planaria-agent", "ident": 139_800_000_000_000 + r * 4096, "stack": S_AGENT}],
            "status": "ok",
        })
    return ranks
