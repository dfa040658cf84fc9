"""Snapshot workers per merchant on the daemon's shared worker pool."""

from __future__ import annotations

import pytest

from recordsync.service.runtime import fair_concurrency


@pytest.mark.parametrize(
    ("wanted", "threads", "merchants", "workers"),
    [
        (4, 16, 1, 4),  # one merchant: what it asks for
        (4, 16, 4, 4),  # four fit side by side
        (4, 16, 5, 3),
        (4, 16, 10, 1),  # ten: one each, so that every one snapshots at once
        (4, 16, 50, 1),  # more merchants than threads: still one each, in turns
        (2, 16, 0, 2),
    ],
)
def test_each_merchant_gets_at_most_its_share_of_the_worker_threads(
    wanted, threads, merchants, workers
):
    assert fair_concurrency(wanted, threads, merchants) == workers
