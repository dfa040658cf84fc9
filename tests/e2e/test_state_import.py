"""``recordsync merchant state import`` held against the warehouse it goes into, on the three
backends: a file of another warehouse, a file ahead of a restored warehouse, a history later
than the configured one, an over-long job name: each refused with one line, every table's
checksum unchanged.  Holes in the plan and jobs marked done that this warehouse never read are
imported unread; resumed, the daemon reads them again and the warehouse ends equal to the
truth, ``verify`` over the history exiting 0."""

from __future__ import annotations

import itertools
import json
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from support.checksums import table_checksums
from support.cli_runs import Ran, merchant, recordsync_cli
from support.dbfixtures import BACKEND_PARAMS, fresh_database
from support.fleetcheck import Replica, assert_truth, write_config
from support.synccheck import stop_gracefully

from recordsync.core.state import backfill_job
from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse

pytestmark = pytest.mark.slow

HEARTBEATS = frozenset({"replicas"})


def simulator() -> Simulator:
    return Simulator(
        SimConfig(
            merchant_id="imp",
            secret="import-secret-0123456789abcdefghijklmnopq",
            seed=71,
            history_days=2.5,
            rounds_per_day=240,
            live_rate=6.0,
            record_requests=20,
        )
    )


def state(config: Path, merchant_id: str, *args: str) -> Ran:
    return merchant(config, "state", merchant_id, *args)


def synced_then_stopped(config: Path, warehouse: Warehouse, sim: Simulator, log: Path) -> None:
    """A daemon syncs the merchant to the truth, its tail past live changes it did not have
    before, then stops."""
    (merchant_id,) = sim.merchant_ids
    before = _sequence(warehouse, merchant_id)
    daemon = Replica(config, log)
    try:
        sim.start_live()
        deadline = time.monotonic() + 60
        while _sequence(warehouse, merchant_id) <= before and time.monotonic() < deadline:
            time.sleep(0.2)
        sim.stop_live()
        assert _sequence(warehouse, merchant_id) > before, "the tail read no change"
        assert_truth(warehouse, sim, sim.merchant_ids)
    finally:
        stop_gracefully(daemon.process)


def _sequence(warehouse: Warehouse, merchant_id: str) -> int:
    try:
        found = warehouse.state.load_state(merchant_id)
    except Exception:  # noqa: BLE001 - not migrated yet by the daemon starting
        return -1
    return -1 if found is None or found.last_sequence is None else int(found.last_sequence)


def export(config: Path, merchant_id: str, path: Path) -> dict:
    done = state(config, merchant_id, "export", str(path))
    assert done.returncode == 0, done.stderr
    return json.loads(path.read_text())


def refused(config: Path, merchant_id: str, warehouse: Warehouse, file: Path, why: str) -> None:
    before = table_checksums(warehouse.engine, ignore=HEARTBEATS)
    answer = state(config, merchant_id, "import", str(file))
    assert answer.returncode == 1, answer.stdout
    assert why in answer.stderr
    assert len(answer.stderr.strip().splitlines()) == 1, answer.stderr
    assert "Traceback" not in answer.stderr
    assert table_checksums(warehouse.engine, ignore=HEARTBEATS) == before


def written(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
def test_an_import_never_moves_a_merchant_past_what_this_warehouse_holds(  # noqa: PLR0915
    warehouse_url: str, request: pytest.FixtureRequest, tmp_path: Path
):
    sim = simulator()
    sim.start()
    (merchant_id,) = sim.merchant_ids
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml")
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    kind = request.node.callspec.id
    try:
        synced_then_stopped(config, warehouse, sim, tmp_path / "first.log")
        older = export(config, merchant_id, tmp_path / "older.json")
        synced_then_stopped(config, warehouse, sim, tmp_path / "second.log")
        newer = export(config, merchant_id, tmp_path / "newer.json")
        assert int(newer["state"]["last_sequence"]) > int(older["state"]["last_sequence"])
        assert (tmp_path / "newer.json").stat().st_mode & 0o777 == 0o600
        assert merchant(config, "pause", merchant_id).returncode == 0

        # Into another warehouse (a fresh one): refused, foreign and ahead at once.
        (tmp_path / "other").mkdir()
        with fresh_database(kind, tmp_path / "other") as other_url:
            other = Warehouse.connect(other_url)
            try:
                other.migrate()
                other_config = write_config(sim, other_url, tmp_path / "other.toml")
                assert merchant(other_config, "pause", merchant_id).returncode == 0
                refused(
                    other_config,
                    merchant_id,
                    other,
                    tmp_path / "newer.json",
                    "--accept-foreign imports it all the same",
                )
            finally:
                other.close()

        # This warehouse "restored" to the older state (an older file is behind it: taken),
        # then the newer file is ahead of it: refused.
        back = state(config, merchant_id, "import", str(tmp_path / "older.json"))
        assert back.returncode == 0, back.stderr
        assert "read again" not in back.stdout  # its own windows, all read here
        refused(config, merchant_id, warehouse, tmp_path / "newer.json", "ahead of this warehouse")

        later = json.loads(json.dumps(older))
        later["state"]["history_from"] = (
            datetime.fromisoformat(later["state"]["history_from"]) + timedelta(days=1)
        ).isoformat()
        later["windows"] = [
            w for w in later["windows"] if w["start"] >= later["state"]["history_from"]
        ]
        refused(
            config, merchant_id, warehouse, written(tmp_path / "later.json", later), "is later than"
        )

        long_name = json.loads(json.dumps(older))
        long_name["windows"][0]["job"] = f"backfill:{'x' * 200}/{'y' * 47}"
        refused(
            config,
            merchant_id,
            warehouse,
            written(tmp_path / "long.json", long_name),
            "longer than the 255 the warehouse holds",
        )

        # Holes: the unfinished (here: every window but the first) removed, and a backfill
        # marked done that this warehouse never ran.
        holed = json.loads(json.dumps(older))
        first = holed["windows"][0]
        start = datetime.fromisoformat(first["start"])
        job = backfill_job(start, start + timedelta(hours=6))
        holed["windows"] = [
            first,
            {**first, "job": job, "end": (start + timedelta(hours=6)).isoformat(), "records": 9},
        ]
        taken = state(config, merchant_id, "import", str(written(tmp_path / "holed.json", holed)))
        assert taken.returncode == 0, taken.stderr
        assert "had no window: planned again" in taken.stdout
        assert "1 windows marked done that this warehouse has not read: read again" in taken.stdout
        shown = json.loads(state(config, merchant_id, "show").stdout)
        assert shown["state"]["phase"] == "snapshot"
        rebuild = sorted((w["start"], w["end"]) for w in shown["windows"] if w["job"] == "rebuild")
        assert rebuild[0][0] == older["state"]["history_from"] or rebuild[0][0] <= first["start"]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(rebuild))

        # Rows lost meanwhile (a restored backup lacks them): the re-read brings them back.
        with warehouse.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM records")
        assert merchant(config, "resume", merchant_id).returncode == 0
        daemon = Replica(config, tmp_path / "third.log")
        try:
            assert_truth(warehouse, sim, [merchant_id])
        finally:
            stop_gracefully(daemon.process)
        history = json.loads(state(config, merchant_id, "show").stdout)["state"]
        checked = recordsync_cli(
            config, "verify", "--from", history["history_from"], "--to", history["snapshot_to"]
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    finally:
        sim.stop()
        warehouse.close()
    assert sim.stats().rate_limit_violations == 0
