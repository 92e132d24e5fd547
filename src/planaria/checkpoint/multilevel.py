"""Several stores at once, each saving every k-th checkpoint; restore from the fastest that has it.

A level's interval counts checkpoints, as SCR's do: ``(store, k)`` holds every k-th one. Used by
``Resilient``, whose versions are step numbers ``every`` steps apart, version ``v`` is checkpoint
number ``ceil(v / every)`` (the driver tells the store its spacing); saved directly, a version is
its own checkpoint number (spacing 1). Either way the levels a version lands in follow from the
version alone, so they are the same after a restore or a restart. Each file level's directory
gets a small description of the levels (``multilevel.json``) for ``planaria checkpoints``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from planaria.checkpoint.store import (
    CheckpointError, CheckpointStore, SaveFailed, check_fresh, check_logical, check_version,
)
from planaria.comm.base import Comm
from planaria.util.fsutil import atomic_write

#: the description of the levels written into each file level's directory
LEVELS_FILE = "multilevel.json"


def checkpoint_number(version: int, spacing: int) -> int:
    """The checkpoint number of ``version`` when versions are ``spacing`` apart: ``ceil(version / spacing)``
    (a final checkpoint between two multiples counts as the next one)."""
    return -(-int(version) // int(spacing))


def levels_holding(version: int, spacing: int, everys: list[int]) -> list[int]:
    """Indexes (0-based) of the levels, of intervals ``everys`` (in checkpoints), that save ``version``."""
    n = checkpoint_number(version, spacing)
    return [i for i, every in enumerate(everys) if n % every == 0]


class MultiLevel(CheckpointStore):
    """``MultiLevel([(MemoryStore(), 1), (FileStore(d), 10)])``: memory every checkpoint, files every 10th.

    ``save`` calls each store whose ``every`` divides the version's checkpoint number (the version
    itself, or ``ceil(version / spacing)`` once ``Resilient`` set its spacing, see the module
    docstring); ``restorable`` is the newest
    version any level can restore; ``restore`` uses the fastest level that has it (memory, then
    xor, then file; levels of equal speed in the order given). ``recoverable_lost`` and
    ``recover_lost`` (continuing on fewer ranks) pick their level the same way. After restoring from a slower
    level, the faster in-memory levels whose ``every`` divides the version are saved again from
    the restored state (``reseed``), so they protect the job from the next failure.
    """

    name = "multilevel"

    def __init__(self, levels: list[tuple[CheckpointStore, int]], reseed: bool = True, spacing: int = 1) -> None:
        if not levels:
            raise ValueError("MultiLevel needs at least one (store, every) level")
        for store, every in levels:
            if not isinstance(store, CheckpointStore):
                raise TypeError(f"{store!r} is not a CheckpointStore")
            if int(every) < 1:
                raise ValueError(f"every must be >= 1, not {every}")
        self.levels = [(s, int(e)) for s, e in levels]
        self.reseed = reseed
        self.speed_rank = min(s.speed_rank for s, _ in self.levels)
        self.spacing = 1
        self.set_spacing(spacing)
        self._described: int | None = None     # the spacing the levels' description was written for

    def set_spacing(self, every: int) -> None:
        """Versions are ``every`` apart (``Resilient`` passes its checkpoint interval in steps): version
        ``v`` is checkpoint number ``ceil(v / every)``, which the levels' intervals count."""
        if int(every) < 1:
            raise ValueError(f"spacing must be >= 1, not {every}")
        self.spacing = int(every)

    def saves_in(self, version: int) -> list[CheckpointStore]:
        """The levels that save ``version`` (local, no messages)."""
        held = levels_holding(version, self.spacing, [e for _, e in self.levels])
        return [self.levels[i][0] for i in held]

    def _due(self, every: int, version: int) -> bool:
        return checkpoint_number(version, self.spacing) % every == 0

    def describe(self) -> dict[str, Any]:
        """The levels as ``planaria checkpoints`` reads them from a file level's directory."""
        return {"format": 1, "spacing": self.spacing,
                "levels": [{"level": i + 1, "kind": s.name, "every": e,
                            "directory": os.path.abspath(d) if (d := getattr(s, "directory", None)) is not None else None}
                           for i, (s, e) in enumerate(self.levels)]}

    def _write_description(self, comm: Comm) -> None:
        """Rank 0: the levels' description into each file level's directory, once per spacing.
        Informative only: a directory that cannot take it is left to the level's own save to report."""
        if comm.rank != 0 or self._described == self.spacing:
            return
        self._described = self.spacing
        desc = self.describe()
        for i, (store, _) in enumerate(self.levels):
            d = getattr(store, "directory", None)
            if d is None:
                continue
            try:
                Path(d).mkdir(parents=True, exist_ok=True)
                atomic_write(Path(d) / LEVELS_FILE, json.dumps(desc | {"this": i + 1}, indent=1))
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"MultiLevel({self.levels!r})"

    def _by_speed(self) -> list[tuple[CheckpointStore, int]]:
        order = sorted(range(len(self.levels)), key=lambda i: (self.levels[i][0].speed_rank, i))
        return [self.levels[i] for i in order]

    def save(self, comm: Comm, version: int, state: dict[str, np.ndarray]) -> None:
        """Each level due saves ``version``; a level whose save every rank gave up (``SaveFailed``)
        does not stop the others, and the first such error is raised once they are done."""
        version = check_version(version)
        self._write_description(comm)
        failed: SaveFailed | None = None
        for store, every in self.levels:
            if self._due(every, version):
                try:
                    store.save(comm, version, state)
                except SaveFailed as err:
                    failed = failed or err
        if failed is not None:
            raise failed

    def wait_complete(self, comm: Comm) -> None:
        """Every level's newest version saved on ``comm`` held in full by every rank."""
        for store, _ in self.levels:
            store.wait_complete(comm)

    def footprint(self) -> list[int]:
        """The fastest level's footprint: the level a fresh rank's restore normally uses."""
        return self._by_speed()[0][0].footprint()

    def versions(self) -> set[int]:
        out: set[int] = set()
        for store, _ in self.levels:
            out |= store.versions()
        return out

    def restorable_versions(self, comm: Comm, fresh: set[int]) -> set[int]:
        fresh = check_fresh(comm, fresh)
        out: set[int] = set()
        for store, _ in self.levels:
            out |= store.restorable_versions(comm, fresh)
        return out

    def restore(self, comm: Comm, version: int, fresh: set[int],
                into: dict[str, np.ndarray] | None = None, offers: list[Any] | None = None) -> dict[str, np.ndarray]:
        del offers                       # no offers of its own: it agrees on versions through restorable
        version = check_version(version)
        fresh = check_fresh(comm, fresh)
        ordered = self._by_speed()
        have = [version in store.restorable_versions(comm, fresh) for store, _ in ordered]
        if not any(have):
            raise CheckpointError(f"no level can restore version {version} with fresh ranks {sorted(fresh)}")
        used = have.index(True)
        state = ordered[used][0].restore(comm, version, fresh, into=into)
        if self.reseed:
            for i, (store, every) in enumerate(ordered):
                if i < used and self._due(every, version) and store.speed_rank < ordered[used][0].speed_rank:
                    store.save(comm, version, state)
        return state

    def recoverable_lost_versions(self, comm: Comm, logical: list[int | None], old_size: int) -> set[int]:
        check_logical(comm, logical, old_size)
        out: set[int] = set()
        for store, _ in self.levels:
            out |= store.recoverable_lost_versions(comm, logical, old_size)
        return out

    def recover_lost(self, comm: Comm, version: int, logical: list[int | None],
                     old_size: int) -> tuple[dict[str, np.ndarray] | None, dict[int, dict[str, np.ndarray]]]:
        """From the fastest level that can rebuild ``version`` (no reseeding: the layout is gone)."""
        version = check_version(version)
        lost = check_logical(comm, logical, old_size)
        for store, _ in self._by_speed():
            if version in store.recoverable_lost_versions(comm, logical, old_size):
                return store.recover_lost(comm, version, logical, old_size)
        raise CheckpointError(f"no level can rebuild version {version} after losing rank(s) {lost} of {old_size}")

    def level_for(self, comm: Comm, version: int, fresh: set[int]) -> CheckpointStore | None:
        """Collective: the store ``restore`` would use for ``version`` (None if none can)."""
        fresh = check_fresh(comm, fresh)
        for store, _ in self._by_speed():
            if version in store.restorable_versions(comm, fresh):
                return store
        return None
