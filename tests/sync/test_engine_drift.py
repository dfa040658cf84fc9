"""The drift check job: the last closed day read again and compared with the store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from structlog.testing import capture_logs
from support.fakes import (
    HOUR,
    NOW,
    FakePlatform,
    FakeStore,
    InstantStopper,
    RecordingObserver,
    make_context,
    record,
    tailing_state,
)

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.core.state import Phase, Window
from recordsync.core.stopping import Stopper
from recordsync.platform.budget import Priority
from recordsync.sync.drift_check import DriftCheck
from recordsync.sync.jobs import Jobs

# NOW is 2024-03-05 10:30 platform time: the last closed day is March 4.
DAY = Window(datetime(2024, 3, 4, tzinfo=UTC), datetime(2024, 3, 5, tzinfo=UTC))
COVERED_UNTIL = NOW - HOUR  # the tail's last committed projection_as_of
SEEN = DAY.start + 12 * HOUR  # updated long before the coverage


def run_check(platform: FakePlatform, store: FakeStore) -> tuple[RecordingObserver, list]:
    observer = RecordingObserver()
    ctx = make_context(platform, store, observer=observer)
    with capture_logs() as logs:
        DriftCheck(ctx, ctx.runner(Stopper(), fatal_is_final=False)).run()
    return observer, [entry for entry in logs if entry["event"].startswith("drift")]


@pytest.mark.parametrize(
    ("platform_revision", "updated", "stored_revision", "counts"),
    [
        (3, SEEN, 2, {"checked": 1, "behind": 1, "missing": 0, "still_arriving": 0}),
        (1, SEEN, None, {"checked": 1, "behind": 0, "missing": 1, "still_arriving": 0}),
        (2, SEEN, 2, {"checked": 1, "behind": 0, "missing": 0, "still_arriving": 0}),
        (2, SEEN, 3, {"checked": 1, "behind": 0, "missing": 0, "still_arriving": 0}),
        (5, NOW, 4, {"checked": 0, "behind": 0, "missing": 0, "still_arriving": 1}),
        (1, NOW, None, {"checked": 0, "behind": 0, "missing": 0, "still_arriving": 1}),
    ],
    ids=[
        "stored at a lower revision: behind",
        "not stored: missing",
        "stored at the same revision",
        "stored at a higher revision",
        "behind but newer than the tail's coverage: still arriving",
        "missing but newer than the tail's coverage: still arriving",
    ],
)
def test_the_drift_check_counts_rows_behind_the_platform(
    platform_revision, updated, stored_revision, counts
):
    platform = FakePlatform(
        records=[record("r1", platform_revision, created=DAY.start + HOUR, updated=updated)]
    )
    store = FakeStore(state=tailing_state(last_projection_as_of=COVERED_UNTIL))
    if stored_revision is not None:
        store.keep(record("r1", stored_revision, created=DAY.start + HOUR, updated=SEEN))

    observer, logs = run_check(platform, store)

    behind = counts["behind"] + counts["missing"]
    assert observer.drift == [(DAY, behind)]
    assert len(logs) == 1
    assert logs[0]["event"] == ("drift_found" if behind else "drift_checked")
    assert {key: logs[0][key] for key in counts} == counts


def test_the_drift_check_reads_every_page_of_the_last_closed_day_at_background_priority():
    inside = [record(f"d{n}", 2, created=DAY.start + n * HOUR, updated=SEEN) for n in range(5)]
    outside = [
        record("yesterday", created=DAY.start - HOUR, updated=SEEN),
        record("today", created=DAY.end, updated=SEEN),
    ]
    platform = FakePlatform(records=inside + outside)
    store = FakeStore(state=tailing_state(last_projection_as_of=COVERED_UNTIL))
    store.keep(
        *[record(item.record_id, 1, created=item.created_at, updated=SEEN) for item in inside]
    )

    observer, logs = run_check(platform, store)  # pages of 2: three requests

    assert observer.drift == [(DAY, 5)]
    assert logs[0]["behind"] == 5
    reads = platform.calls_to("records_first", "records_next")
    assert [call.endpoint for call in reads] == ["records_first", "records_next", "records_next"]
    assert {call.priority for call in reads} == {Priority.BACKGROUND}
    assert reads[0].at == DAY.start.isoformat()


def test_the_drift_check_compares_nothing_while_the_snapshot_is_still_running():
    platform = FakePlatform(records=[record("r1", created=DAY.start, updated=SEEN)])
    store = FakeStore(state=tailing_state(phase=Phase.SNAPSHOT))

    observer, logs = run_check(platform, store)

    assert platform.calls == []
    assert observer.drift == []
    assert logs == []


@pytest.mark.parametrize(
    ("method", "failures"),
    [("load_state", 1), ("load_state", 3), ("stored_revisions", 1), ("stored_revisions", 2)],
    ids=["state-once", "state-and-again", "revisions-once", "revisions-twice"],
)
def test_the_drift_check_waits_out_a_warehouse_outage(method, failures):
    """A warehouse restart while the check runs is retried by the runner, never raised."""
    platform = FakePlatform(records=[record("r1", 3, created=DAY.start + HOUR, updated=SEEN)])
    store = FakeStore(state=tailing_state(last_projection_as_of=COVERED_UNTIL))
    store.keep(record("r1", 2, created=DAY.start + HOUR, updated=SEEN))
    store.fail(method, *[WarehouseUnavailableError("server restarting")] * failures)
    stopper = InstantStopper()
    observer = RecordingObserver()
    ctx = make_context(platform, store, observer=observer, stopper=stopper)

    DriftCheck(ctx, ctx.runner(stopper, fatal_is_final=False)).run()

    assert observer.drift == [(DAY, 1)]
    assert observer.errors == ["WarehouseUnavailableError"] * failures
    assert len(stopper.slept) == failures


def test_a_periodic_job_that_meets_an_outage_ends_its_run_not_the_generation():
    stopper = Stopper()
    runs = []

    def flaky():
        runs.append(len(runs))
        if len(runs) == 1:
            raise WarehouseUnavailableError("down")
        if len(runs) == 3:
            stopper.stop()

    jobs = Jobs(stopper, workers=1)
    jobs.every("flaky", 0.05, flaky, now=True)
    with capture_logs() as logs:
        jobs.run_until_stopped()
    assert len(runs) >= 3
    assert jobs.failures == []
    assert [entry["job"] for entry in logs if entry["event"] == "periodic_job_failed"] == ["flaky"]


def test_a_bug_in_a_periodic_job_still_stops_the_generation():
    jobs = Jobs(Stopper(), workers=1)

    def broken():
        raise KeyError("a bug")

    jobs.every("broken", 0.05, broken, now=True)
    with pytest.raises(KeyError):
        jobs.run_until_stopped()
