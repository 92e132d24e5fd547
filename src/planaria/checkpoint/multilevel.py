"""Several stores at once, each saving every k-th version; restore from the fastest that has it."""
from __future__ import annotations

import numpy as np

from planaria.checkpoint.store import CheckpointError, CheckpointStore, check_fresh, check_logical, check_version
from planaria.comm.base import Comm


class MultiLevel(CheckpointStore):
    """``MultiLevel([(MemoryStore(), 1), (FileStore(d), 10)])``: memory every version, files every 10th.

    ``save`` calls each store whose ``every`` divides the version; ``restorable`` is the newest
    version any level can restore; ``restore`` uses the fastest level that has it (memory, then
    xor, then file; levels of equal speed in the order given). ``recoverable_lost`` and
    ``recover_lost`` (continuing on fewer ranks) pick their level the same way. After restoring from a slower
    level, the faster in-memory levels whose ``every`` divides the version are saved again from
    the restored state (``reseed``), so they protect the job from the next failure.
    """

    name = "multilevel"

    def __init__(self, levels: list[tuple[CheckpointStore, int]], reseed: bool = True) -> None:
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

    def __repr__(self) -> str:
        return f"MultiLevel({self.levels!r})"

    def _by_speed(self) -> list[tuple[CheckpointStore, int]]:
        order = sorted(range(len(self.levels)), key=lambda i: (self.levels[i][0].speed_rank, i))
        return [self.levels[i] for i in order]

    def save(self, comm: Comm, version: int, state: dict[str, np.ndarray]) -> None:
        version = check_version(version)
        for store, every in self.levels:
            if version % every == 0:
                store.save(comm, version, state)

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
                into: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
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
                if i < used and version % every == 0 and store.speed_rank < ordered[used][0].speed_rank:
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
