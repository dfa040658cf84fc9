"""Which requests a holder starts (``requested_work.to_start``): every one not running here,
and of several asking for the same work only the oldest, so that two commands asking for one
job at the same instant never run it twice side by side."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from recordsync.service.daemon.requested_work import to_start
from recordsync.warehouse import HolderRequest, RequestKind, RequestState

T0 = datetime(2026, 11, 28, tzinfo=UTC)


def request(request_id: int, kind: RequestKind, key: str | None, merchant: str = "m-1"):
    return HolderRequest(
        id=request_id,
        merchant_id=merchant,
        kind=kind,
        created_from=T0 - timedelta(days=1),
        created_to=T0,
        key=key,
        repair=False,
        state=RequestState.PENDING,
        requested_at=T0,
        started_at=None,
        finished_at=None,
        holder=None,
        error=None,
        result=None,
    )


def test_of_two_requests_for_one_job_only_the_oldest_starts():
    unfinished = [
        request(1, RequestKind.BACKFILL, "backfill:a/b"),
        request(2, RequestKind.BACKFILL, "backfill:a/b"),  # the same job, asked again at once
        request(3, RequestKind.VERIFY, None),
        request(4, RequestKind.VERIFY, None),  # each verify is its own
        request(5, RequestKind.BACKFILL, "backfill:a/b", merchant="m-2"),  # another merchant
        request(6, RequestKind.RESYNC, "backfill:a/b"),  # another kind
    ]
    started = to_start(unfinished, running=lambda _request: False)
    assert [r.id for r in started] == [1, 3, 4, 5, 6]


def test_what_runs_here_already_is_not_started_again_and_its_twin_still_waits():
    unfinished = [
        request(1, RequestKind.BACKFILL, "backfill:a/b"),
        request(2, RequestKind.BACKFILL, "backfill:a/b"),
        request(3, RequestKind.VERIFY, None),
    ]
    started = to_start(unfinished, running=lambda r: r.id in {1, 3})
    assert started == []
    # Once the first is finished it is no longer listed: the second starts, finds it done.
    assert [r.id for r in to_start(unfinished[1:], running=lambda r: r.id == 3)] == [2]
