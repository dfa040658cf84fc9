"""Where a process's record budget counts its cold start from (``commands.merchant_command``)."""

from __future__ import annotations

import pytest

from recordsync import PROCESS_STARTED
from recordsync.service.commands import merchant_command as app


def test_the_first_app_of_a_process_counts_from_the_process_start_later_ones_from_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app, "_BUDGET_MADE", [False])
    # The first: nothing this process sent can precede its start.
    assert app._cold_since() == PROCESS_STARTED
    # A later one: an earlier app of this process may have just sent for the merchant.
    assert app._cold_since() is None
