"""``recordsync verify`` against the simulator over loopback HTTP, on all three warehouses:
a clean range, each kind of difference planted by hand, ``--repair`` back to the platform's
truth, the json and csv formats, and a run beside a daemon holding the merchant."""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal

import pytest
from msgspec.structs import replace
from prometheus_client import CollectorRegistry
from sqlalchemy import delete, update
from structlog.testing import capture_logs
from support.synccheck import (
    differences,
    environment_for,
    settings_for,
    start_daemon,
    stop_gracefully,
    wait_for_log,
)

from recordsync import cli
from recordsync.core.state import Window
from recordsync.core.times import MILLISECOND, ceil_ms, floor_ms, format_time
from recordsync.metrics import record_verify_run
from recordsync.platform.parsing import parse_record
from recordsync.service.commands.verify import run_verify
from recordsync.sim import SimConfig, Simulator
from recordsync.sim.testing import running_simulator
from recordsync.warehouse import RequestState, Warehouse
from recordsync.warehouse.schema import records

MERCHANT = "m-verify"
SECRET = "verify-secret-0123456789abcdefghijklmnopqrs"


def sim_config(**overrides: object) -> SimConfig:
    values: dict[str, object] = {
        "merchant_id": MERCHANT,
        "secret": SECRET,
        "seed": 13,
        "history_days": 1.5,
        "rounds_per_day": 200,
        "record_requests": 20,
        "record_seconds": 1,
    }
    values.update(overrides)
    return SimConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(sim_config())
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


def whole_history(sim: Simulator) -> Window:
    """From before the simulator's first record to just after its clock's now."""
    now = sim.now()
    return Window(
        floor_ms(now - timedelta(days=sim.config.history_days + 0.5)), ceil_ms(now) + MILLISECOND
    )


def synced(sim: Simulator, url: str) -> Window:
    """The simulator's truth stored at ``url`` (through the guarded upsert, without the HTTP
    of a backfill: faster, and the same rows); the range that covers it."""
    store = Warehouse.connect(url)
    try:
        store.migrate()
        truth = [parse_record(record) for record in sim.truth().values()]
        store.pages.repair_records(MERCHANT, newer=truth, same_revision=[])
    finally:
        store.close()
    return whole_history(sim)


def verify_json(
    sim: Simulator, url: str, window: Window, *, repair: bool = False, page_size: int = 200
):
    out = io.StringIO()
    settings = settings_for(sim, url, page_size=page_size)
    code = run_verify(settings, window.start, window.end, repair=repair, fmt="json", out=out)
    return code, json.loads(out.getvalue())


def plant_differences(store: Warehouse, truth: dict[str, dict]) -> dict[str, str]:
    """One row of each kind, by hand in the warehouse's own SQL; the planted id per kind."""
    ids = sorted(truth)
    planted = {
        "missing": ids[0],
        "behind": next(i for i in ids[1:] if truth[i]["revision"] > 1),
        "different": ids[2],
        "ahead": ids[3],
        "warehouse_only": "not-on-the-platform",
    }
    key = records.c.merchant_id == MERCHANT
    with store.engine.begin() as conn:
        conn.execute(delete(records).where(key, records.c.record_id == planted["missing"]))
        conn.execute(
            update(records)
            .where(key, records.c.record_id == planted["behind"])
            .values(revision=records.c.revision - 1)
        )
        conn.execute(
            update(records)
            .where(key, records.c.record_id == planted["different"])
            .values(bet_amount=records.c.bet_amount + Decimal("0.0001"))
        )
        conn.execute(
            update(records)
            .where(key, records.c.record_id == planted["ahead"])
            .values(revision=records.c.revision + 1)
        )
    copied = replace(parse_record(truth[ids[4]]), record_id=planted["warehouse_only"])
    store.pages.repair_records(MERCHANT, newer=[copied], same_revision=[])
    return planted


