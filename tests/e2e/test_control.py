"""``recordsync merchant pause|resume|state|resync|reset`` and ``--dry-run`` as an operator runs
them (the CLI's main, beside daemons in processes of their own), with and without daemons, on
the three backends.

A paused merchant is held and synced by no replica, across a kill of its holder; the
simulator sees no request for it while it is paused; resumed, a replica syncs it again within
15 s, and the warehouse ends equal to the truth."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete
from support.checksums import table_checksums
from support.cli_runs import Ran, merchant, recordsync_cli
from support.dbfixtures import BACKEND_PARAMS, SERVER_PARAMS
from support.fleetcheck import (
    Replica,
    assert_truth,
    events,
    holders,
    wait_until_all_held,
    write_config,
)
from support.fleettiming import QUICK
from support.synccheck import stop_gracefully

from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import Warehouse
from recordsync.warehouse.schema import records

pytestmark = pytest.mark.slow

# The daemons' and the commands' tick and lease (``fleettiming``): the waits for a tick below
# are written in it.
TIMING = QUICK
FLEET = TIMING.toml_lines()
RESUMED_WITHIN = 15.0  # the command's own start, and a tick
HEARTBEATS = frozenset({"replicas"})  # a running daemon writes its heartbeat there by itself


def status(config: Path) -> dict[str, dict[str, object]]:
    done = recordsync_cli(config, "status", "--json")
    assert done.returncode == 0, done.stderr
    return {item["merchant_id"]: item for item in json.loads(done.stdout)["merchants"]}


def simulator(merchants: int, seed: int) -> Simulator:
    return Simulator(
        SimConfig(
            merchant_id="ctl",
            secret="control-secret-0123456789abcdefghijklmnopq",
            seed=seed,
            history_days=0.2,
            rounds_per_day=300,
            live_rate=3.0,
            record_requests=10,
        ).with_merchants(merchants)
    )


def requests_of(sim: Simulator, merchant_id: str) -> int:
    return sim.stats(merchant_id).total_requests


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
def test_pause_and_resume_with_no_daemon_running(warehouse_url: str, tmp_path: Path):
    sim = simulator(2, seed=61)
    sim.start()
    try:
        config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml", *FLEET)
        first, second = sim.merchant_ids
        unmigrated = merchant(config, "pause", first)  # a control command never migrates
        assert unmigrated.returncode == 2
        assert "run `recordsync migrate`" in unmigrated.stderr
        assert recordsync_cli(config, "migrate").returncode == 0
        paused = merchant(config, "pause", first, "--reason", "contract on hold")
        assert paused.returncode == 0, paused.stderr
        assert paused.stdout.startswith(f"merchant {first} paused (since ")
        assert "contract on hold): no replica syncs it (nobody held it)" in paused.stdout
        assert "Traceback" not in paused.stderr
        shown = status(config)
        assert shown[first]["paused"]["reason"] == "contract on hold"  # type: ignore[index]
        assert shown[first]["holder"] is None
        assert shown[second]["paused"] is None

        again = merchant(config, "pause", first)  # twice: still paused, since the first time
        assert again.returncode == 0
        assert status(config)[first]["paused"]["since"] == shown[first]["paused"]["since"]  # type: ignore[index]

        resumed = merchant(config, "resume", first)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip().endswith(
            "no daemon configured with it is running; the next one to start syncs it"
        )
        assert status(config)[first]["paused"] is None
        assert merchant(config, "resume", first).stdout.strip() == (
            f"merchant {first} was not paused: nothing to do"
        )
        unknown = merchant(config, "pause", "no-such-merchant")
        assert unknown.returncode == 2
        assert unknown.stderr.startswith("recordsync: configuration: ")
        assert len(unknown.stderr.strip().splitlines()) == 1
    finally:
        sim.stop()


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
def test_a_daemon_lets_a_paused_merchant_go_and_takes_it_again_once_resumed(
    warehouse_url: str, tmp_path: Path
):
    sim = simulator(2, seed=62)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml", *FLEET)
    first, second = sim.merchant_ids
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    daemon = Replica(config, tmp_path / "daemon.log")
    try:
        sim.start_live()
        wait_until_all_held(warehouse, [first, second], 60.0)
        paused = merchant(config, "pause", first, "--reason", "INC-42")
        assert paused.returncode == 0, paused.stdout + paused.stderr
        assert "no replica syncs it (its holder let go after" in paused.stdout
        before = requests_of(sim, first)
        time.sleep(2 * TIMING.tick)  # two fleet ticks: the pause holds
        assert requests_of(sim, first) == before  # not one request while paused
        assert first not in holders(warehouse)
        assert second in holders(warehouse)  # the other merchant goes on
        logged = [e for e in events(daemon.log) if e.get("event") == "merchant_paused"]
        assert [e["merchant_id"] for e in logged] == [first]
        if warehouse_url.startswith("sqlite"):  # a restart: the pause is the warehouse's row,
            stop_gracefully(daemon.process)  # read the same way on every backend
            daemon = Replica(config, tmp_path / "restarted.log")
            wait_until_all_held(warehouse, [second], 60.0)
            time.sleep(2 * TIMING.tick)  # its next ticks take nothing paused
            assert first not in holders(warehouse)
            assert requests_of(sim, first) == before

        started = time.monotonic()
        resumed = merchant(config, "resume", first)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert " syncs it again after " in resumed.stdout
        assert time.monotonic() - started < RESUMED_WITHIN
        assert first in holders(warehouse)
        sim.stop_live()
        assert_truth(warehouse, sim, [first, second])
    finally:
        stop_gracefully(daemon.process)
        sim.stop()
        warehouse.close()
    assert sim.stats().rate_limit_violations == 0


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS[:1], indirect=True)
def test_a_pause_outlasts_the_death_of_its_holder_among_three_replicas(
    warehouse_url: str, tmp_path: Path
):
    """Three replicas on PostgreSQL, three merchants.  One is paused, then the replica that
    held it is killed (kill -9): its other merchant is taken over, the paused one by nobody,
    and the simulator sees no request for it until it is resumed; resumed, it is synced again
    within 15 s and every merchant ends equal to the truth."""
    sim = simulator(3, seed=63)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml", *FLEET)
    merchants = list(sim.merchant_ids)
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    replicas: list[Replica] = []
    try:
        sim.start_live()
        replicas = [Replica(config, tmp_path / f"r{n}.log") for n in range(3)]
        wait_until_all_held(warehouse, merchants, 60.0)
        target = merchants[0]
        holder_id = holders(warehouse)[target]
        paused = merchant(config, "pause", target, "--reason", "platform incident")
        assert paused.returncode == 0, paused.stdout + paused.stderr
        before = requests_of(sim, target)
        holder = next(
            replica
            for replica in replicas
            if any(e.get("replica_id") == holder_id for e in events(replica.log))
        )
        holder.kill()
        others = [m for m in merchants if m != target]
        wait_until_all_held(warehouse, others, 30.0)
        # The dead replica goes stale; the shares settle without the paused one at a tick.
        time.sleep(TIMING.stale_after + TIMING.tick)
        assert target not in holders(warehouse)
        assert requests_of(sim, target) == before

        started = time.monotonic()
        resumed = merchant(config, "resume", target)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert time.monotonic() - started < RESUMED_WITHIN
        assert target in holders(warehouse)
        sim.stop_live()
        assert_truth(warehouse, sim, merchants)
    finally:
        for replica in replicas:
            if replica.process.poll() is None:
                stop_gracefully(replica.process)
        sim.stop()
        warehouse.close()
    assert sim.stats().rate_limit_violations == 0


# -- merchant state show|export|import ----------------------------------------------------------


def state_command(config: Path, merchant_id: str, *args: str) -> Ran:
    return merchant(config, "state", merchant_id, *args)


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
def test_a_state_exported_is_imported_back_only_into_a_paused_merchant(
    warehouse_url: str, tmp_path: Path
):
    """Export with no daemon running; then, a daemon running: refused while not paused, and
    for a tampered or malformed file (nothing written: every table's checksum unchanged);
    imported once paused (a new lease epoch); resumed, the daemon syncs on from it and the
    warehouse ends equal to the truth."""
    sim = simulator(1, seed=64)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml", *FLEET)
    (merchant_id,) = sim.merchant_ids
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    daemon: Replica | None = None
    try:
        daemon = Replica(config, tmp_path / "first.log")
        assert_truth(warehouse, sim, [merchant_id])
        stop_gracefully(daemon.process)
        exported = tmp_path / "state.json"
        done = state_command(config, merchant_id, "export", str(exported))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"merchant {merchant_id}: state exported to {exported} (")
        document = json.loads(exported.read_text())
        assert document["state"]["phase"] == "tailing"
        assert document["windows"]
        shown = state_command(config, merchant_id, "show")
        assert json.loads(shown.stdout) == document

        daemon = Replica(config, tmp_path / "second.log")
        wait_until_all_held(warehouse, [merchant_id], 60.0)
        sim.start_live()
        refused = state_command(config, merchant_id, "import", str(exported))
        assert refused.returncode == 1
        assert f"merchant {merchant_id} is not paused" in refused.stderr
        assert merchant(config, "pause", merchant_id).returncode == 0
        _refused_writing_nothing(config, merchant_id, document, warehouse, tmp_path)

        imported = state_command(config, merchant_id, "import", str(exported))
        assert imported.returncode == 0, imported.stderr
        assert "under lease epoch" in imported.stdout
        again = json.loads(state_command(config, merchant_id, "show").stdout)
        assert again["state"] == document["state"]
        assert again["windows"] == document["windows"]
        assert again["epoch"] > document["epoch"]
        assert merchant(config, "resume", merchant_id).returncode == 0
        sim.stop_live()
        assert_truth(warehouse, sim, [merchant_id])
    finally:
        if daemon is not None and daemon.process.poll() is None:
            stop_gracefully(daemon.process)
        sim.stop()
        warehouse.close()
    assert sim.stats().rate_limit_violations == 0


def _refused_writing_nothing(
    config: Path, merchant_id: str, document: dict[str, object], warehouse: Warehouse, tmp: Path
) -> None:
    """Another merchant's state, a window past the anchor, a file that is not JSON: each
    refused in one line naming why, and every table's checksum unchanged (but the daemon's
    own heartbeat row)."""
    before = table_checksums(warehouse.engine, ignore=HEARTBEATS)
    for name, content, reason in [
        ("other.json", {**document, "merchant_id": "m-other"}, "the state of merchant"),
        ("future.json", _past_the_anchor(document), "past the anchor"),
        ("broken.json", None, "not JSON"),
    ]:
        bad = tmp / name
        bad.write_text("{" if content is None else json.dumps(content))
        answer = state_command(config, merchant_id, "import", str(bad))
        assert answer.returncode == 1, answer.stdout
        assert reason in answer.stderr
        assert len(answer.stderr.strip().splitlines()) == 1
        assert "Traceback" not in answer.stderr
    assert table_checksums(warehouse.engine, ignore=HEARTBEATS) == before  # nothing written


def _past_the_anchor(document: dict[str, object]) -> dict[str, object]:
    """The document with one rebuild window moved past the snapshot plan's end."""
    tampered = json.loads(json.dumps(document))
    window = tampered["windows"][-1]
    end = datetime.fromisoformat(tampered["state"]["snapshot_to"])
    window["start"] = (end - timedelta(hours=1)).isoformat()
    window["end"] = (end + timedelta(hours=1)).isoformat()
    window["job"] = "rebuild"
    return tampered


