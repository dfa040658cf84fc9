"""Pauses and cuts, some inside a write, under three real replicas on PostgreSQL and MariaDB
with live traffic: every takeover within 15 s, never two holders of a merchant at
any sample, no request of a replica for a merchant it lost, no crash, the shares even again,
and every merchant equal to the truth.  The benchmark ``bench/chaos.py`` runs the same driver
(``fleetchaos``) with ten pauses of 20 s and ten cuts of 25 s on each server."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.dbfixtures import SERVER_PARAMS
from support.fleetchaos import Chaos, summary

from recordsync.sim import SimConfig, running_simulator

pytestmark = pytest.mark.slow

TAKEOVER_LIMIT = 15.0
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
        chaos = Chaos(sim, warehouse_url, tmp_path, pause_seconds=14.0, cut_seconds=14.0)
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
