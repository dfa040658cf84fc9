"""Hold the lease or hand the work over (``service.handover``), with a real request book on
SQLite and the lease scripted: a command never takes back the lease of a merchant paused
while it followed its request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from recordsync.core.errors import RecordSyncError
from recordsync.core.stopping import Stopper
from recordsync.service.handover import DoneThere, HeldHere, hold_or_hand_over, refuse_if_paused
from recordsync.warehouse import RequestKind, Warehouse

MERCHANT = "m-handover"
END = datetime(2026, 11, 28, tzinfo=UTC)
START = END - timedelta(days=1)


@pytest.fixture
def store(tmp_path):
    warehouse = Warehouse.connect(f"sqlite:///{tmp_path / 'w.db'}")
    warehouse.migrate()
    try:
        yield warehouse
    finally:
        warehouse.close()


def test_a_merchant_paused_while_followed_is_not_taken_back(store):
    tries: list[str] = []

    def try_hold():
        tries.append("try")
        if len(tries) == 2:  # its holder let go: the merchant was paused meanwhile
            store.controls.pause(MERCHANT, by="ops", reason="incident")

    with pytest.raises(RecordSyncError, match=f"backfill: merchant {MERCHANT} is paused"):
        hold_or_hand_over(
            RequestKind.BACKFILL,
            try_hold=try_hold,
            ask=lambda: store.requests.ask(MERCHANT, RequestKind.BACKFILL, START, END, key="j"),
            requests=store.requests,
            stopper=Stopper(),
            before_taking=lambda: refuse_if_paused(
                store.controls.paused, MERCHANT, what="backfill"
            ),
            follow_every=0.01,
        )
    assert tries == ["try", "try"]  # never a third: refused before taking the lease
    [pending] = store.requests.unfinished((MERCHANT,))  # left for a holder once resumed
    assert pending.key == "j"


def test_free_it_is_held_here_and_done_at_the_holder_it_is_followed(store):
    held = hold_or_hand_over(
        RequestKind.VERIFY,
        try_hold=lambda: 7,
        ask=lambda: pytest.fail("nothing is asked of a holder when the lease is free"),
        requests=store.requests,
        stopper=Stopper(),
    )
    assert held == HeldHere(7)
    request_id = store.requests.ask(MERCHANT, RequestKind.VERIFY, START, END)
    store.requests.start(request_id, "replica-a")
    store.requests.finish(request_id, result='{"clean": true}')
    done = hold_or_hand_over(
        RequestKind.VERIFY,
        try_hold=lambda: None,
        ask=lambda: request_id,
        requests=store.requests,
        stopper=Stopper(),
    )
    assert isinstance(done, DoneThere)
    assert done.request.result == '{"clean": true}'
