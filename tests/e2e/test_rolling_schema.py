"""A rolling upgrade's schema, from this version on: a replica of this version keeps running,
and restarts, on a schema that a newer version took up by additive revisions only (a table
and a nullable ``records`` column here, a test-only revision); a revision that is not additive
is refused at start with one line (exit 2), the schema left as it is."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.cli_runs import recordsync_cli
from support.dbfixtures import BACKEND_PARAMS
from support.fleetcheck import Replica, assert_truth, wait_until_all_held, write_config
from support.next_revision import NEXT_REVISION, apply_next_revision
from support.synccheck import stop_gracefully

from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse
from recordsync.warehouse.migrate import current_revision

pytestmark = pytest.mark.slow


def simulator() -> Simulator:
    return Simulator(
        SimConfig(
            merchant_id="roll",
            secret="rolling-secret-0123456789abcdefghijklmnopq",
            seed=73,
            history_days=0.5,
            rounds_per_day=300,
            live_rate=5.0,
            record_requests=20,
        )
    )


def revision_of(warehouse: Warehouse) -> str | None:
    with warehouse.engine.connect() as conn:
        return current_revision(conn)


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
def test_replicas_sync_and_restart_on_the_next_additive_revision(
    warehouse_url: str, tmp_path: Path
):
    sim = simulator()
    sim.start()
    (merchant_id,) = sim.merchant_ids
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml")
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    apply_next_revision(warehouse_url, tmp_path)
    daemon: Replica | None = None
    try:
        assert revision_of(warehouse) == NEXT_REVISION
        daemon = Replica(config, tmp_path / "first.log")
        sim.start_live()
        assert_truth(warehouse, sim, [merchant_id])
        code, _ = stop_gracefully(daemon.process)
        assert code == 0
        daemon = Replica(config, tmp_path / "second.log")  # a restart on the same schema
        wait_until_all_held(warehouse, [merchant_id], 30.0)
        time.sleep(1.0)
        sim.stop_live()
        assert_truth(warehouse, sim, [merchant_id])
        shown = recordsync_cli(config, "status")
        assert shown.returncode == 0, shown.stderr
        assert revision_of(warehouse) == NEXT_REVISION  # never taken down, nor up
    finally:
        if daemon is not None and daemon.process.poll() is None:
            stop_gracefully(daemon.process)
        sim.stop()
        warehouse.close()


def test_a_revision_that_is_not_additive_is_refused_at_start_with_one_line(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    warehouse = Warehouse.connect(url)
    warehouse.migrate()
    apply_next_revision(url, tmp_path, additive=False)
    sim = simulator()
    sim.start()
    try:
        config = write_config(sim, url, tmp_path / "recordsync.toml")
        for command in (("status",), ("migrate",), ("merchant", "state", "roll", "show")):
            answer = recordsync_cli(config, *command)
            assert answer.returncode == 2, (command, answer.stdout, answer.stderr)
            lines = answer.stderr.strip().splitlines()
            assert len(lines) == 1, (command, lines)
            assert f"revision {NEXT_REVISION}, which this recordsync" in lines[0]
        assert revision_of(warehouse) == NEXT_REVISION
    finally:
        sim.stop()
        warehouse.close()