def test_a_clean_range_exits_0_and_counts_both_sides(sim, tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'clean.db'}"
    window = synced(sim, url)
    config = tmp_path / "verify.toml"
    config.write_text(
        f'base_url = "{sim.base_url}"\ndatabase_url = "{url}"\nmerchant_id = "{MERCHANT}"\n'
        f'secret = "{SECRET}"\nhttp_port = 0\nhistory_from = "{format_time(window.start)}"\n',
        encoding="utf-8",
    )
    argv = ["verify", "--from", format_time(window.start), "--to", format_time(window.end)]
    capsys.readouterr()  # the backfill's log lines
    metrics = tmp_path / "verify.prom"
    csv_argv = ["--config", str(config), "--format", "csv", "--metrics-file", str(metrics)]
    assert cli.main([*argv, *csv_argv]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["day"] for row in rows][-1] == "total"
    assert len(rows) == 4  # three UTC days of history, then the total
    total = rows[-1]
    assert int(total["platform_rows"]) == int(total["warehouse_rows"]) == len(sim.truth())
    kinds = ("missing", "behind", "different", "warehouse_only", "ahead", "repaired")
    assert all(total[kind] == "0" for kind in kinds)
    labels = f'merchant_id="{MERCHANT}"'
    assert f'recordsync_verify_runs_total{{{labels},outcome="clean"}} 1.0' in metrics.read_text()
    assert cli.main([*argv, "--config", str(config)]) == 0  # the table
    assert "complete and exact" in capsys.readouterr().out


def test_each_planted_difference_is_found_then_repaired_to_the_truth(sim, warehouse_url):
    window = synced(sim, warehouse_url)
    truth = sim.truth()
    store = Warehouse.connect(warehouse_url)
    try:
        planted = plant_differences(store, truth)
        with capture_logs() as logs:
            code, found = verify_json(sim, warehouse_url, window)
        assert code == 1
        assert {kind: found["totals"][kind] for kind in planted} == dict.fromkeys(planted, 1)
        assert {kind: found["examples"][kind] for kind in planted} == {
            kind: [record_id] for kind, record_id in planted.items()
        }
        assert found["totals"]["platform_rows"] == len(truth)
        assert found["totals"]["warehouse_rows"] == len(truth)  # one missing, one extra
        event = next(e for e in logs if e["event"] == "verify_found_differences")
        assert (event["missing"], event["behind"], event["different"]) == (1, 1, 1)

        code, repaired = verify_json(sim, warehouse_url, window, repair=True)
        assert code == 1  # differences were found, even though every one was repaired
        assert repaired["totals"]["repaired"] == 3
        # The truth again, but for what a repair never touches: the row only the warehouse
        # has (reported, never deleted) and the row ahead (a higher revision is never lowered).
        ahead = truth[planted["ahead"]]["revision"]
        assert differences(store, MERCHANT, truth) == sorted(
            [
                f"extra {planted['warehouse_only']}",
                f"{planted['ahead']}.revision: warehouse {ahead + 1!r} != platform {ahead!r}",
            ]
        )
        code, after = verify_json(sim, warehouse_url, window)
        assert code == 0
        assert after["totals"]["warehouse_only"] == after["totals"]["ahead"] == 1
    finally:
        store.close()


def test_a_verify_of_a_held_merchant_is_run_by_its_holder_inside_the_limit(tmp_path):
    """A daemon holds the merchant (a real process, its tail polling the live changes):
    verify hands the run to it, the holder repairs a planted gap fenced by its own epoch,
    and the simulator sees no request over the merchant's limit."""
    url = f"sqlite:///{tmp_path / 'held.db'}"
    daemon_log = tmp_path / "daemon.log"
    with running_simulator(sim_config(record_requests=8, live_rate=20.0), live=True) as sim:
        daemon = start_daemon(environment_for(sim, url), daemon_log)
        try:
            wait_for_log(daemon_log, '"snapshot_finished"')
            # The history before the live traffic: nothing there is still on its way.
            window = Window(whole_history(sim).start, floor_ms(sim.now() - timedelta(hours=1)))
            store = Warehouse.connect(url)
            try:
                gone = min(store.records.record_ids_created(MERCHANT, window.start, window.end))
                with store.engine.begin() as conn:
                    conn.execute(
                        delete(records).where(
                            records.c.merchant_id == MERCHANT, records.c.record_id == gone
                        )
                    )
                with capture_logs() as logs:
                    code, found = verify_json(sim, url, window, repair=True, page_size=20)
                assert gone in store.records.fetch_records(MERCHANT)
            finally:
                store.close()
            assert stop_gracefully(daemon)[0] == 0
        finally:
            if daemon.poll() is None:
                daemon.kill()
        stats = sim.stats()
    assert any(entry["event"] == "verify_handed_over" for entry in logs)
    assert '"requested_verify_finished"' in daemon_log.read_text()
    assert code == 1
    assert gone in found["examples"]["missing"]
    # Live changes may leave a row or two behind the platform for a moment, too (the tail
    # lags the platform by up to a poll): every row found is repaired all the same.
    totals = found["totals"]
    assert totals["repaired"] == totals["missing"] + totals["behind"] + totals["different"]
    assert stats.rate_limit_violations == 0


