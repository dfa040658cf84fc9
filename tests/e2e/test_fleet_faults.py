"""The fleet under what real clusters do: a holder cut off from the database in the
middle of a fenced write, through the tests' fault-injecting proxy (``netfaults``).

The holder's every connection to the database goes through the proxy; the standby connects
directly.  The proxy freezes the moment the holder's commit has sent its fence check (the
row's shared lock is then held by a transaction that will never move again, as with a
SIGSTOP or a host cut off without a reset).  The server must end that transaction and the
holder's lock session within the lease, the standby take the merchant within the lease and
half of it again (15 s at the default lease), and the
old holder, once the network heals, store nothing and send no request for the merchant.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from support.dbfixtures import SERVER_PARAMS
from support.fleetchaos import INSIDE_A_WRITE
from support.fleetcheck import (
    Replica,
    assert_truth,
    events,
    holders,
    wait_until_all_held,
    write_config,
)
from support.fleettiming import QUICK
from support.netfaults import FaultProxy
from support.synccheck import stop_gracefully, wait_for_log

from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse

pytestmark = pytest.mark.slow

TIMING = QUICK  # the replicas' tick and lease (``fleettiming``)
FLEET = TIMING.toml_lines()
TAKEOVER_LIMIT = 1.5 * TIMING.lease


@pytest.fixture
def simulator() -> Iterator[Simulator]:
    sim = Simulator(
        SimConfig(
            merchant_id="cut",
            secret="cut-secret-0123456789abcdefghijklmnopqrstu",
            seed=53,
            history_days=0.5,
            rounds_per_day=300,
            live_rate=10.0,
            record_requests=10,
        ).with_merchants(1)
    )
    sim.start()
    sim.start_live()
    try:
        yield sim
    finally:
        sim.stop()


def through(proxy: FaultProxy, url: str) -> str:
    return make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(False)


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_a_holder_cut_off_inside_a_fenced_write_is_taken_over_and_stores_nothing(
    warehouse_url: str, tmp_path: Path, simulator: Simulator
):
    sim = simulator
    (merchant,) = sim.merchant_ids
    parsed = make_url(warehouse_url)
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    replicas: list[Replica] = []
    with FaultProxy((parsed.host or "127.0.0.1", parsed.port or 0)) as proxy:
        cut_config = write_config(sim, through(proxy, warehouse_url), tmp_path / "cut.toml", *FLEET)
        direct_config = write_config(sim, warehouse_url, tmp_path / "direct.toml", *FLEET)
        try:
            holder = Replica(cut_config, tmp_path / "holder.log")
            replicas.append(holder)
            wait_until_all_held(warehouse, [merchant], 30)
            standby = Replica(direct_config, tmp_path / "standby.log")
            replicas.append(standby)
            wait_for_log(standby.log, '"lease_waiting"')  # it stands by; the holder syncs on
            epoch = warehouse.lease_epoch(merchant)
            proxy.freeze_when(*INSIDE_A_WRITE[warehouse.engine.dialect.name])
            deadline = time.monotonic() + 10
            while proxy.frozen_at is None:
                assert time.monotonic() < deadline, "the holder sent no fenced write"
                time.sleep(0.05)
            frozen_at = proxy.frozen_at
            deadline = frozen_at + 60
            while warehouse.lease_epoch(merchant) == epoch:
                assert time.monotonic() < deadline, "nobody took the cut-off holder's merchant"
                time.sleep(0.1)
            takeover = time.monotonic() - frozen_at
            assert holders(warehouse).get(merchant) is not None
            requests_before = sim.stats(merchant).total_requests
            time.sleep(2.0)
            proxy.heal()
            deadline = time.monotonic() + 30
            while not any(e["event"] == "merchant_sync_stopped" for e in events(holder.log)):
                assert time.monotonic() < deadline, "the healed holder never stopped syncing"
                time.sleep(0.25)
            assert holder.process.poll() is None, "the healed holder crashed"
            sim.stop_live()
            assert_truth(warehouse, sim, [merchant])
            total_requests = sim.stats(merchant).total_requests - requests_before
        finally:
            for replica in replicas:
                if replica.process.poll() is None:
                    stop_gracefully(replica.process)
            warehouse.close()
    print(f"takeover of a holder cut off inside a write: {takeover:.1f} s")  # noqa: T201
    assert takeover <= TAKEOVER_LIMIT
    assert sim.stats(merchant).rate_limit_violations == 0
    assert total_requests > 0  # the new holder syncs
