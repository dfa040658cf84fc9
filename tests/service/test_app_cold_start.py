"""Once per process (``service.app``): where the record budget counts its cold start from,
and the collector settled for syncing."""

from __future__ import annotations

import gc

import pytest

from recordsync import PROCESS_STARTED
from recordsync.service import app


def test_the_first_app_of_a_process_counts_from_the_process_start_later_ones_from_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app, "_BUDGET_MADE", [False])
    # The first: nothing this process sent can precede its start.
    assert app._cold_since() == PROCESS_STARTED
    # A later one: an earlier app of this process may have just sent for the merchant.
    assert app._cold_since() is None


def test_the_first_app_of_a_process_settles_the_heap_and_the_young_generation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app, "_HEAP_SETTLED", [False])
    threshold = gc.get_threshold()
    try:
        app._settle_heap()
        assert gc.get_threshold() == (app.YOUNG_GENERATION_THRESHOLD, *threshold[1:])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
