"""The requests commands hand to a merchant's holder (``sync_requests``), of every kind.

While a daemon holds a merchant, ``recordsync backfill`` and ``recordsync verify`` do not read
the platform themselves: they insert a request (``ask``), the holder runs it inside its own
budget (``start``, the work fenced by its epoch, then ``finish``), and the command follows
the row until it is finished (``get``).  A request a holder started and did not finish (it
died, or handed the merchant over) stays ``running`` and is listed again (``unfinished``):
the next holder takes it up, a backfill from its job's windows, a verify from the start.

A move applies only to an unfinished row (``LookupError`` otherwise), so a request finished,
failed by the command that took it back, or cancelled, is never started again.  Times are the
database's.

Requests do not outlive their purpose:

- a request nobody started within its kind's limit (``START_WITHIN``, by the database's clock
  from ``requested_at``) expires: failed with a reason, by whoever looks first (the holder
  before it starts anything, the following command at each look), and ``start`` refuses it
  in the same statement, so an expired request is never run however late a holder comes.  A
  reset's limit is short: one whose command is gone (killed) is never run later;
- a command interrupted cancels its request (``cancel``), unless its kind carries on (a
  backfill: ``CARRIES_ON``, ``commands.handover``); a holder running it stops at its next look;
- a command killed (SIGKILL, a closed terminal, a lost host) cancels nothing, so the command
  notes each look at its request (``follow``: ``followed_at``, by the database's clock), and a
  request of a kind that does not carry on whose follower has not looked within
  ``FOLLOWED_WITHIN`` is never started (nor taken up again): failed, "its command is gone",
  by the holder before it starts anything and by ``start`` in the same statement.  So a reset
  never runs without a follower.  A request asked by an earlier version has no
  ``followed_at`` (NULL: its commands do not say): only its ``START_WITHIN`` applies to it;
- a running request keeps a note of its progress in ``result`` (``note``: a reset's rebuild
  count before it), so that a holder restarted, or the next one, carries it on rather than
  losing it with a flag in memory.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import ColumnElement, Connection, Row, insert, or_, select, true, update

from recordsync.warehouse.database_clock import database_now, read_database_now
from recordsync.warehouse.schema import sync_requests
from recordsync.warehouse.values import HolderRequest, RequestKind, RequestState

UNFINISHED = (RequestState.PENDING.value, RequestState.RUNNING.value)

# How long a request may wait for a holder to start it.  A holder that holds the merchant
# starts a request within its poll (2 s); a hand-over between replicas (a rollout, a restart,
# a rebalance) takes a few seconds more.  A reset is a surprise for whoever did not ask for it
# (a re-anchor and the whole history read again), so it waits least.
START_WITHIN: Final[Mapping[RequestKind, timedelta]] = {
    RequestKind.BACKFILL: timedelta(seconds=60),
    RequestKind.RESYNC: timedelta(seconds=60),
    RequestKind.VERIFY: timedelta(seconds=60),
    RequestKind.RESET: timedelta(seconds=20),
}
CANCELLED_REASON: Final = "cancelled: the command that asked for it was interrupted"
# Kinds run for whoever asks next even once their command is gone (a backfill's job is the
# range's, finished once); every other kind needs its command following (``FOLLOWED_WITHIN``).
CARRIES_ON: Final = frozenset({RequestKind.BACKFILL})
# A following command looks at its request every second (``commands.handover.FOLLOW_EVERY``);
# a request whose follower has not looked for five of those looks is no longer followed: its
# command is gone (killed, or its host cut off from the warehouse).  Five, not one: a look
# may wait a few seconds behind a lock or a slow statement without the command being gone.
FOLLOWED_WITHIN: Final = timedelta(seconds=5)


def unfollowed_reason() -> str:
    """Why a request whose command is gone failed (what a command stalled that long prints)."""
    limit = FOLLOWED_WITHIN.total_seconds()
    return (
        f"its command is gone: it had not looked at the request for over {limit:.0f} s "
        "(killed, or cut off from the warehouse); it will not run"
    )


def expired_reason(kind: RequestKind) -> str:
    """Why an expired request failed (what its command prints)."""
    limit = START_WITHIN[kind].total_seconds()
    return (
        f"no holder started it within {limit:.0f} s of being asked (no daemon holding the "
        "merchant took it up); it will not run"
    )


def ask(
    conn: Connection,
    merchant_id: str,
    kind: RequestKind,
    start: datetime,
    end: datetime,
    *,
    key: str | None = None,
    repair: bool = False,
) -> int:
    """The id of a new pending request, followed from now (``follow``); with ``key``, of the
    merchant's unfinished request of that kind and key when there is one (a command
    interrupted and run again follows the first request instead of queueing the same work
    twice)."""
    if not start < end:
        raise ValueError(f"empty {kind.value} range [{start}, {end})")
    if key is not None:
        known = conn.execute(
            select(sync_requests.c.id)
            .where(
                sync_requests.c.merchant_id == merchant_id,
                sync_requests.c.state.in_(UNFINISHED),
                sync_requests.c.kind == kind.value,
                sync_requests.c.key == key,
            )
            .order_by(sync_requests.c.id)
            .limit(1)
        ).scalar_one_or_none()
        if known is not None:
            follow(conn, int(known))  # followed from now, as a new one is
            return int(known)
    inserted = conn.execute(
        insert(sync_requests).values(
            merchant_id=merchant_id,
            kind=kind.value,
            created_from=start,
            created_to=end,
            key=key,
            repair=repair,
            state=RequestState.PENDING.value,
            requested_at=database_now(),
            followed_at=database_now(),
        )
    )
    primary_key = inserted.inserted_primary_key
    assert primary_key is not None
    return int(primary_key[0])


def unfinished(conn: Connection, merchant_ids: Collection[str]) -> list[HolderRequest]:
    """The merchants' pending and running requests of every kind, oldest first (one query for
    all of them)."""
    query = (
        select(sync_requests)
        .where(
            sync_requests.c.merchant_id.in_(merchant_ids),
            sync_requests.c.state.in_(UNFINISHED),
            # A newer version's kind (during a rolling upgrade) is left to its own holders.
            sync_requests.c.kind.in_([kind.value for kind in RequestKind]),
        )
        .order_by(sync_requests.c.id)
    )
    return [_request(row) for row in conn.execute(query)]


def get(conn: Connection, request_id: int) -> HolderRequest | None:
    row = conn.execute(select(sync_requests).where(sync_requests.c.id == request_id))
    found = row.one_or_none()
    return None if found is None else _request(found)


def follow(conn: Connection, request_id: int) -> HolderRequest | None:
    """Note a look of the command following the request (``followed_at``, while it is
    unfinished: ``FOLLOWED_WITHIN``); the request as it stands."""
    conn.execute(
        update(sync_requests)
        .where(sync_requests.c.id == request_id, sync_requests.c.state.in_(UNFINISHED))
        .values(followed_at=database_now())
    )
    return get(conn, request_id)


def start(conn: Connection, request_id: int, holder: str) -> bool:
    """Mark an unfinished request running under ``holder`` (again, after a takeover); a
    pending one only within its kind's ``START_WITHIN`` (``LookupError`` past it: expired).
    One of a kind that does not carry on only while its command follows it: otherwise it is
    failed here with ``unfollowed_reason`` and False is returned (the caller commits that,
    then refuses)."""
    kind = conn.execute(
        select(sync_requests.c.kind).where(sync_requests.c.id == request_id)
    ).scalar_one_or_none()
    if kind is None or kind not in set(RequestKind):
        raise LookupError(f"no unfinished request {request_id}")
    now = read_database_now(conn)
    asked_since = now - START_WITHIN[RequestKind(kind)]
    followed = _followed_since(RequestKind(kind), now - FOLLOWED_WITHIN)
    moved = conn.execute(
        update(sync_requests)
        .where(
            sync_requests.c.id == request_id,
            followed,
            or_(
                sync_requests.c.state == RequestState.RUNNING.value,
                (sync_requests.c.state == RequestState.PENDING.value)
                & (sync_requests.c.requested_at >= asked_since),
            ),
        )
        .values(state=RequestState.RUNNING.value, holder=holder, started_at=database_now())
    )
    if moved.rowcount == 1:
        return True
    gone = conn.execute(
        update(sync_requests)
        .where(
            sync_requests.c.id == request_id,
            sync_requests.c.state.in_(UNFINISHED),
            ~followed,
        )
        .values(
            state=RequestState.FAILED.value, error=unfollowed_reason(), finished_at=database_now()
        )
    )
    if gone.rowcount == 1:
        return False
    raise LookupError(f"no unfinished request {request_id} younger than its limit")


def _followed_since(kind: RequestKind, since: datetime) -> ColumnElement[bool]:
    """Followed enough to start: a kind that carries on always; another while its command
    looked since ``since``, or when it does not say (NULL: an earlier version's request)."""
    if kind in CARRIES_ON:
        return true()
    return or_(sync_requests.c.followed_at.is_(None), sync_requests.c.followed_at >= since)


def unfollowed(request: HolderRequest, now: datetime) -> bool:
    """Whether ``request`` needs a follower and its command has not looked within
    ``FOLLOWED_WITHIN`` of ``now`` (the database's clock)."""
    return (
        request.kind not in CARRIES_ON
        and request.followed_at is not None
        and now - request.followed_at > FOLLOWED_WITHIN
    )


def overdue(conn: Connection, merchant_ids: Collection[str]) -> list[HolderRequest]:
    """The merchants' pending requests older than their kind's ``START_WITHIN``, or no longer
    followed (``unfollowed``), by the database's clock (a read: ``expire`` writes only when
    there are some, since on SQLite a write transaction takes the database's write lock even
    when it changes nothing)."""
    pending = conn.execute(
        select(sync_requests).where(
            sync_requests.c.merchant_id.in_(merchant_ids),
            sync_requests.c.state == RequestState.PENDING.value,
            sync_requests.c.kind.in_([kind.value for kind in RequestKind]),
        )
    ).all()
    if not pending:
        return []
    now = read_database_now(conn)
    return [
        request
        for request in map(_request, pending)
        if now - request.requested_at > START_WITHIN[request.kind] or unfollowed(request, now)
    ]


def expire(conn: Connection, overdue: Collection[HolderRequest]) -> list[HolderRequest]:
    """Fail the ``overdue`` requests still pending, with the reason (past its limit, or its
    command gone); those failed, as they are now.  One whose command looked again since it
    was read as unfollowed is left pending, unless it is past its limit too."""
    expired: list[HolderRequest] = []
    now = read_database_now(conn)
    for request in overdue:
        late = now - request.requested_at > START_WITHIN[request.kind]
        still: ColumnElement[bool] = true()
        if not late:  # unfollowed when read
            if request.followed_at is None:
                continue
            still = sync_requests.c.followed_at <= request.followed_at
        moved = conn.execute(
            update(sync_requests)
            .where(
                sync_requests.c.id == request.id,
                sync_requests.c.state == RequestState.PENDING.value,
                still,
            )
            .values(
                state=RequestState.FAILED.value,
                error=expired_reason(request.kind) if late else unfollowed_reason(),
                finished_at=database_now(),
            )
        )
        if moved.rowcount == 1:
            reason = expired_reason(request.kind) if late else unfollowed_reason()
            expired.append(replace(request, state=RequestState.FAILED, error=reason))
    return expired


def cancel(conn: Connection, request_id: int) -> RequestState:
    """Cancel an unfinished request (its command was interrupted); the state it had, pending
    or running (a holder running it stops at its next look).  ``LookupError`` when it is
    finished already."""
    state = conn.execute(
        select(sync_requests.c.state).where(sync_requests.c.id == request_id)
    ).scalar_one_or_none()
    _move(
        conn,
        request_id,
        state=RequestState.CANCELLED.value,
        error=CANCELLED_REASON,
        finished_at=database_now(),
    )
    return RequestState(str(state))


def note(conn: Connection, request_id: int, progress: str) -> None:
    """Keep ``progress`` (JSON) in a running request's ``result`` until it is finished: what a
    holder taking it up again needs to carry it on."""
    moved = conn.execute(
        update(sync_requests)
        .where(
            sync_requests.c.id == request_id,
            sync_requests.c.state == RequestState.RUNNING.value,
        )
        .values(result=progress)
    )
    if moved.rowcount != 1:
        raise LookupError(f"no running request {request_id}")


def finish(
    conn: Connection, request_id: int, *, failed: str | None = None, result: str | None = None
) -> None:
    """Mark an unfinished request done (with its ``result``), or failed with the reason (shown
    to the requester, so never a secret)."""
    _move(
        conn,
        request_id,
        state=(RequestState.DONE if failed is None else RequestState.FAILED).value,
        error=failed,
        result=result,
        finished_at=database_now(),
    )


def _move(conn: Connection, request_id: int, **values: Any) -> None:
    moved = conn.execute(
        update(sync_requests)
        .where(sync_requests.c.id == request_id, sync_requests.c.state.in_(UNFINISHED))
        .values(values)
    )
    if moved.rowcount != 1:
        raise LookupError(f"no unfinished request {request_id}")


def _request(row: Row[Any]) -> HolderRequest:
    return HolderRequest(
        id=int(row.id),
        merchant_id=row.merchant_id,
        kind=RequestKind(row.kind),
        created_from=row.created_from,
        created_to=row.created_to,
        key=row.key,
        repair=bool(row.repair),
        state=RequestState(row.state),
        requested_at=row.requested_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        holder=row.holder,
        error=row.error,
        result=row.result,
        followed_at=row.followed_at,
    )
