"""Revision retention: superseded revisions stored before the cutoff leave ``record_revisions``;
the current revision of every record stays, whatever its age; pruning runs beside page
commits."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from support.warehouse_reads import fetch_revisions
from support.warehouse_samples import MERCHANT, make_change, make_record, start_rebuild_of_window

from recordsync.core.retention import RevisionKey
from recordsync.core.state import TailPage
from recordsync.warehouse import Warehouse
from recordsync.warehouse.revision_retention import ScannedRevision, expired

RETENTION = timedelta(days=30)
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def scanned(record_id: str, revision: int, age_days: float) -> ScannedRevision:
    return ScannedRevision(RevisionKey(record_id, revision), NOW - timedelta(days=age_days))


@pytest.mark.parametrize(
    ("row", "current", "gone"),
    [
        (scanned("a", 1, 40), {"a": 2}, True),
        (scanned("a", 2, 40), {"a": 2}, False),  # the current revision, however old
        (scanned("a", 1, 10), {"a": 2}, False),  # superseded, but stored within the retention
        (scanned("a", 1, 40), {}, False),  # records no longer holds it: its history stays
        (scanned("a", 3, 40), {"a": 2}, False),  # above the current one: never deleted
    ],
    ids=["old-superseded", "current", "recent-superseded", "no-current-row", "above-current"],
)
def test_only_old_superseded_revisions_expire(row, current, gone):
    assert expired([row], current, NOW - RETENTION) == ([row.key] if gone else [])


def _tail(store: Warehouse, *records, position: str = "tail") -> None:
    changes = [make_change(record, 100 + n) for n, record in enumerate(records)]
    store.pages.commit_tail_page(
        MERCHANT,
        TailPage(
            records=list(records),
            rejected=[],
            next_cursor=f"{position}-next",
            last_sequence=changes[-1].sequence,
            projection_as_of=datetime(2024, 3, 1, tzinfo=UTC),
            position=position,
            changes=changes,
        ),
    )


def _sweep(store: Warehouse, *, limit: int) -> tuple[int, int]:
    """A whole sweep in batches of ``limit``: (keys read, rows deleted)."""
    after, scanned_total, deleted = None, 0, 0
    while True:
        batch = store.records.prune_revisions(
            MERCHANT, after, retention=RETENTION, epoch=None, limit=limit
        )
        scanned_total += batch.scanned
        deleted += batch.deleted
        if batch.last is None:
            return scanned_total, deleted
        after = batch.last


def _keys(store: Warehouse) -> list[tuple[str, int]]:
    return [(row["record_id"], row["revision"]) for row in fetch_revisions(store, MERCHANT)]


def test_a_sweep_deletes_expired_revisions_and_keeps_every_current_one(warehouse_url, warehouse):
    old = Warehouse.connect(warehouse_url, clock=lambda: datetime.now(UTC) - timedelta(days=40))
    try:
        start_rebuild_of_window(old)
        # Stored 40 days ago: a1, a2 (superseded later by a3), b1 (still current), c1 and c2.
        _tail(old, make_record("a", 1), make_record("a", 2), make_record("b", 1))
        _tail(old, make_record("c", 1), make_record("c", 2), position="tail-2")
    finally:
        old.close()
    # Stored now: a3 supersedes a1 and a2; d1 superseded by d2 today stays (within retention).
    _tail(warehouse, make_record("a", 3), make_record("d", 1), make_record("d", 2))
    before = _keys(warehouse)

    scanned_total, deleted = _sweep(warehouse, limit=2)  # several batches: the keyset resumes

    assert (scanned_total, deleted) == (len(before), 3)
    assert _keys(warehouse) == [("a", 3), ("b", 1), ("c", 2), ("d", 1), ("d", 2)]
    assert _sweep(warehouse, limit=2) == (5, 0)  # a second sweep finds nothing more


def test_pruning_runs_beside_page_commits_without_error(warehouse_url, warehouse):
    old = Warehouse.connect(warehouse_url, clock=lambda: datetime.now(UTC) - timedelta(days=40))
    ids = [f"r{n:03d}" for n in range(60)]
    try:
        start_rebuild_of_window(old)
        _tail(old, *(make_record(rid, 1) for rid in ids))
        _tail(old, *(make_record(rid, 2) for rid in ids), position="tail-2")
    finally:
        old.close()
    failures: list[BaseException] = []
    stop = threading.Event()

    def commits() -> None:
        writer = Warehouse.connect(warehouse_url)
        try:
            for revision in range(3, 9):  # each page supersedes what the sweep may be deleting
                _tail(writer, *(make_record(rid, revision) for rid in ids), position=f"t{revision}")
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failures.append(exc)
        finally:
            stop.set()
            writer.close()

    thread = threading.Thread(target=commits)
    thread.start()
    sweeps = 0
    while not stop.is_set() or sweeps == 0:
        _sweep(warehouse, limit=25)
        sweeps += 1
    thread.join()
    _sweep(warehouse, limit=25)

    assert failures == []
    kept = _keys(warehouse)
    assert all((rid, 8) in kept for rid in ids)  # every current revision
    assert not any(revision <= 2 for _, revision in kept)  # every expired one gone
    assert len(kept) == len(ids) * 6  # revisions 3-8, stored now, stay
