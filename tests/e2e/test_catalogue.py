"""The game catalogue synced from the simulator over loopback HTTP with the real client
(spec: Game; Endpoints, Games; Capabilities, limits.query_requests / query_seconds)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs
from support.synccheck import settings_for
from support.warehouse_reads import fetch_games

from recordsync.core.secret import Secret
from recordsync.core.stopping import Stopper
from recordsync.metrics import MetricName, Metrics
from recordsync.platform.budget import RateBudget
from recordsync.platform.client import PlatformClient
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.service.daemon.merchant_syncs import MerchantSyncs
from recordsync.service.secrets import SecretKeeper
from recordsync.sim import ManualClock, SimConfig, Simulator, running_simulator
from recordsync.sync.catalogue import CatalogueRefresh
from recordsync.sync.context import SyncContext
from recordsync.sync.events import SyncObserver
from recordsync.sync.jobs import JobHost
from recordsync.sync.options import SyncOptions
from recordsync.warehouse import Warehouse

MERCHANT = "m-cat"
SECRET = "catalogue-secret-0123456789abcdefghijklmn"
# The warehouse side runs on every backend in tests/warehouse/test_warehouse_catalogue.py;
# here the backend matters only for the stored non-ASCII names of a whole pass.
SQLITE_ONLY = pytest.mark.parametrize("warehouse_url", ["sqlite"], indirect=True)


def sim_config(**overrides: object) -> SimConfig:
    values: dict[str, object] = {
        "merchant_id": MERCHANT,
        "secret": SECRET,
        "seed": 5,
        "history_days": 1,
        "rounds_per_day": 200,
        "record_requests": 1000,
        "query_requests": 1000,
    }
    values.update(overrides)
    return SimConfig(**values)  # type: ignore[arg-type]


@contextmanager
def client_of(sim: Simulator, clock=time.time) -> Iterator[PlatformClient]:
    with PlatformClient(
        base_url=sim.base_url,
        merchant_id=MERCHANT,
        secret=Secret(SECRET),
        budget=RateBudget(1000, 1),
        query_budget=RateBudget(1000, 1),
        clock=clock,
    ) as client:
        yield client


def context(client: PlatformClient, warehouse: Warehouse, page_size: int = 5) -> SyncContext:
    return SyncContext(
        client=client,
        warehouse=warehouse.for_merchant(MERCHANT),
        options=SyncOptions(merchant_id=MERCHANT, history_from=None, page_size=page_size),
        stopper=Stopper(),
        observer=SyncObserver(),
        rng=random.Random(3),
    )


def refresh(ctx: SyncContext, source, warehouse: Warehouse) -> list[dict]:
    with capture_logs() as logs:
        runner = ctx.runner(ctx.stopper, fatal_is_final=False)
        CatalogueRefresh(ctx, source, warehouse.for_merchant(MERCHANT), runner).run()
    return logs


def expected_rows(sim: Simulator) -> dict[str, dict]:
    rows = {}
    for game in sim.games(MERCHANT).listed():
        wire = game.wire()
        rows[game.game_id] = {
            "name": wire["name"],
            "brand": wire["brand"],
            "category": wire["category"],
            "category_name": wire["category_detail"]["name"],
            "status": wire["status"],
            "launch_supported": wire["launch_supported"],
            "provider_code": wire["provider"]["code"],
            "provider_name": wire["provider"]["name"],
            "client_version": wire["client_version"],
            "languages": ",".join(wire["languages"]),
            "localizations": {item["language"]: item["name"] for item in wire["localizations"]},
        }
    return rows


def stored_rows(warehouse: Warehouse) -> dict[str, dict]:
    return {
        game_id: {name: row[name] for name in (*expected_keys(), "localizations")}
        for game_id, row in fetch_games(warehouse, MERCHANT).items()
        if row["listed"]
    }


def expected_keys() -> tuple[str, ...]:
    return (
        "name",
        "brand",
        "category",
        "category_name",
        "status",
        "launch_supported",
        "provider_code",
        "provider_name",
        "client_version",
        "languages",
    )


def test_a_pass_pages_through_the_catalogue_and_stores_it_with_non_ascii_names(warehouse):
    with running_simulator(sim_config()) as sim, client_of(sim) as client:
        logs = refresh(context(client, warehouse, page_size=5), client, warehouse)
        games_pages = sim.stats().count("games", 200)
    assert games_pages == 5, "24 games in pages of 5"
    assert stored_rows(warehouse) == expected_rows(sim)
    names = next(iter(stored_rows(warehouse).values()))["localizations"]
    assert not names["zh-CN"].isascii()
    assert not names["ru"].isascii()
    used = {record["game_id"] for record in sim.truth(MERCHANT).values()}
    assert used <= set(stored_rows(warehouse)), "every game id of the records is named"
    (event,) = [log for log in logs if log["event"] == "catalogue_refreshed"]
    assert (event["games"], event["pages"], event["added"], event["restarts"]) == (24, 5, 24, 0)


@SQLITE_ONLY
def test_a_cursor_expiring_mid_pass_restarts_the_pass_and_stores_it_whole(warehouse):
    clock = ManualClock()
    with running_simulator(sim_config(), clock=clock) as sim, client_of(sim, clock) as client:

        class SlowPlatform:
            """The platform as the job sees it, with 25 h passing after the second page."""

            pages = 0

            def games(self, **kwargs):
                page = client.games(**kwargs)
                SlowPlatform.pages += 1
                if SlowPlatform.pages == 2:
                    clock.advance(25 * 3600)
                return page

        logs = refresh(context(client, warehouse), SlowPlatform(), warehouse)
        expired = sim.stats().count("games", 410)
    assert expired == 1
    assert [log["event"] for log in logs if "catalogue" in log["event"]] == [
        "catalogue_cursor_expired",
        "catalogue_refreshed",
    ]
    refreshed = logs[-1]
    assert (refreshed["restarts"], refreshed["pages"], refreshed["games"]) == (1, 5, 24)
    assert stored_rows(warehouse) == expected_rows(sim)


@SQLITE_ONLY
def test_a_game_that_disappears_keeps_its_row_marked_not_seen_since(warehouse):
    with running_simulator(sim_config()) as sim, client_of(sim) as client:
        ctx = context(client, warehouse, page_size=100)
        refresh(ctx, client, warehouse)
        gone = sim.games(MERCHANT).listed()[3]
        sim.games(MERCHANT).retire(gone.game_id)
        sim.games(MERCHANT).set_status(sim.games(MERCHANT).listed()[0].game_id, "DISABLED")
        first_seen = fetch_games(warehouse, MERCHANT)[gone.game_id]["last_seen_at"]
        logs = refresh(ctx, client, warehouse)
    rows = fetch_games(warehouse, MERCHANT)
    assert len(rows) == 24
    assert rows[gone.game_id]["listed"] is False
    assert rows[gone.game_id]["last_seen_at"] == first_seen
    assert rows[gone.game_id]["name"] == gone.name
    assert stored_rows(warehouse) == expected_rows(sim)
    refreshed = logs[-1]
    assert (refreshed["unlisted"], refreshed["games"]) == (1, 23)


@pytest.mark.slow
@pytest.mark.parametrize("warehouse_url", ["sqlite"], indirect=True)
def test_the_query_limit_is_honoured_while_the_record_tail_runs(warehouse_url):
    """Catalogue passes every 0.3 s in pages of 6 at 2 requests/s beside a busy tail on 4/s:
    the simulator counts no violation of either limit, and both made progress.  A catalogue
    paced by the record budget would send up to 4 games requests a second: violations."""
    config = sim_config(
        record_requests=4,
        record_seconds=1,
        query_requests=2,
        query_seconds=1,
        live_rate=30.0,
    )
    with running_simulator(config) as sim:
        sim.start_live()
        stopper = Stopper()
        settings = settings_for(sim, warehouse_url, page_size=6, catalogue_interval=0.3)
        with MerchantCommand(settings, None, stopper) as app:
            runner = threading.Thread(target=app.tail.run)
            runner.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and sim.stats().count("games", 200) < 8:
                time.sleep(0.2)
            stopper.stop()
            runner.join()
            stored = fetch_games(app.warehouse, MERCHANT)
            tail_pages = sim.stats().count("record-changes", 200)
        stats = sim.stats()
    assert stats.count("games", 200) >= 8, "two whole passes at least (4 pages each)"
    assert stats.query_limit_violations == 0
    assert stats.rate_limit_violations == 0
    assert stats.count("games", 429) == 0
    assert tail_pages > 5, "the tail went on beside the catalogue"
    assert len(stored) == 24


def test_the_daemon_refreshes_each_held_merchant_s_catalogue_beside_its_tail(tmp_path):
    """MerchantSyncs (the daemon's per-merchant syncs) schedules the catalogue job at start
    under the merchant's lease epoch, and counts the pass in the metrics."""
    url = f"sqlite:///{tmp_path / 'daemon.db'}"
    with running_simulator(sim_config(query_requests=5)) as sim:
        settings = settings_for(sim, url, catalogue_interval=3600)
        warehouse = Warehouse.connect(url)
        warehouse.migrate()
        registry = CollectorRegistry()
        metrics = Metrics(registry)
        host, stopper = JobHost(), Stopper()
        session = warehouse.fleet_session("replica-test")
        try:
            epoch = session.try_hold(MERCHANT)
            assert epoch is not None
            syncs = MerchantSyncs(
                settings,
                warehouse=warehouse,
                secrets=SecretKeeper({MERCHANT: settings.merchant().secret}),
                metrics=metrics,
                host=host,
                stopper=stopper,
            )
            syncs.start(MERCHANT, epoch)

            def refreshes() -> float | None:
                return registry.get_sample_value(
                    str(MetricName.CATALOGUE_REFRESHES), {"merchant_id": MERCHANT}
                )

            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and refreshes() != 1:
                time.sleep(0.1)
            passes = refreshes()
            syncs.stop(MERCHANT)
        finally:
            stopper.stop()
            host.shutdown()
            session.close()
            warehouse.close()
        stats = sim.stats()
    assert passes == 1
    reopened = Warehouse.connect(url)
    try:
        assert stored_rows(reopened) == expected_rows(sim)
    finally:
        reopened.close()
    assert stats.query_limit_violations == 0
    assert stats.rate_limit_violations == 0
