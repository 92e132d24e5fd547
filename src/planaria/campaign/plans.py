"""Drawing fault plans: each run's target, backend, faults and settings, from the campaign's seed alone.

Run ``k`` of a campaign takes target ``targets[k % T]`` and backend ``backends[(k // T) % B]``,
so every pair comes round evenly, and draws its plan from ``random.Random`` seeded with
``"<seed>:<k>:<target>:<backend>"``: the same seed always gives the same plans, on any machine.
Nothing here launches anything.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

TARGETS = ("demo", "app", "abft")
BACKENDS = ("ulfm", "sim")

WORKING, SPARES = 6, 2                    # demo and app: 6 working ranks + 2 spares
WORLD = WORKING + SPARES
DEMO_STEPS, DEMO_EVERY, DEMO_CELLS = 300, 20, 5000
DEMO_SECONDS = 0.25                       # about how long the demo's steps take (time origin: start-up)
APP_STEPS, APP_EVERY, APP_CELLS = 200, 20, 1000
APP_SECONDS = 0.7                         # about how long the app's steps take
ABFT_WORKERS = 4                          # ranks 0, 1: masters; 2..5: workers 0..3 (--force names workers)
ABFT_KINDS = ("crash", "silent", "nodata", "readerror", "memory")

# how a demo/app fault is chosen (weights): kills by iteration, phase, pair, time, MTBF; flips; I/O errors
KILL_KINDS = ("iter", "checkpoint", "recover", "finish", "adjacent", "start", "end", "mtbf")
APP_ONLY_KINDS = ("bitflip",)
FILE_ONLY_KINDS = ("ioerror",)
#: how many opens in a row an I/O-error fault fails: one (a transient error a read tries again
#: past), or more than the file store's tries (a read that gives up, a save that fails)
IO_ERROR_COUNTS = (1, 1, 2, 3, 5)


@dataclass
class RunPlan:
    """One run of a campaign: what to launch and which faults to inject."""

    index: int
    target: str
    backend: str
    faults: list[str] = field(default_factory=list)          # --inject specs (demo, app, abft)
    settings: dict[str, Any] = field(default_factory=dict)   # target options (store, kernel, ...)
    damage: list[dict[str, Any]] = field(default_factory=list)  # app + file store: bytes to flip between two runs

    def to_json(self) -> dict[str, Any]:
        """The plan as plain JSON data."""
        return asdict(self)

    def describe(self) -> str:
        """One line: settings, faults and damage."""
        parts = [f"{k}={v}" for k, v in self.settings.items() if k != "abft_args"]
        parts += list(self.settings.get("abft_args", []))
        parts += [f"--inject {f}" for f in self.faults]
        parts += [f"damage {d['which']} version {d['file']} byte@{d['pos']:.3f} bit {d['bit']}" for d in self.damage]
        return " ".join(parts) or "no faults"


def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """A comma-separated list of names from ``allowed`` (ValueError naming the bad one)."""
    names = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise ValueError(f"--{what} {text!r}: expected a comma-separated list of {', '.join(allowed)}")
    for n in names:
        if n not in allowed:
            raise ValueError(f"--{what}: unknown {what[:-1]} {n!r} (expected {', '.join(allowed)})")
    return list(dict.fromkeys(names))


def schedule(seed: int, runs: int, targets: list[str], backends: list[str], first: int = 0) -> list[RunPlan]:
    """The campaign's plans ``first`` .. ``first + runs - 1``, in order (parts of one long campaign)."""
    out = []
    for k in range(first, first + runs):
        target = targets[k % len(targets)]
        backend = backends[(k // len(targets)) % len(backends)]
        out.append(draw(seed, k, target, backend))
    return out


def draw(seed: int, index: int, target: str, backend: str) -> RunPlan:
    """The plan of run ``index`` (depends only on the four arguments)."""
    rng = random.Random(f"{seed}:{index}:{target}:{backend}")
    plan = RunPlan(index, target, backend)
    if target == "demo":
        _draw_demo(rng, plan)
    elif target == "app":
        _draw_app(rng, plan)
    elif target == "abft":
        _draw_abft(rng, plan)
    else:
        raise ValueError(f"unknown target {target!r}")
    return plan


def _draw_demo(rng: random.Random, plan: RunPlan) -> None:
    """Checkpoint kind, what to do when spares run out, and 1-3 faults."""
    ck = rng.choice(("memory", "xor", "file", "multi"))
    plan.settings = {"checkpoint": ck, "when_exhausted": "continue" if rng.random() < 0.2 else "stop"}
    kinds = KILL_KINDS + (FILE_ONLY_KINDS if ck in ("file", "multi") else ())
    plan.faults = _draw_faults(rng, kinds, DEMO_STEPS, DEMO_EVERY, DEMO_SECONDS)


def _draw_app(rng: random.Random, plan: RunPlan) -> None:
    """Store (memory or file), 1-3 faults, and for some file runs bytes to damage before a second run."""
    store = rng.choice(("memory", "file"))
    plan.settings = {"store": store}
    kinds = KILL_KINDS + APP_ONLY_KINDS + (FILE_ONLY_KINDS if store == "file" else ())
    plan.faults = _draw_faults(rng, kinds, APP_STEPS, APP_EVERY, APP_SECONDS)
    if store == "file" and rng.random() < 0.35:
        # run, flip one bit in a checkpoint file (or in each of the two versions kept), run again
        versions = ["newest"] if rng.random() < 0.6 else ["newest", "older"]
        for which in versions:
            name = "manifest.json" if rng.random() < 0.2 else f"rank{rng.randrange(WORKING):05d}.bin"
            plan.damage.append({"which": which, "file": name, "pos": round(rng.random(), 4),
                                "bit": rng.randrange(8)})


def _draw_faults(rng: random.Random, kinds: tuple[str, ...], steps: int, every: int, seconds: float) -> list[str]:
    """1-3 faults on distinct processes, except random kills and the manifest I/O error (always rank 0)."""
    free = list(range(WORLD))
    rng.shuffle(free)
    faults: list[str] = []
    for _ in range(rng.choice((1, 1, 2, 2, 3))):
        kind = rng.choice(kinds)
        if kind == "adjacent":
            pairs = [a for a in range(WORKING - 1) if a in free and a + 1 in free]
            if not pairs:
                continue
            a = rng.choice(pairs)
            free.remove(a)
            free.remove(a + 1)
            faults.append(f"kill:rank={a}+{a + 1},iter={rng.randint(1, steps - 1)}")
            continue
        if kind == "mtbf":
            if any(f.startswith("kill:mtbf") for f in faults):
                continue
            faults.append(f"kill:mtbf={round(rng.uniform(0.3, 1.5) * seconds, 3)},seed={rng.randrange(1000)},"
                          f"count={rng.randint(1, 2)},ranks=0-{WORLD - 1}")
            continue
        if kind == "ioerror" and rng.random() < 0.25:      # rank 0 writes the manifests
            faults.append(f"ioerror:rank=0,iter={rng.randint(0, steps - 1)},path=*manifest.json*,"
                          f"count={rng.choice(IO_ERROR_COUNTS)}")
            continue
        if not free:
            break
        pool = free
        if kind in ("bitflip", "ioerror") and rng.random() < 0.7:     # mostly ranks that hold data
            pool = [r for r in free if r < WORKING] or free
        v = pool[rng.randrange(len(pool))]
        free.remove(v)
        faults.append(_fault(rng, kind, v, steps, every, seconds))
    if not faults:
        faults.append(f"kill:rank={rng.randrange(WORLD)},iter={rng.randint(1, steps - 1)}")
    return faults


def _fault(rng: random.Random, kind: str, v: int, steps: int, every: int, seconds: float) -> str:
    """One fault of ``kind`` on process ``v``."""
    if kind == "iter":
        return f"kill:rank={v},iter={rng.randint(1, steps - 1)}"
    if kind == "checkpoint":
        return f"kill:rank={v},phase=checkpoint" + (f",iter={rng.randrange(0, steps, every)}" if rng.random() < 0.8 else "")
    if kind in ("recover", "finish"):
        return f"kill:rank={v},phase={kind}"
    if kind == "start":
        return f"kill:rank={v},time={rng.uniform(0.0, 0.05):.3f}"
    if kind == "end":
        return f"kill:rank={v},time={rng.uniform(0.7, 1.5) * seconds:.3f}"
    if kind == "bitflip":
        bit = f",bit={rng.randrange(64)}" if rng.random() < 0.5 else ""
        return f"bitflip:rank={v},array=x,iter={rng.randint(0, steps - 1)}{bit},seed={rng.randrange(1000)}"
    if kind == "ioerror":
        return f"ioerror:rank={v},iter={rng.randint(0, steps - 1)},path=*rank*.bin*,count={rng.choice(IO_ERROR_COUNTS)}"
    raise ValueError(f"unknown fault kind {kind!r}")


def _draw_abft(rng: random.Random, plan: RunPlan) -> None:
    """Kernel and faults: a random error rate, forced kinds (adjacent silent pairs among them), master kills."""
    kernel = rng.choice(("slope", "cutdepth"))
    workers = list(range(ABFT_WORKERS))
    args: list[str] = []
    how = rng.choice(("rate", "rate", "force", "adjacent", "pair", "master"))
    if how == "rate":
        args += ["--error-rate", str(rng.choice((0.25, 0.5, 0.75, 1.0))), "--seed", str(rng.randrange(10000))]
    elif how == "force":
        for w in rng.sample(workers, rng.randint(1, 2)):
            args += ["--force", f"{rng.choice(ABFT_KINDS)}:{w}"]
    elif how == "adjacent":
        a = rng.choice(workers[:-1])
        args += ["--force", f"silent:{a}", "--force", f"silent:{a + 1}"]
    elif how == "pair":
        a, b = sorted(rng.sample(workers, 2))
        args += ["--force", f"{rng.choice(ABFT_KINDS)}:{a}", "--force", f"{rng.choice(ABFT_KINDS)}:{b}"]
    else:
        plan.faults.append(f"kill:rank={rng.choice((0, 1))},iter={rng.choice((10, 11))}")
        args += ["--force", f"{rng.choice(ABFT_KINDS)}:{rng.choice(workers)}"]
    plan.settings = {"kernel": kernel, "abft_args": args}


def possible_failures(plan: RunPlan) -> int:
    """How many processes the plan may end (kills, and ranks that fail-stop on a flip or an I/O error)."""
    from planaria.inject.plan import BitFlip, IOErrorFault, Kill, Plan, RandomKill

    size = WORLD if plan.target != "abft" else ABFT_WORKERS + 2
    ranks: set[int] = set()
    for f in Plan.parse(plan.faults).faults:
        if isinstance(f, RandomKill):
            ranks.update(v for _, v in f.schedule(size))
        elif isinstance(f, (Kill, BitFlip, IOErrorFault)):
            ranks.update(f.rank.expand(size))
    return len(ranks)
