"""The write sessions' bounds follow from the lease (``timeouts.writes``): whatever a holder
paused in the middle of a page commit left open ends within the lease, at the default and at
a lease of the operator's choosing."""

from __future__ import annotations

import pytest

from recordsync.warehouse import timeouts


def test_the_default_lease_keeps_the_write_sessions_bounds():
    assert timeouts.writes() == timeouts.WRITES
    assert timeouts.writes(timeouts.LEASE_SECONDS) == timeouts.WRITES
    args = timeouts.postgres_connect_args(timeouts.WRITES)
    assert (args["keepalives_idle"], args["keepalives_interval"]) == (5, 2)
    assert args["tcp_user_timeout"] == 10_000


@pytest.mark.parametrize("lease", [2, 5, 6, 10, 11, 60])
def test_a_silent_holder_s_statement_and_its_transaction_end_within_the_lease(lease):
    limits = timeouts.writes(lease)
    # A statement cut off mid-way runs out, then its aborted transaction waits for a rollback.
    assert limits.statement + limits.idle_in_transaction <= lease
    assert limits.client_silence + limits.idle_in_transaction <= lease
    assert min(limits.statement, limits.idle_in_transaction, limits.lock_wait) >= 1  # never off
    args = timeouts.postgres_connect_args(limits)
    assert args["tcp_user_timeout"] == lease * 1000
    given_up = args["keepalives_idle"] + args["keepalives_count"] * args["keepalives_interval"]
    assert given_up <= max(lease, 11)  # about the lease (11 s at the default's 10)
