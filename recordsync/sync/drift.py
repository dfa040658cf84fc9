"""The drift check: does the warehouse hold, for the most recent closed day, every record at
least at the revision the platform shows?  A non-zero count is an alert, never a silent fix:
it means a change was lost somewhere, and a person must look (runbook: DriftFound).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from recordsync.core.models import Record
from recordsync.core.state import Window


def last_closed_day(platform_now: datetime) -> Window:
    """The last whole UTC day before ``platform_now`` (platform time, never the local clock)."""
    today = datetime(platform_now.year, platform_now.month, platform_now.day, tzinfo=UTC)
    return Window(today - timedelta(days=1), today)


@dataclass
class DriftTally:
    checked: int = 0
    behind: int = 0
    missing: int = 0
    ignored_recent: int = 0

    @property
    def rows_behind(self) -> int:
        return self.behind + self.missing

    def add(
        self,
        records: Iterable[Record],
        stored: Mapping[str, int],
        *,
        covered_until: datetime | None,
    ) -> None:
        """Count records the warehouse holds at a lower revision (or not at all).

        A revision newer than what the tail has already covered (``covered_until``, the last
        committed ``projection_as_of``) is still on its way, not drift.
        """
        for record in records:
            if covered_until is None or record.updated_at > covered_until:
                self.ignored_recent += 1
                continue
            self.checked += 1
            revision = stored.get(record.record_id)
            if revision is None:
                self.missing += 1
            elif revision < record.revision:
                self.behind += 1
