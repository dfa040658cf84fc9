"""A rolling upgrade from the previous release of this repository (checked out from git, run as
a real process) to this version, on the production backends.

While the previous release's daemon holds the merchant on its schema (0013), this version's
control commands (pause, reset, resync, state import) each end at once with one line and a
non-zero exit, having migrated nothing: the old daemon runs on, holding its merchant.  Once
`recordsync migrate` has taken the schema up (additively), the old daemon still runs, and
this version refuses to pause it or hand it work it cannot do, by name.  A daemon of this
version then takes over when the old one stops, and the warehouse equals the truth.

From the last release (schema 0014, which runs on additive revisions above its head), the
upgrade is a plain rolling one: `recordsync migrate` takes the schema to this version's head
while the old daemon syncs, the old daemon goes on committing pages on the new schema, and
this version's daemon takes over from it with nothing lost."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from support.cli_runs import Ran, merchant, recordsync_cli
from support.dbfixtures import SERVER_PARAMS
from support.fleetcheck import Replica, assert_truth, holders, write_config
from support.previous_release import (
    LAST_RELEASE,
    LAST_REVISION,
    PREVIOUS_RELEASE,
    PREVIOUS_REVISION,
    previous_release,
    start_previous,
)
from support.synccheck import stop_gracefully

from recordsync.core.state import StoredState
from recordsync.sim import SimConfig, Simulator
from recordsync.sync.state_document import to_document
from recordsync.warehouse import Warehouse
from recordsync.warehouse.migrate import current_revision, head_revision

pytestmark = pytest.mark.slow

DEADLINE = 20.0  # seconds any refused command may take, the platform's capabilities included


def simulator() -> Simulator:
    return Simulator(
        SimConfig(
            merchant_id="upg",
            secret="upgrade-secret-0123456789abcdefghijklmnopq",
            seed=79,
            history_days=0.3,
            rounds_per_day=300,
            live_rate=4.0,
            record_requests=20,
        )
    )


def revision(url: str) -> str | None:
    warehouse = Warehouse.connect(url)
    try:
        with warehouse.engine.connect() as conn:
            return current_revision(conn)
    finally:
        warehouse.close()


def timed(run) -> tuple[Ran, float]:
    started = time.monotonic()
    answer = run()
    return answer, time.monotonic() - started


def wait_held_by(url: str, merchant_id: str, replica: str | None, timeout: float) -> str:
    """The replica holding ``merchant_id`` once one (``replica``: one other than it) does."""
    warehouse = Warehouse.connect(url)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                holder = holders(warehouse).get(merchant_id)
            except Exception:  # noqa: BLE001 - the old daemon has not migrated yet
                holder = None
            if holder is not None and holder != replica:
                return holder
            time.sleep(0.25)
    finally:
        warehouse.close()
    raise AssertionError(f"{merchant_id} not held (but by {replica}) within {timeout} s")


def rows(warehouse: Warehouse) -> int:
    with warehouse.engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT COUNT(*) FROM records").scalar_one())


def refused_in_one_line(answer: Ran, took: float, *, code: int, says: str) -> None:
    assert answer.returncode == code, (answer.stdout, answer.stderr)
    lines = answer.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert says in lines[0], lines[0]
    assert "Traceback" not in answer.stderr
    assert took < DEADLINE


@dataclass
class Upgrade:
    """A warehouse whose merchant an older release's daemon holds, live traffic on."""

    url: str
    sim: Simulator
    merchant_id: str
    config: Path
    warehouse: Warehouse
    old: subprocess.Popen[bytes]
    old_id: str
    logs: Path
    new: Replica | None = None

    def take_over(self) -> None:
        """This version's daemon joins, the old one stops, the new one holds the merchant and
        the warehouse equals the truth."""
        self.new = Replica(self.config, self.logs / "new.log")
        time.sleep(2.0)
        code, _ = stop_gracefully(self.old)
        assert code == 0
        wait_held_by(self.url, self.merchant_id, self.old_id, 30.0)
        time.sleep(1.0)
        self.sim.stop_live()
        assert_truth(self.warehouse, self.sim, [self.merchant_id])


