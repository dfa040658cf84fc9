"""Round-end notifications in the warehouse: stored once whatever the retries, announced to the
other replicas (NOTIFY on PostgreSQL, a poll elsewhere), and cross-checked against records."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from support.clocks import FakeClock
from support.dbfixtures import BACKEND_PARAMS
from support.warehouse_samples import MERCHANT, make_record

from recordsync.core.round_events import RoundEvent
from recordsync.core.state import TailPage
from recordsync.warehouse import Warehouse
from recordsync.warehouse import round_events as round_events_feed
from recordsync.warehouse.schema import round_events

T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)


def event(event_id="ev-1", round_id="round-rec-1", **changes):
    return replace(
        RoundEvent(
            event_id=event_id,
            merchant_id=MERCHANT,
            round_id=round_id,
            parent_round_id=None,
            external_player_id="player-ext-1",
            currency="USD",
            type="ROUND_ENDED",
            occurred_at=T0,
        ),
        **changes,
    )


@pytest.fixture
def clocked(warehouse_url):
    clock = FakeClock(T0)
    store = Warehouse.connect(warehouse_url, clock=clock)
    store.migrate()
    try:
        yield store, clock
    finally:
        store.close()


def rows(store):
    with store.engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(select(round_events))]


def test_an_event_is_stored_once_and_a_repeat_gets_the_first_receipt(clocked):
    store, clock = clocked
    first = store.events.record_round_event(event(parent_round_id="parent-1"), received_by="r1")
    clock.now += timedelta(seconds=5)
    again = store.events.record_round_event(event(currency="EUR"), received_by="r2")
    assert (first.accepted_at, first.duplicate) == (T0, False)
    assert (again.accepted_at, again.duplicate) == (T0, True)
    [row] = rows(store)
    assert row["currency"] == "USD"  # the repeat changed nothing
    assert row["parent_round_id"] == "parent-1"
    assert row["received_by"] == "r1"
    assert row["occurred_at"] == T0
    assert row["found_at"] is None


def test_two_replicas_storing_one_event_at_once_both_get_the_first_receipt(warehouse):
    results = []
    barrier = threading.Barrier(4)

    def store_it(name):
        barrier.wait()
        results.append(warehouse.events.record_round_event(event(), received_by=name))

    threads = [threading.Thread(target=store_it, args=(f"r{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(rows(warehouse)) == 1
    assert len({receipt.accepted_at for receipt in results}) == 1
    assert sorted(receipt.duplicate for receipt in results) == [False, True, True, True]


def test_a_colliding_event_id_from_another_merchant_gets_its_own_receipt(clocked):
    """Each merchant de-duplicates its own event ids (spec: Events, "Round end")."""
    store, clock = clocked
    mine = store.events.record_round_event(event(), received_by="r1")
    clock.now += timedelta(seconds=5)
    theirs = event(round_id="round-b", merchant_id="merchant-2")
    first = store.events.record_round_event(theirs, received_by="r2")
    clock.now += timedelta(seconds=5)
    again = store.events.record_round_event(theirs, received_by="r1")
    assert (mine.accepted_at, mine.duplicate) == (T0, False)
    assert (first.accepted_at, first.duplicate) == (T0 + timedelta(seconds=5), False)
    assert (again.accepted_at, again.duplicate) == (first.accepted_at, True)
    stored = [(row["merchant_id"], row["event_id"], row["round_id"]) for row in rows(store)]
    assert sorted(stored) == [(MERCHANT, "ev-1", "round-rec-1"), ("merchant-2", "ev-1", "round-b")]


def commit_record(store, record):
    store.state.start_rebuild(
        MERCHANT,
        change_cursor="c0",
        anchor_at=T0,
        history_from=T0 - timedelta(days=1),
        snapshot_to=T0,
        windows=[],
    )
    store.pages.commit_tail_page(
        MERCHANT,
        TailPage(
            records=[record],
            rejected=[],
            next_cursor="c1",
            last_sequence="1",
            projection_as_of=T0,
            position="c0",
        ),
    )


def test_cross_check_counts_rounds_past_the_grace_and_clears_when_they_arrive(clocked):
    store, clock = clocked
    store.events.record_round_event(event("ev-1", "round-a"), received_by="r1")
    store.events.record_round_event(event("ev-1b", "round-a"), received_by="r1")  # a second event
    store.events.record_round_event(event("ev-2", "round-b"), received_by="r1")
    store.events.record_round_event(
        event("ev-3", "round-c", type="SOMETHING_NEW"), received_by="r1"
    )
    store.events.record_round_event(
        event("ev-4", "round-d", merchant_id="other-merchant"), received_by="r1"
    )
    clock.now += timedelta(seconds=300)
    store.events.record_round_event(
        event("ev-5", "round-e"), received_by="r1"
    )  # still in its grace
    clock.now += timedelta(seconds=301)
    assert store.events.rounds_announced_missing(MERCHANT, 600) == ["round-a", "round-b"]
    commit_record(store, make_record("rec-a", round_id="round-a"))
    assert store.events.rounds_announced_missing(MERCHANT, 600) == ["round-b"]
    clock.now += timedelta(seconds=300)
    assert store.events.rounds_announced_missing(MERCHANT, 600) == ["round-b", "round-e"]
    found = {row["round_id"]: row["found_at"] for row in rows(store)}
    assert found["round-a"] is not None
    assert found["round-b"] is None


@pytest.mark.parametrize(
    "warehouse_url",
    [param for param in BACKEND_PARAMS if param.id != "postgres"],  # it notifies instead
    indirect=True,
)
def test_the_poll_feed_names_merchants_other_replicas_received_since_it_started(warehouse):
    store = warehouse
    store.events.record_round_event(event("ev-old"), received_by="r2")  # before the feed: old news
    feed = store.events.round_event_feed("r1", poll_interval=0.01, sleep=lambda _s: None)
    assert not feed.listens
    try:
        assert feed.wait(1.0) == frozenset()
        store.events.record_round_event(event("ev-mine", merchant_id="m-mine"), received_by="r1")
        store.events.record_round_event(event("ev-a"), received_by="r2")
        store.events.record_round_event(event("ev-b"), received_by="r3")
        assert feed.wait(1.0) == frozenset({MERCHANT})
        assert feed.wait(1.0) == frozenset()
    finally:
        feed.close()


@pytest.mark.postgres
@pytest.mark.parametrize("warehouse_url", ["postgres"], indirect=True)
def test_postgres_notifies_the_other_replicas_at_commit(warehouse):
    feed = warehouse.events.round_event_feed("r1")
    assert feed.listens
    try:
        assert feed.wait(0.01) == frozenset()  # connects and LISTENs
        warehouse.events.record_round_event(
            event("ev-mine", merchant_id="m-mine"), received_by="r1"
        )
        warehouse.events.record_round_event(event("ev-a"), received_by="r2")
        warehouse.events.record_round_event(event("ev-b"), received_by="r2")
        assert feed.wait(2.0) == frozenset({MERCHANT})
        feed.wait(0.2)  # the second one, when it came apart from the first
        warehouse.events.record_round_event(event("ev-a"), received_by="r2")  # a repeat: no news
        assert feed.wait(0.2) == frozenset()
    finally:
        feed.close()


@pytest.mark.postgres
@pytest.mark.parametrize("warehouse_url", ["postgres"], indirect=True)
def test_a_quiet_postgres_feed_outlives_the_servers_idle_limit(warehouse):
    """The server ends a lock-style session that sent nothing for ``lease_seconds``: a feed
    that only waited for notifications was ended every ten seconds, and what was announced
    while it reconnected woke nobody.  Here the limit is one second and the feed waits 2.5."""
    feed = round_events_feed.PostgresFeed(warehouse.engine.url, "r1", lease_seconds=1)
    try:
        waited = 0.0
        while waited < 2.5:
            assert feed.wait(0.5) == frozenset()
            waited += 0.5
        warehouse.events.record_round_event(event("ev-late"), received_by="r2")
        assert feed.wait(2.0) == frozenset({MERCHANT})
    finally:
        feed.close()
