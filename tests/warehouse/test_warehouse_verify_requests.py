"""Verify runs handed to the merchant's holder (``verify_requests``, revision 0007): the life of
a request and its findings, on every backend."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from warehouse.warehouse_samples import T0

from recordsync.warehouse import BackfillState, Warehouse

MERCHANT = "m-verify-requests"


def test_a_request_is_pending_then_running_then_done_with_its_findings(warehouse: Warehouse):
    end = T0 + timedelta(days=1)
    first = warehouse.request_verify(MERCHANT, T0, end, repair=True)
    second = warehouse.request_verify(MERCHANT, T0, end, repair=False)
    assert first != second  # each run of the command asks for "now"
    assert [r.id for r in warehouse.pending_verifies(MERCHANT)] == [first, second]
    assert warehouse.pending_verifies("another") == []

    warehouse.start_verify_request(first, "replica-a")
    running = warehouse.verify_request(first)
    assert running is not None
    assert (running.state, running.holder, running.repair) == (
        BackfillState.RUNNING,
        "replica-a",
        True,
    )
    assert (running.created_from, running.created_to) == (T0, end)
    findings = json.dumps({"clean": True, "days": ["x" * 70_000]})  # beyond a 64 KiB TEXT
    warehouse.finish_verify_request(first, result=findings)
    warehouse.finish_verify_request(second, failed="the platform refused the secret")

    done, failed = warehouse.verify_request(first), warehouse.verify_request(second)
    assert done is not None
    assert failed is not None
    assert (done.state, done.result, done.finished) == (BackfillState.DONE, findings, True)
    assert (failed.state, failed.error) == (BackfillState.FAILED, "the platform refused the secret")
    assert warehouse.pending_verifies(MERCHANT) == []
    with pytest.raises(LookupError):
        warehouse.finish_verify_request(first, result="{}")  # finished once
    with pytest.raises(ValueError, match="empty verify range"):
        warehouse.request_verify(MERCHANT, end, T0, repair=False)
