"""The work commands hand to a merchant's holder (``sync_requests``, revision 0012), on every
backend: one life for every kind, the rows of the two tables before it copied by the upgrade,
and what a previous version's command asks there answered with a reason."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from alembic import command
from sqlalchemy import insert, select, update
from support.warehouse_samples import T0

from recordsync.warehouse import RequestKind, RequestState, Warehouse
from recordsync.warehouse.database_clock import read_database_now
from recordsync.warehouse.migrate import _config
from recordsync.warehouse.requests import book
from recordsync.warehouse.requests.book import (
    CANCELLED_REASON,
    FOLLOWED_WITHIN,
    START_WITHIN,
    expired_reason,
    unfollowed_reason,
)
from recordsync.warehouse.requests.previous import REASON
from recordsync.warehouse.schema import backfill_requests, sync_requests, verify_requests

M1, M2 = "m-requests-1", "m-requests-2"
START, END = T0 - timedelta(days=7), T0
JOB = "backfill:2024-02-23/2024-03-01"
BACKFILL, VERIFY, RESET = RequestKind.BACKFILL, RequestKind.VERIFY, RequestKind.RESET
RESYNC = RequestKind.RESYNC


def test_a_request_goes_pending_running_done(warehouse: Warehouse):
    requests = warehouse.requests
    request_id = requests.ask(M1, BACKFILL, START, END, key=JOB)
    assert requests.ask(M1, BACKFILL, START, END, key=JOB) == request_id  # followed, not doubled
    pending = requests.get(request_id)
    assert pending is not None
    assert (pending.merchant_id, pending.kind, pending.created_from, pending.created_to) == (
        M1,
        BACKFILL,
        START,
        END,
    )
    assert (pending.key, pending.repair, pending.state, pending.holder, pending.started_at) == (
        JOB,
        False,
        RequestState.PENDING,
        None,
        None,
    )
    assert requests.unfinished((M1,)) == [pending]
    assert requests.unfinished((M2,)) == []

    requests.start(request_id, "replica-a")
    running = requests.get(request_id)
    assert running is not None
    assert (running.state, running.holder) == (RequestState.RUNNING, "replica-a")
    assert requests.unfinished((M1,)) == [running]  # a new holder takes it up
    requests.start(request_id, "replica-b")  # taken over
    assert requests.get(request_id).holder == "replica-b"  # type: ignore[union-attr]

    requests.finish(request_id)
    done = requests.get(request_id)
    assert done is not None
    assert (done.state, done.finished, done.error, done.result) == (
        RequestState.DONE,
        True,
        None,
        None,
    )
    assert done.requested_at <= done.started_at <= done.finished_at  # type: ignore[operator]
    assert requests.unfinished((M1,)) == []
    with pytest.raises(LookupError):
        requests.finish(request_id)
    with pytest.raises(LookupError):
        requests.start(request_id, "replica-a")
    assert requests.ask(M1, BACKFILL, START, END, key=JOB) != request_id  # asked anew


def test_a_verify_is_asked_anew_each_time_and_hands_back_its_findings(warehouse: Warehouse):
    requests = warehouse.requests
    first = requests.ask(M1, VERIFY, START, END, repair=True)
    second = requests.ask(M1, VERIFY, START, END)
    assert first != second  # each run of the command asks for "now"
    requests.start(first, "replica-a")
    findings = json.dumps({"clean": True, "days": ["x" * 70_000]})  # beyond a 64 KiB TEXT
    requests.finish(first, result=findings)
    requests.finish(second, failed="the platform refused the secret")
    done, failed = requests.get(first), requests.get(second)
    assert done is not None
    assert failed is not None
    assert (done.kind, done.repair, done.state, done.result) == (
        VERIFY,
        True,
        RequestState.DONE,
        findings,
    )
    assert (failed.state, failed.finished, failed.error) == (
        RequestState.FAILED,
        True,
        "the platform refused the secret",
    )


def test_requests_of_every_kind_are_listed_oldest_first_in_one_query(warehouse: Warehouse):
    requests = warehouse.requests
    first = requests.ask(M1, BACKFILL, START, END, key=JOB)
    other = requests.ask(M2, VERIFY, START, END)
    second = requests.ask(M1, VERIFY, START - timedelta(days=7), START)
    assert [request.id for request in requests.unfinished((M1,))] == [first, second]
    both = requests.unfinished((M1, M2))
    assert [(request.merchant_id, request.kind, request.id) for request in both] == [
        (M1, BACKFILL, first),
        (M2, VERIFY, other),
        (M1, VERIFY, second),
    ]
    assert requests.unfinished(()) == []


def test_unknown_or_empty_requests_are_refused(warehouse: Warehouse):
    requests = warehouse.requests
    assert requests.get(12345) is None
    with pytest.raises(LookupError):
        requests.start(12345, "replica-a")
    with pytest.raises(ValueError, match="empty backfill range"):
        requests.ask(M1, BACKFILL, END, START, key=JOB)
    with pytest.raises(ValueError, match="empty verify range"):
        requests.ask(M1, VERIFY, END, START)


def test_a_kind_this_version_does_not_know_is_left_to_the_version_that_asked(
    warehouse: Warehouse,
):
    """A newer version's request (a kind added by the control plane) beside this version's
    holders during a rolling upgrade: not listed, so the watcher never fails on it."""
    known = warehouse.requests.ask(M1, VERIFY, START, END)
    with warehouse.engine.begin() as conn:
        conn.execute(
            insert(sync_requests).values(
                merchant_id=M1,
                kind="from-the-future",
                created_from=START,
                created_to=END,
                repair=False,
                state="pending",
                requested_at=T0,
            )
        )
    assert [request.id for request in warehouse.requests.unfinished((M1,))] == [known]


# -- the tables before revision 0012 ------------------------------------------------------------


def _previous_rows(conn) -> None:
    """What the previous version had asked: a pending backfill, a running verify, a done one."""
    conn.execute(
        insert(backfill_requests).values(
            merchant_id=M1,
            created_from=START,
            created_to=END,
            job=JOB,
            state="pending",
            requested_at=T0,
        )
    )
    conn.execute(
        insert(verify_requests).values(
            merchant_id=M2,
            created_from=START,
            created_to=END,
            repair=True,
            state="running",
            holder="replica-old",
            requested_at=T0 + timedelta(seconds=1),
            started_at=T0 + timedelta(seconds=2),
        )
    )
    conn.execute(
        insert(verify_requests).values(
            merchant_id=M1,
            created_from=START,
            created_to=END,
            repair=False,
            state="done",
            requested_at=T0 - timedelta(hours=1),
            finished_at=T0 - timedelta(minutes=59),
            result='{"clean": true}',
        )
    )


def test_the_upgrade_copies_the_requests_of_both_previous_tables(warehouse_url):
    """Pending and running requests at the upgrade are run by the new version's holder: a
    backfill's job becomes its key, a verify keeps its repair and result; ids follow the
    order they were asked in.  Run again (a revision killed after its copy), nothing doubles."""
    store = Warehouse.connect(warehouse_url)
    try:
        config = _config()
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "0011")
            _previous_rows(conn)
        store.migrate()
        copied = store.requests.unfinished((M1, M2))
        assert [(r.merchant_id, r.kind, r.key, r.repair, r.state, r.holder) for r in copied] == [
            (M1, BACKFILL, JOB, False, RequestState.PENDING, None),
            (M2, VERIFY, None, True, RequestState.RUNNING, "replica-old"),
        ]
        assert (copied[0].created_from, copied[0].created_to) == (START, END)
        assert copied[0].id < copied[1].id
        done = store.requests.get(copied[0].id - 1)  # asked first, an hour before
        assert done is not None
        assert (done.kind, done.state, done.result) == (
            VERIFY,
            RequestState.DONE,
            '{"clean": true}',
        )

        with store.engine.begin() as conn:  # the copy run a second time
            config.attributes["connection"] = conn
            command.stamp(config, "0011", purge=True)
        store.migrate()
        assert [r.id for r in store.requests.unfinished((M1, M2))] == [r.id for r in copied]
    finally:
        store.close()


def test_what_a_previous_version_asks_is_failed_with_the_reason(warehouse: Warehouse):
    """A previous version's command, during a rolling upgrade, follows its row in the old
    tables: the new holder fails it, and the command ends with this reason, not a hang."""
    with warehouse.engine.begin() as conn:
        _previous_rows(conn)
    assert warehouse.requests.fail_previous((M2,)) == 1  # only the merchants named
    assert warehouse.requests.fail_previous((M1, M2)) == 1
    assert warehouse.requests.fail_previous((M1, M2)) == 0  # a look, nothing to fail
    with warehouse.engine.connect() as conn:
        rows = [
            *conn.execute(select(backfill_requests.c.state, backfill_requests.c.error)),
            *conn.execute(
                select(verify_requests.c.state, verify_requests.c.error).order_by(
                    verify_requests.c.id
                )
            ),
        ]
    assert [tuple(row) for row in rows] == [
        ("failed", REASON),
        ("failed", REASON),
        ("done", None),  # finished before: left as it was
    ]


# -- requests that do not outlive their purpose ------------------------------------


def _asked_ago(warehouse: Warehouse, request_id: int, seconds: float) -> None:
    """Move a request's ``requested_at`` back by ``seconds`` of the database's clock."""
    with warehouse.engine.begin() as conn:
        now = read_database_now(conn)
        conn.execute(
            update(sync_requests)
            .where(sync_requests.c.id == request_id)
            .values(requested_at=now - timedelta(seconds=seconds))
        )


def test_a_pending_request_past_its_limit_expires_as_failed_and_never_starts(
    warehouse: Warehouse,
):
    requests = warehouse.requests
    limit = START_WITHIN[BACKFILL].total_seconds()
    old = requests.ask(M1, BACKFILL, START, END, key=JOB)
    young = requests.ask(M1, VERIFY, START, END)
    reset = requests.ask(M1, RESET, START, END)
    running = requests.ask(M2, VERIFY, START, END)
    requests.start(running, "replica-a")
    _asked_ago(warehouse, old, limit + 1)
    _asked_ago(warehouse, young, limit - 10)  # within its limit: left pending
    _asked_ago(warehouse, reset, START_WITHIN[RESET].total_seconds() + 1)  # a reset waits least
    _asked_ago(warehouse, running, limit * 10)  # started: a running request never expires

    with pytest.raises(LookupError):  # refused in the same statement, before any expiry
        requests.start(old, "replica-a")
    assert [request.id for request in requests.expire((M1, M2))] == [old, reset]
    assert requests.expire((M1, M2)) == []  # a look, nothing more to fail
    for request_id, kind in [(old, BACKFILL), (reset, RESET)]:
        expired = requests.get(request_id)
        assert expired is not None
        assert (expired.state, expired.error) == (RequestState.FAILED, expired_reason(kind))
        with pytest.raises(LookupError):
            requests.start(request_id, "replica-a")
    assert [r.id for r in requests.unfinished((M1, M2))] == [young, running]
    requests.start(young, "replica-a")  # within its limit: started
    requests.start(running, "replica-b")  # taken over, however old
    assert requests.ask(M1, BACKFILL, START, END, key=JOB) not in {old, young}  # asked anew


def test_a_cancelled_request_is_never_started_or_listed_and_says_what_it_was(
    warehouse: Warehouse,
):
    requests = warehouse.requests
    pending = requests.ask(M1, RESET, START, END)
    running = requests.ask(M1, VERIFY, START, END, key="verify:x")
    requests.start(running, "replica-a")
    assert requests.cancel(pending) is RequestState.PENDING
    assert requests.cancel(running) is RequestState.RUNNING
    for request_id in (pending, running):
        cancelled = requests.get(request_id)
        assert cancelled is not None
        assert (cancelled.state, cancelled.finished) == (RequestState.CANCELLED, True)
        assert cancelled.error == CANCELLED_REASON
        with pytest.raises(LookupError):
            requests.start(request_id, "replica-b")
        with pytest.raises(LookupError):
            requests.finish(request_id, result="{}")  # a holder finishing late changes nothing
        with pytest.raises(LookupError):
            requests.cancel(request_id)
    assert requests.unfinished((M1,)) == []
    assert requests.ask(M1, VERIFY, START, END, key="verify:x") != running  # asked anew
    done = requests.ask(M2, VERIFY, START, END)
    requests.start(done, "replica-a")
    requests.finish(done, result="{}")
    with pytest.raises(LookupError):  # finished before the interruption: left as it was
        requests.cancel(done)
    assert requests.get(done).state is RequestState.DONE  # type: ignore[union-attr]


def test_a_running_request_keeps_a_note_of_its_progress_for_the_next_holder(
    warehouse: Warehouse,
):
    requests = warehouse.requests
    request_id = requests.ask(M1, RESET, START, END)
    with pytest.raises(LookupError):  # pending: nothing to note yet
        requests.note(request_id, '{"rebuilds_before": 1}')
    requests.start(request_id, "replica-a")
    requests.note(request_id, '{"rebuilds_before": 1}')
    [taken_up] = requests.unfinished((M1,))  # what a holder restarted, or the next, reads
    assert taken_up.result == '{"rebuilds_before": 1}'
    requests.start(request_id, "replica-b")
    assert requests.get(request_id).result == '{"rebuilds_before": 1}'  # type: ignore[union-attr]
    requests.finish(request_id, result='{"rebuilds": 2}')
    with pytest.raises(LookupError):
        requests.note(request_id, "{}")
    assert requests.get(request_id).result == '{"rebuilds": 2}'  # type: ignore[union-attr]


def _followed_ago(warehouse: Warehouse, request_id: int, seconds: float | None) -> None:
    """Move a request's ``followed_at`` back by ``seconds`` of the database's clock (None: as
    an earlier version asks, without it)."""
    with warehouse.engine.begin() as conn:
        now = read_database_now(conn)
        followed = None if seconds is None else now - timedelta(seconds=seconds)
        conn.execute(
            update(sync_requests)
            .where(sync_requests.c.id == request_id)
            .values(followed_at=followed)
        )


def test_a_request_whose_command_is_gone_never_starts_unless_its_kind_carries_on(
    warehouse: Warehouse,
):
    """A command killed while its request waits (a reset above all) cancels nothing: once it
    has not looked within ``FOLLOWED_WITHIN`` its request fails, "its command is gone", by
    the holder's look before it starts anything or by ``start`` itself; a backfill carries
    on; a request asked by an earlier version (no ``followed_at``) keeps its start limit."""
    requests = warehouse.requests
    gone = FOLLOWED_WITHIN.total_seconds() + 1
    reset = requests.ask(M1, RESET, START, END)
    verify = requests.ask(M1, VERIFY, START, END)
    resync = requests.ask(M1, RESYNC, START, END, key="resync:x")
    backfill = requests.ask(M1, BACKFILL, START, END, key=JOB)
    followed = requests.ask(M1, VERIFY, START, END)
    earlier = requests.ask(M2, RESET, START, END)
    asked = requests.get(reset)
    assert asked is not None
    assert asked.followed_at == asked.requested_at  # followed from the asking
    for request_id in (reset, verify, resync, backfill):
        _followed_ago(warehouse, request_id, gone)
    _followed_ago(warehouse, followed, gone)
    looked = requests.follow(followed)  # its command looks again: followed
    assert looked is not None
    assert looked.state is RequestState.PENDING
    assert looked.followed_at > looked.requested_at  # type: ignore[operator]
    _followed_ago(warehouse, earlier, None)

    with pytest.raises(LookupError, match="its command is gone"):  # refused in one statement
        requests.start(reset, "replica-a")
    expired = requests.expire((M1, M2))
    assert [(r.id, r.state, r.error) for r in expired] == [
        (verify, RequestState.FAILED, unfollowed_reason()),
        (resync, RequestState.FAILED, unfollowed_reason()),
    ]
    for request_id in (reset, verify, resync):
        failed = requests.get(request_id)
        assert failed is not None
        assert (failed.state, failed.error) == (RequestState.FAILED, unfollowed_reason())
        with pytest.raises(LookupError):
            requests.start(request_id, "replica-a")
    assert [r.id for r in requests.unfinished((M1, M2))] == [backfill, followed, earlier]
    requests.start(backfill, "replica-a")  # carries on for whoever asks next
    requests.start(followed, "replica-a")
    requests.start(earlier, "replica-a")  # an earlier version's: its start limit only

    # Running, then its command gone and its holder too: not taken up again by the next.
    _followed_ago(warehouse, followed, gone)
    with pytest.raises(LookupError, match="its command is gone"):
        requests.start(followed, "replica-b")
    assert requests.get(followed).error == unfollowed_reason()  # type: ignore[union-attr]
    requests.start(earlier, "replica-b")  # NULL: taken up as before
    _followed_ago(warehouse, backfill, gone * 100)
    requests.start(backfill, "replica-b")


def test_asking_again_for_the_same_job_follows_it_anew(warehouse: Warehouse):
    """A command run again for a job (or handing the rest back) follows the first request:
    noted as followed at the asking, so that no holder reads it as abandoned meanwhile."""
    requests = warehouse.requests
    first = requests.ask(M1, RESYNC, START, END, key="resync:x")
    _followed_ago(warehouse, first, FOLLOWED_WITHIN.total_seconds() + 1)
    assert requests.ask(M1, RESYNC, START, END, key="resync:x") == first
    requests.start(first, "replica-a")
    assert requests.expire((M1,)) == []


def test_a_follower_looking_again_after_the_holder_read_it_keeps_its_request(
    warehouse: Warehouse,
):
    """The holder read a request as unfollowed, then its command looked (a slow look, not a
    dead command): the expiry leaves it pending."""
    requests = warehouse.requests
    request_id = requests.ask(M1, RESET, START, END)
    _followed_ago(warehouse, request_id, FOLLOWED_WITHIN.total_seconds() + 1)
    stale = requests.get(request_id)
    assert stale is not None
    requests.follow(request_id)
    with warehouse.engine.begin() as conn:
        assert book.expire(conn, [stale]) == []
    requests.start(request_id, "replica-a")