# -- merchant resync ----------------------------------------------------------------------------


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
def test_a_resync_reads_a_range_again_here_or_at_the_holder_under_live_traffic(
    warehouse_url: str, tmp_path: Path
):
    """With no daemon the command reads the range itself; with one syncing under live traffic,
    rows of the range lost from the warehouse come back through the holder (the command
    follows it), nothing else is emptied, and the warehouse ends equal to the truth with no
    rate-limit violation.  A paused merchant is refused."""
    sim = simulator(1, seed=65)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml", *FLEET)
    (merchant_id,) = sim.merchant_ids
    start = (sim.now() - timedelta(hours=4)).replace(minute=0, second=0, microsecond=0)
    end = start + timedelta(hours=2)
    in_range = {
        record_id
        for record_id, record in sim.truth(merchant_id).items()
        if start.isoformat() <= record["created_at"] < end.isoformat()
    }
    assert in_range
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    daemon: Replica | None = None
    try:
        alone = resync(config, merchant_id, start, end)
        assert alone.returncode == 0, alone.stdout[-2000:]
        assert in_range <= set(warehouse.records.fetch_records(merchant_id))  # read here

        daemon = Replica(config, tmp_path / "daemon.log")
        sim.start_live()
        wait_until_all_held(warehouse, [merchant_id], 60.0)
        with warehouse.engine.begin() as conn:  # the rows an operator distrusts
            conn.execute(delete(records).where(records.c.record_id.in_(sorted(in_range))))
        handed = resync(config, merchant_id, start, end)
        assert handed.returncode == 0, handed.stdout[-2000:]
        assert '"resync_handed_over"' in handed.stdout
        assert in_range <= set(warehouse.records.fetch_records(merchant_id))
        sim.stop_live()
        assert_truth(warehouse, sim, [merchant_id])
        holder_events = [e["event"] for e in events(daemon.log)]
        assert "requested_resync_finished" in holder_events

        assert merchant(config, "pause", merchant_id).returncode == 0
        refused = resync(config, merchant_id, start, end)
        assert refused.returncode == 1
        assert f"resync: merchant {merchant_id} is paused since" in refused.stderr
    finally:
        if daemon is not None and daemon.process.poll() is None:
            stop_gracefully(daemon.process)
        sim.stop()
        warehouse.close()
    assert sim.stats().rate_limit_violations == 0