def test_a_run_s_metrics_name_the_merchant_the_outcome_and_each_kind():
    registry = CollectorRegistry()
    record_verify_run(
        registry,
        MERCHANT,
        clean=False,
        differences={"missing": 2, "behind": 0},
        repaired=2,
        clock=lambda: 1_700_000_000.0,
    )
    merchant = {"merchant_id": MERCHANT}
    value = registry.get_sample_value
    assert value("recordsync_verify_runs_total", {**merchant, "outcome": "differences"}) == 1
    assert value("recordsync_verify_differences", {**merchant, "kind": "missing"}) == 2
    assert value("recordsync_verify_repaired_rows", merchant) == 2
    assert value("recordsync_verify_last_run_timestamp_seconds", merchant) == 1_700_000_000


@pytest.mark.parametrize("started", [False, True], ids=["before-taking-it", "in-the-middle"])
def test_a_request_no_holder_runs_is_run_by_the_command_once_the_merchant_is_free(
    sim, tmp_path, started
):
    """A holder that goes away before it takes the request, or in the middle of it (a stop, a
    rollout scaled to zero): the command takes the lease back and verifies itself, and marks
    the request so no later holder runs it too.  Before, a request left running was followed
    for ever."""
    url = f"sqlite:///{tmp_path / 'free.db'}"
    window = synced(sim, url)
    store = Warehouse.connect(url)
    holder = store.fleet_session("a-holder-about-to-stop")
    try:
        assert holder.try_hold(MERCHANT) is not None
        outcome: dict[str, object] = {}

        def verify() -> None:
            outcome["code"], outcome["found"] = verify_json(sim, url, window)

        with capture_logs() as logs:
            command = threading.Thread(target=verify, daemon=True)
            command.start()
            while not any(entry["event"] == "verify_handed_over" for entry in logs):
                time.sleep(0.05)
            if started:
                store.requests.start(1, "a-holder-about-to-stop")
            holder.close()
            command.join(timeout=30)
        assert not command.is_alive()
        assert outcome["code"] == 0
        assert any(entry["event"] == "verify_taken_back" for entry in logs)
        request = store.requests.get(1)
        assert request is not None
        assert request.state is RequestState.FAILED
        assert store.requests.unfinished((MERCHANT,)) == []
    finally:
        holder.close()
        store.close()


def test_a_verify_that_cannot_finish_exits_3_not_1(sim, tmp_path, capsys):
    """A script must tell "differences found" (1) from "concluded nothing" (3): here the
    platform refuses the secret, which no wait fixes."""
    url = f"sqlite:///{tmp_path / 'refused.db'}"
    window = synced(sim, url)
    config = tmp_path / "verify.toml"
    config.write_text(
        f'base_url = "{sim.base_url}"\ndatabase_url = "{url}"\nmerchant_id = "{MERCHANT}"\n'
        f'secret = "{"x" * len(SECRET)}"\nhttp_port = 0\n'
        f'history_from = "{format_time(window.start)}"\n',
        encoding="utf-8",
    )
    argv = ["verify", "--from", format_time(window.start), "--to", format_time(window.end)]
    assert cli.main([*argv, "--config", str(config)]) == cli.EXIT_INCOMPLETE == 3
    err = capsys.readouterr().err
    assert "recordsync: error:" in err
    assert "x" * len(SECRET) not in err
