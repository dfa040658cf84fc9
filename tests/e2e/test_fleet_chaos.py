"""Pauses and cuts, some inside a write, under three real replicas on PostgreSQL and MariaDB
with live traffic: every takeover within the lease and half of it again (15 s at the default
lease), never two holders of a merchant at
any sample, no request of a replica for a merchant it lost, no crash, the shares even again,
and every merchant equal to the truth.  The benchmark ``bench/chaos.py`` runs the same driver
(``fleetchaos``) with ten pauses of 20 s and ten cuts of 25 s on each server."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.dbfixtures import SERVER_PARAMS
from support.fleetchaos import Chaos, summary
from support.fleettiming import QUICK

from recordsync.sim import SimConfig, running_simulator

pytestmark = pytest.mark.slow

TIMING = QUICK  # the replicas' tick and lease (``fleettiming``)
TAKEOVER_LIMIT = 1.5 * TIMING.lease
REBALANCE_LIMIT = 60.0


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_pauses_and_cuts_inside_writes_never_make_two_holders(warehouse_url: str, tmp_path: Path):
    config = SimConfig(
        merchant_id="chaos",
        secret="chaos-secret-0123456789abcdefghijklmnopqrs",
        seed=61,
        history_days=0.3,
        rounds_per_day=300,
        live_rate=5.0,
        record_requests=10,
    ).with_merchants(6)
    with running_simulator(config, live=True) as sim:
        # Each pause or cut lasts as long as a takeover may take: one not done by its end is
        # no takeover at all.
        chaos = Chaos(
            sim,
            warehouse_url,
            tmp_path,
            pause_seconds=TAKEOVER_LIMIT,
            cut_seconds=TAKEOVER_LIMIT,
            timing=TIMING,
        )
        try:
            chaos.start()
            chaos.run([("pause", True), ("cut", False), ("cut", True)])
            chaos.finish()
        finally:
            chaos.stop()
    figures = summary(chaos.events)
    print(f"\nchaos ({chaos.dialect}): {dict(list(figures.items())[:-1])}")  # noqa: T201
    for event in chaos.events:
        assert event.takeover is not None, event
        assert event.takeover <= TAKEOVER_LIMIT, event
        assert event.double_holds == [], event
        assert event.sent_after_lease == 0, event
        assert event.survived, event
        assert event.rebalanced is not None
        assert event.rebalanced <= REBALANCE_LIMIT, event