def resync(config: Path, merchant_id: str, start: datetime, end: datetime) -> Ran:
    span = ("--from", start.isoformat(), "--to", end.isoformat())
    return merchant(config, "resync", merchant_id, *span)


# -- merchant reset -----------------------------------------------------------------------------


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
def test_a_reset_reanchors_at_the_holder_or_here_and_keeps_every_row(
    warehouse_url: str, tmp_path: Path
):
    """Under a daemon with live traffic, the reset is handed to it: a new anchor, a rebuild
    read beside the tail, not one row lost meanwhile, and the warehouse equal to the truth.
    With no daemon the command re-anchors itself and the next daemon reads the plan.  Without
    --yes nothing happens (exit 2)."""
    sim = simulator(1, seed=66)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml", *FLEET)
    (merchant_id,) = sim.merchant_ids
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    daemon: Replica | None = None
    try:
        daemon = Replica(config, tmp_path / "first.log")
        assert_truth(warehouse, sim, [merchant_id])
        unconfirmed = reset(config, merchant_id)
        assert unconfirmed.returncode == 2
        assert "add --yes" in unconfirmed.stderr
        before = warehouse.state.load_state(merchant_id)
        assert before is not None
        stored = set(warehouse.records.fetch_records(merchant_id))

        sim.start_live()
        handed = reset(config, merchant_id, "--yes")
        assert handed.returncode == 0, handed.stdout[-2000:] + handed.stderr
        assert "planned by replica " in handed.stdout
        assert "the rows are kept" in handed.stdout
        assert stored <= set(warehouse.records.fetch_records(merchant_id))  # not one row lost
        after = warehouse.state.load_state(merchant_id)
        assert after is not None
        assert after.rebuilds == before.rebuilds + 1
        assert after.anchor_at > before.anchor_at
        assert "requested_reset_finished" in [e["event"] for e in events(daemon.log)]
        sim.stop_live()
        assert_truth(warehouse, sim, [merchant_id])

        stop_gracefully(daemon.process)
        here = reset(config, merchant_id, "--yes")
        assert here.returncode == 0, here.stdout[-2000:] + here.stderr
        assert "planned here (no daemon holds it)" in here.stdout
        again = warehouse.state.load_state(merchant_id)
        assert again is not None
        assert again.rebuilds == before.rebuilds + 2
        daemon = Replica(config, tmp_path / "second.log")
        assert_truth(warehouse, sim, [merchant_id])
    finally:
        if daemon is not None and daemon.process.poll() is None:
            stop_gracefully(daemon.process)
        sim.stop()
        warehouse.close()
    assert sim.stats().rate_limit_violations == 0


