"""``recordsync demo``: the README's first command.  The bundled simulator and a local SQLite
file, synced until caught up, then checked against the simulator's truth.
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import timedelta
from typing import Any

from rich.console import Console

from recordsync.core.secret import Secret, SecretSource
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.core.stopping import Stopper
from recordsync.logs import configure_logging
from recordsync.service.app import open_app
from recordsync.service.progress import RichProgress
from recordsync.service.signals import stop_on_signals


def run_demo(
    *, database_url: str, history_days: int, rounds_per_day: int, merchants: int = 1
) -> int:
    """The README's first command: the simulator and a local SQLite file, synced until caught
    up; with ``merchants`` > 1, that many merchants side by side in one process."""
    from recordsync.sim import DEMO_MERCHANT_ID, DEMO_SECRET, SimConfig, Simulator  # noqa: PLC0415

    console = Console()
    configure_logging(level="warning", log_format=None, stream=sys.stderr)
    config = SimConfig(history_days=history_days, rounds_per_day=rounds_per_day, live_rate=20.0)
    if merchants > 1:
        config = config.with_merchants(merchants)
    sim = Simulator(config)
    sim.start(host="127.0.0.1", port=0)
    ids = ", ".join(sim.merchant_ids) if merchants > 1 else DEMO_MERCHANT_ID
    console.print(
        f"simulator: {sim.base_url} (merchants {ids}, {history_days} days, "
        f"{rounds_per_day:,} rounds a day each, live traffic on)"
    )
    # The operator's choice of how much history to copy: everything the simulator has,
    # read off the platform's (the simulator's) clock.
    history_from = sim.now() - timedelta(days=history_days + 1)
    profiles = [
        MerchantSettings(
            merchant_id=profile.merchant_id,
            secret=SecretSource.given(Secret(DEMO_SECRET if merchants == 1 else profile.secret)),
            base_url=sim.base_url,
            history_from=history_from,
        )
        for profile in config.profiles
    ]
    settings = Settings(merchants=tuple(profiles), database_url=database_url)
    started = time.monotonic()
    try:
        sim.start_live()
        stopper = Stopper()
        with stop_on_signals(stopper), RichProgress(console) as progress:
            caught_up = _sync_side_by_side(settings, stopper, progress)
        sim.stop_live()
        if caught_up:
            truths = {
                merchant.merchant_id: sim.truth(merchant.merchant_id) for merchant in profiles
            }
            _demo_summary(console, settings, truths, time.monotonic() - started)
    finally:
        sim.stop()
    path = database_url.removeprefix("sqlite:///")
    console.print(f'data: {path}\ntry:\n  sqlite3 {path} "{_DEMO_QUERY}"')
    return 0


def _sync_side_by_side(settings: Settings, stopper: Stopper, progress: RichProgress) -> bool:
    """Every merchant synced until caught up, each in its own thread, in one display."""
    results: dict[str, bool] = {}

    def one(merchant_id: str) -> None:
        observer = progress if len(settings.merchants) == 1 else progress.for_merchant(merchant_id)
        with open_app(
            settings,
            merchant_id=merchant_id,
            stopper=Stopper(parent=stopper),
            observer=observer,
            stop_when_caught_up=True,
        ) as app:
            if len(settings.merchants) == 1:
                progress.show_budget(app.client.budget.requests, app.client.budget.seconds)
            results[merchant_id] = app.engine.run()

    threads = [
        threading.Thread(target=one, args=(merchant.merchant_id,), name=merchant.merchant_id)
        for merchant in settings.merchants
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return bool(results) and all(results.values()) and len(results) == len(threads)


def _demo_summary(
    console: Console,
    settings: Settings,
    truths: dict[str, dict[str, dict[str, Any]]],
    seconds: float,
) -> None:
    """One more pass with the live traffic stopped, then compare with the truth exactly."""
    synced = differ = quarantined = 0
    for merchant_id, truth in truths.items():
        with open_app(settings, merchant_id=merchant_id, stop_when_caught_up=True) as app:
            app.engine.run()
            rows = app.warehouse.fetch_records(merchant_id)
            quarantined += app.warehouse.status(merchant_id).quarantined
        synced += len(rows)
        differ += len(rows.keys() ^ truth.keys()) + sum(
            1
            for record_id, record in truth.items()
            if record_id in rows and rows[record_id]["revision"] != record["revision"]
        )
    verdict = (
        "[green]equals the simulator's truth[/]"
        if not differ
        else f"[red]differs from the simulator's truth in {differ} records[/]"
    )
    merchants = f" of {len(truths)} merchants" if len(truths) > 1 else ""
    console.print(
        f"\n[bold]synced {synced:,} records{merchants} in {seconds:.1f} s[/]; the warehouse "
        f"{verdict}; {quarantined} quarantined."
    )


_DEMO_QUERY = (
    "SELECT status, currency, COUNT(*) AS rounds FROM records GROUP BY status, currency "
    "ORDER BY rounds DESC;"
)
