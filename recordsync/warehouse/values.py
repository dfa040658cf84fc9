"""Plain values the warehouse hands back: what a commit wrote, what is quarantined, status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from recordsync.state import SyncState


@dataclass(frozen=True, slots=True)
class WriteResult:
    """One committed page: rows sent to the upsert after collapsing, items quarantined."""

    records: int
    quarantined: int


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    """An item that failed validation, kept exactly as received with the reason."""

    id: int
    merchant_id: str
    source: str  # "tail", "rebuild" or "backfill:<from>/<to>"
    position: str  # "<cursor or start that fetched the page>#<index in the page>"
    record_id: str | None
    reason: str
    raw_json: str
    quarantined_at: datetime


@dataclass(frozen=True, slots=True)
class JobStatus:
    job: str
    windows_done: int
    windows_total: int
    records: int  # records committed from the job's windows so far

    @property
    def done(self) -> bool:
        return self.windows_done == self.windows_total


@dataclass(frozen=True, slots=True)
class WarehouseStatus:
    merchant_id: str
    state: SyncState | None
    jobs: tuple[JobStatus, ...]  # ordered by job name
    records: int  # rows in ``records`` for the merchant
    quarantined: int

    def job(self, name: str) -> JobStatus | None:
        return next((job for job in self.jobs if job.job == name), None)
