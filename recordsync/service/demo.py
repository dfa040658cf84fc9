"""``recordsync demo``: the README's first command.  The bundled simulator and a local SQLite
file, synced until caught up, then checked against the simulator's truth.
"""

from __future__ import annotations

import sys
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


def run_demo(*, database_url: str, history_days: int, rounds_per_day: int) -> int:
    """The README's first command: the simulator and a local SQLite file, synced until caught up."""
    from recordsync.sim import DEMO_MERCHANT_ID, DEMO_SECRET, SimConfig, Simulator  # noqa: PLC0415

    console = Console()
    configure_logging(level="warning", log_format=None, stream=sys.stderr)
    sim = Simulator(
        SimConfig(history_days=history_days, rounds_per_day=rounds_per_day, live_rate=20.0)
    )
    sim.start(host="127.0.0.1", port=0)
    console.print(
        f"simulator: {sim.base_url} (merchant {DEMO_MERCHANT_ID}, {history_days} days, "
        f"{rounds_per_day:,} rounds a day, live traffic on)"
    )
    merchant = MerchantSettings(
        merchant_id=DEMO_MERCHANT_ID,
        secret=SecretSource.given(Secret(DEMO_SECRET)),
        base_url=sim.base_url,
        # The operator's choice of how much history to copy: everything the simulator has,
        # read off the platform's (the simulator's) clock.
        history_from=sim.now() - timedelta(days=history_days + 1),
    )
    settings = Settings(merchants=(merchant,), database_url=database_url)
    started = time.monotonic()
    try:
        sim.start_live()
        stopper = Stopper()
        with (
            stop_on_signals(stopper),
            RichProgress(console) as progress,
            open_app(settings, stopper=stopper, observer=progress, stop_when_caught_up=True) as app,
        ):
            progress.show_budget(app.client.budget.requests, app.client.budget.seconds)
            caught_up = app.engine.run()
        sim.stop_live()
        if caught_up:
            _demo_summary(console, settings, sim.truth(), time.monotonic() - started)
    finally:
        sim.stop()
    path = database_url.removeprefix("sqlite:///")
    console.print(f'data: {path}\ntry:\n  sqlite3 {path} "{_DEMO_QUERY}"')
    return 0


def _demo_summary(
    console: Console, settings: Settings, truth: dict[str, dict[str, Any]], seconds: float
) -> None:
    """One more pass with the live traffic stopped, then compare with the truth exactly."""
    with open_app(settings, stop_when_caught_up=True) as app:
        app.engine.run()
        rows = app.warehouse.fetch_records(app.merchant.merchant_id)
        quarantined = app.warehouse.status(app.merchant.merchant_id).quarantined
    behind = [
        record_id
        for record_id, record in truth.items()
        if record_id not in rows or rows[record_id]["revision"] != record["revision"]
    ]
    verdict = (
        "[green]equals the simulator's truth[/]"
        if not behind and len(rows) == len(truth)
        else f"[red]differs from the simulator's truth in {len(behind)} records[/]"
    )
    console.print(
        f"\n[bold]synced {len(rows):,} records in {seconds:.1f} s[/]; the warehouse {verdict}; "
        f"{quarantined} quarantined."
    )


_DEMO_QUERY = (
    "SELECT status, currency, COUNT(*) AS rounds FROM records GROUP BY status, currency "
    "ORDER BY rounds DESC;"
)
