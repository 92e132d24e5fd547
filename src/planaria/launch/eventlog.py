"""The controller's writes to the job record (``events.jsonl``): records kept in order and
appended in one write; kept again, in order, when a write fails (no descriptor, a full disk).

Used by the controller's server thread only (no lock): the rank table, the transport, the event
fan-out and the tool service hand their records here.
"""
from __future__ import annotations

from typing import Any

from planaria.launch.jobdir import JobDir

MAX_KEPT_RECORDS = 100_000                # event records kept while the job record cannot be written
RECORD_BATCH = 256                        # event records kept before they are written anyway


class EventLog:
    """Records waiting to be appended to one job's record."""

    def __init__(self, jobdir: JobDir) -> None:
        self.jobdir = jobdir
        self.kept: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.kept)

    def add(self, rec: dict[str, Any]) -> None:
        """Keep a record for the next flush."""
        self.kept.append(rec)

    def extend(self, recs: list[dict[str, Any]]) -> None:
        """Keep records for the next flush, in their order."""
        self.kept.extend(recs)

    def batch(self, rec: dict[str, Any]) -> None:
        """Keep a record; write once ``RECORD_BATCH`` are kept (a write per event would cost the CPU
        the ranks receiving it need)."""
        self.kept.append(rec)
        if len(self.kept) >= RECORD_BATCH:
            self.flush()

    def write(self, rec: dict[str, Any]) -> None:
        """Append a record to the job record after the records still kept."""
        self.kept.append(rec)
        self.flush()

    def flush(self) -> None:
        """Write the records kept so far; on a failed write they stay kept (at most
        ``MAX_KEPT_RECORDS``, the oldest dropped) for the next flush."""
        if self.kept:
            records, self.kept = self.kept, []
            try:
                self.jobdir.append_events(records)
            except OSError:
                self.kept = records + self.kept
                if len(self.kept) > MAX_KEPT_RECORDS:
                    del self.kept[:len(self.kept) - MAX_KEPT_RECORDS]
