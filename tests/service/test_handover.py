"""Hold the lease or hand the work over (``commands.handover``), with a real request book on
SQLite and the fleet scripted (``ScriptedLease``): a command holds a merchant only while no
live daemon is configured with it, gives it back as soon as one appears, takes a followed
request back only after a lease and a tick alone, never takes back a merchant paused while it
followed, ends when its request expires, and cancels it when interrupted unless it carries on
(points 2 and 4)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update
from structlog.testing import capture_logs
from support.clocks import FakeClock

from recordsync.core.errors import RecordSyncError, ShutdownRequestedError
from recordsync.core.stopping import Stopper
from recordsync.service.commands.handover import (
    TAKE_BACK_AFTER,
    DoneThere,
    Handover,
    HeldHere,
    refuse_if_paused,
)
from recordsync.warehouse import RequestKind, RequestState, Warehouse
from recordsync.warehouse.database_clock import read_database_now
from recordsync.warehouse.requests.book import START_WITHIN, expired_reason
from recordsync.warehouse.schema import sync_requests

MERCHANT = "m-handover"
END = datetime(2026, 11, 28, tzinfo=UTC)
START = END - timedelta(days=1)


class ScriptedLease:
    """The fleet as a command sees it: ``free`` whether its lock can be taken, ``daemons``
    the live replicas and what each is configured with."""

    exclusive = False

    def __init__(self, *, free: bool, daemons: dict[str, frozenset[str] | None]) -> None:
        self.free = free
        self.daemons = daemons
        self.tries = 0
        self.released = 0

    def try_hold(self, _merchant_id: str) -> int | None:
        self.tries += 1
        return 7 if self.free else None

    def release(self, _merchant_id: str) -> None:
        self.released += 1

    def live_replicas(self, _stale_after: float) -> dict[str, frozenset[str] | None]:
        return dict(self.daemons)


@pytest.fixture
def store(tmp_path):
    warehouse = Warehouse.connect(f"sqlite:///{tmp_path / 'w.db'}")
    warehouse.migrate()
    try:
        yield warehouse
    finally:
        warehouse.close()


def handover(store, lease, kind=RequestKind.VERIFY, **kwargs):
    key = "backfill:j" if kind is RequestKind.BACKFILL else None
    return Handover(
        kind,
        MERCHANT,
        lease=lease,
        requests=store.requests,
        stopper=kwargs.pop("stopper", Stopper()),
        ask=lambda: store.requests.ask(MERCHANT, kind, START, END, key=key),
        follow_every=0.01,
        watch_every=0.01,
        **kwargs,
    )


def finish_when_asked(store, holder: str = "d1") -> threading.Thread:
    """A holder: starts the first request it sees, then finishes it."""

    def run() -> None:
        for _ in range(500):
            pending = store.requests.unfinished((MERCHANT,))
            if pending:
                store.requests.start(pending[0].id, holder)
                store.requests.finish(pending[0].id, result='{"clean": true}')
                return
            threading.Event().wait(0.01)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_free_and_no_daemon_it_is_held_here(store):
    lease = ScriptedLease(free=True, daemons={"other": frozenset({"m-other"})})
    ran = handover(store, lease).run(lambda held, _work: held)
    assert ran == HeldHere(7)
    assert store.requests.unfinished((MERCHANT,)) == []  # nothing asked of anyone


def test_a_free_lock_is_not_taken_while_a_live_daemon_is_configured_with_the_merchant(store):
    """The lock is free for a moment at every graceful stop and rebalance: not a reason."""
    lease = ScriptedLease(free=True, daemons={"d2": frozenset({MERCHANT})})
    finish_when_asked(store)
    done = handover(store, lease, take_back_after=0).run(
        lambda _held, _work: pytest.fail("run here while a daemon was live")
    )
    assert isinstance(done, DoneThere)
    assert done.request.result == '{"clean": true}'
    assert lease.tries == 0


def test_a_follower_takes_the_lease_back_only_after_a_lease_and_a_tick_alone(store):
    lease = ScriptedLease(free=False, daemons={"d1": frozenset({MERCHANT})})
    clock = FakeClock(0.0)
    looks: list[RequestState] = []

    def progress(request) -> None:
        looks.append(request.state)
        if len(looks) == 3:  # the daemon stopped: it left, and its lock is free
            lease.daemons, lease.free = {}, True
        clock.now += 1.0

    ran = handover(store, lease, clock=clock, progress=progress).run(lambda held, _work: held)
    assert isinstance(ran, HeldHere)
    assert clock.now >= TAKE_BACK_AFTER  # alone that long, not at the first free lock
    assert len(looks) >= TAKE_BACK_AFTER
    assert store.requests.get(1).state is RequestState.FAILED  # type: ignore[union-attr]


def test_held_here_the_rest_is_handed_to_the_daemon_that_appears(store):
    lease = ScriptedLease(free=True, daemons={})
    runs: list[int] = []

    def here(held, work: Stopper):
        runs.append(held.epoch)
        lease.daemons = {"d2": None}  # an older replica that does not say: counts
        finish_when_asked(store, holder="d2")
        work.sleep(30)  # stopped by the watch, as a page loop stops
        pytest.fail("not stopped")

    with capture_logs() as logs:
        done = handover(store, lease).run(here)
    assert isinstance(done, DoneThere)
    assert done.request.holder == "d2"
    assert runs == [7]
    assert lease.released == 1
    assert "verify_handed_back" in [entry["event"] for entry in logs]


def test_a_merchant_paused_while_followed_is_not_taken_back(store):
    lease = ScriptedLease(free=False, daemons={})

    def progress(_request) -> None:
        store.controls.pause(MERCHANT, by="ops", reason="incident")
        lease.free = True

    with pytest.raises(RecordSyncError, match=f"backfill: merchant {MERCHANT} is paused"):
        handover(
            store,
            lease,
            RequestKind.BACKFILL,
            take_back_after=0,
            progress=progress,
            before_taking=lambda: refuse_if_paused(
                store.controls.paused, MERCHANT, what="backfill"
            ),
        ).run(lambda _held, _work: pytest.fail("taken back while paused"))
    assert lease.tries == 1  # the first try only, before it was paused
    [pending] = store.requests.unfinished((MERCHANT,))  # left for a holder once resumed
    assert pending.key == "backfill:j"


def test_a_request_no_holder_starts_in_time_expires_and_the_command_says_why(store):
    lease = ScriptedLease(free=False, daemons={"d1": frozenset({MERCHANT})})

    def progress(request) -> None:  # the limit passes by the database's clock
        with store.engine.begin() as conn:
            ago = read_database_now(conn) - START_WITHIN[RequestKind.RESET] - timedelta(seconds=1)
            conn.execute(
                update(sync_requests)
                .where(sync_requests.c.id == request.id)
                .values(requested_at=ago)
            )

    with pytest.raises(RecordSyncError) as raised:
        handover(store, lease, RequestKind.RESET, progress=progress).run(
            lambda _held, _work: pytest.fail("run here")
        )
    assert str(raised.value) == f"reset request 1 failed: {expired_reason(RequestKind.RESET)}"
    assert store.requests.get(1).state is RequestState.FAILED  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kind", "state", "said"),
    [
        (RequestKind.RESET, RequestState.CANCELLED, "cancelled before any holder started it"),
        (RequestKind.VERIFY, RequestState.CANCELLED, "cancelled before any holder started it"),
        (RequestKind.RESYNC, RequestState.CANCELLED, "cancelled before any holder started it"),
        (RequestKind.BACKFILL, RequestState.PENDING, "carries on with the job (request 1"),
    ],
    ids=["reset", "verify", "resync", "backfill-carries-on"],
)
def test_an_interrupted_follower_cancels_its_request_unless_its_kind_carries_on(
    store, kind, state, said
):
    lease = ScriptedLease(free=False, daemons={"d1": frozenset({MERCHANT})})
    stopper = Stopper()
    following = handover(store, lease, kind, stopper=stopper, progress=lambda _r: stopper.stop())
    with pytest.raises(ShutdownRequestedError):
        following.run(lambda _held, _work: pytest.fail("run here"))
    said_now = following.interrupted()
    assert said_now is not None
    assert said in said_now
    assert store.requests.get(1).state is state  # type: ignore[union-attr]
    if state is RequestState.CANCELLED:
        with pytest.raises(LookupError):  # never started by a holder coming later
            store.requests.start(1, "d1")