def reset(config: Path, merchant_id: str, *args: str) -> Ran:
    return merchant(config, "reset", merchant_id, *args)


# -- --dry-run ----------------------------------------------------------------------------------


@pytest.mark.parametrize("warehouse_url", BACKEND_PARAMS, indirect=True)
def test_dry_runs_print_the_plan_and_write_nothing(warehouse_url: str, tmp_path: Path):
    """backfill, verify --repair, merchant resync and merchant reset with --dry-run: each prints
    its windows, the requests and the time at the merchant's limit, the platform sees no read
    of records or changes, and every table's checksum is the same after as before."""
    sim = simulator(1, seed=67)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml", *FLEET)
    (merchant_id,) = sim.merchant_ids
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    try:
        daemon = Replica(config, tmp_path / "daemon.log")
        assert_truth(warehouse, sim, [merchant_id])
        stop_gracefully(daemon.process)
        start = (sim.now() - timedelta(hours=4)).replace(minute=0, second=0, microsecond=0)
        window = ("--from", start.isoformat(), "--to", (start + timedelta(hours=3)).isoformat())
        before = table_checksums(warehouse.engine)
        reads = sim.stats(merchant_id).count("records") + sim.stats(merchant_id).count(
            "record-changes"
        )
        assert reads > 0  # the daemon read them: the names count what they should
        for args in [
            ("backfill", *window, "--dry-run"),
            ("verify", *window, "--repair", "--dry-run"),
            ("merchant", "resync", merchant_id, *window, "--dry-run"),
            ("merchant", "reset", merchant_id, "--dry-run"),
        ]:
            done = recordsync_cli(config, *args)
            assert done.returncode == 0, (args, done.stdout, done.stderr)
            shown = done.stdout.strip().splitlines()
            assert shown[0].startswith("dry run: "), shown
            assert "windows, ~" in shown[-2]
            assert "requests" in shown[-2]
            assert "at the merchant's limit of " in shown[-2]
            assert shown[-1].endswith("and nothing was written")
        after = sim.stats(merchant_id).count("records") + sim.stats(merchant_id).count(
            "record-changes"
        )
        assert after == reads  # capabilities only
        assert table_checksums(warehouse.engine) == before
    finally:
        sim.stop()
        warehouse.close()


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS[:1], indirect=True)
def test_resync_reset_and_a_state_round_trip_among_three_replicas(
    warehouse_url: str, tmp_path: Path
):
    """Three replicas on PostgreSQL under live traffic: a resync and a reset are each run by
    the holder of their merchant, a third merchant's state makes an export, pause, import,
    resume round trip; every merchant ends equal to the truth, no rate-limit violation."""
    sim = simulator(3, seed=68)
    sim.start()
    config = write_config(sim, warehouse_url, tmp_path / "recordsync.toml", *FLEET)
    first, second, third = sim.merchant_ids
    warehouse = Warehouse.connect(warehouse_url)
    warehouse.migrate()
    replicas: list[Replica] = []
    try:
        replicas = [Replica(config, tmp_path / f"r{n}.log") for n in range(3)]
        wait_until_all_held(warehouse, [first, second, third], 60.0)
        assert_truth(warehouse, sim, [first, second, third])
        sim.start_live()
        start = (sim.now() - timedelta(hours=4)).replace(minute=0, second=0, microsecond=0)
        resynced = resync(config, first, start, start + timedelta(hours=2))
        assert resynced.returncode == 0, resynced.stdout[-2000:]
        assert '"resync_handed_over"' in resynced.stdout
        was = warehouse.state.load_state(second)
        done = reset(config, second, "--yes")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr
        assert "planned by replica " in done.stdout
        now = warehouse.state.load_state(second)
        assert was is not None
        assert now is not None
        assert now.rebuilds == was.rebuilds + 1

        kept = tmp_path / "third.json"
        assert state_command(config, third, "export", str(kept)).returncode == 0
        assert merchant(config, "pause", third).returncode == 0
        imported = state_command(config, third, "import", str(kept))
        assert imported.returncode == 0, imported.stderr
        assert merchant(config, "resume", third).returncode == 0
        sim.stop_live()
        assert_truth(warehouse, sim, [first, second, third])
        ran = {str(e["event"]) for replica in replicas for e in events(replica.log)}
        assert {"requested_resync_finished", "requested_reset_finished"} <= ran
    finally:
        for replica in replicas:
            if replica.process.poll() is None:
                stop_gracefully(replica.process)
        sim.stop()
        warehouse.close()
    assert sim.stats().rate_limit_violations == 0