@contextmanager
def held_by_release(url: str, tmp_path: Path, commit: str, schema: str) -> Iterator[Upgrade]:
    """The release at ``commit`` syncing a merchant on ``url`` at its own ``schema``."""
    release = previous_release(tmp_path, commit)
    sim = simulator()
    sim.start()
    (merchant_id,) = sim.merchant_ids
    config = write_config(sim, url, tmp_path / "recordsync.toml")
    old = start_previous(release, tmp_path / "old.log", "--config", str(config), "run")
    warehouse = Warehouse.connect(url)
    upgrade: Upgrade | None = None
    try:
        old_id = wait_held_by(url, merchant_id, None, 60.0)
        assert revision(url) == schema
        sim.start_live()
        upgrade = Upgrade(url, sim, merchant_id, config, warehouse, old, old_id, tmp_path)
        yield upgrade
    finally:
        if old.poll() is None:
            stop_gracefully(old)
        if upgrade is not None and upgrade.new is not None and upgrade.new.process.poll() is None:
            stop_gracefully(upgrade.new.process)
        sim.stop()
        warehouse.close()
    assert sim.stats().rate_limit_violations == 0
    assert "Traceback" not in (tmp_path / "old.log").read_text()


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_a_rolling_upgrade_from_the_previous_release(warehouse_url: str, tmp_path: Path):
    with held_by_release(warehouse_url, tmp_path, PREVIOUS_RELEASE, PREVIOUS_REVISION) as up:
        config, merchant_id, old, warehouse = up.config, up.merchant_id, up.old, up.warehouse
        start = (up.sim.now() - timedelta(hours=2)).isoformat()
        end = up.sim.now().isoformat()
        state_file = tmp_path / "state.json"
        empty = StoredState(state=None, windows=[], warehouse_id=None)
        state_file.write_text(json.dumps(to_document(merchant_id, empty, epoch=None)))
        for command in (
            ("pause", merchant_id),
            ("resume", merchant_id),
            ("reset", merchant_id, "--yes"),
            ("resync", merchant_id, "--from", start, "--to", end),
            ("state", merchant_id, "show"),
            ("state", merchant_id, "import", str(state_file)),
        ):
            answer, took = timed(lambda command=command: merchant(config, *command))
            refused_in_one_line(answer, took, code=2, says="run `recordsync migrate`")
        assert revision(warehouse_url) == PREVIOUS_REVISION  # nothing migrated it
        assert old.poll() is None

        migrated = recordsync_cli(config, "migrate")
        assert migrated.returncode == 0, migrated.stderr
        assert revision(warehouse_url) == head_revision()
        time.sleep(2.5)  # a tick of the old daemon on the new schema
        assert old.poll() is None
        assert holders(warehouse).get(merchant_id) == up.old_id

        answer, took = timed(lambda: merchant(config, "pause", merchant_id))
        refused_in_one_line(answer, took, code=1, says="does not obey a pause: nothing was paused")
        for command, kind in (
            (("resync", merchant_id, "--from", start, "--to", end), "resync"),
            (("reset", merchant_id, "--yes"), "reset"),
        ):
            answer, took = timed(lambda command=command: merchant(config, *command))
            refused_in_one_line(
                answer, took, code=1, says=f"does not take {kind} requests: nothing was asked"
            )
        with warehouse.engine.connect() as conn:
            asked = conn.exec_driver_sql("SELECT COUNT(*) FROM sync_requests").scalar_one()
        assert asked == 0
        assert old.poll() is None

        up.take_over()
        paused = merchant(config, "pause", merchant_id)  # this version obeys it
        assert paused.returncode == 0, paused.stderr
        assert merchant(config, "resume", merchant_id).returncode == 0


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_the_last_release_syncs_on_through_the_migration_to_this_schema(
    warehouse_url: str, tmp_path: Path
):
    with held_by_release(warehouse_url, tmp_path, LAST_RELEASE, LAST_REVISION) as up:
        migrated = recordsync_cli(up.config, "migrate")
        assert migrated.returncode == 0, migrated.stderr
        assert revision(warehouse_url) == head_revision()
        # The old daemon commits the live rounds' pages on the new schema, still the holder.
        before = rows(up.warehouse)
        deadline = time.monotonic() + 20.0
        while rows(up.warehouse) <= before:
            assert time.monotonic() < deadline, "the old daemon wrote nothing after the migration"
            assert up.old.poll() is None, (tmp_path / "old.log").read_text()[-2000:]
            time.sleep(0.25)
        assert holders(up.warehouse).get(up.merchant_id) == up.old_id
        up.take_over()
