"""What each CLI command does, with the objects built; the CLI module only parses."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta
from typing import Any

import orjson
import structlog
from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.table import Table

from recordsync.core.errors import RecordSyncError, ShutdownRequestedError
from recordsync.core.secret import Secret
from recordsync.core.settings import Settings
from recordsync.core.stopping import Stopper
from recordsync.logs import configure_logging, process_context
from recordsync.metrics import Metrics
from recordsync.service.app import App, open_app, stop_on_signals
from recordsync.service.health import HealthServer, ReadinessCheck, assess_readiness
from recordsync.service.lease import acquire_lease
from recordsync.service.progress import RichProgress
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync")


def warn_settings(settings: Settings) -> None:
    for warning in settings.warnings:
        log.warning("configuration_warning", detail=warning)


def run(settings: Settings, *, registry: CollectorRegistry | None = None) -> int:
    """The daemon: metrics and health on the HTTP port, one lease term after another."""
    assert settings.merchant_id is not None
    stopper = Stopper()
    metrics = Metrics(registry or CollectorRegistry())
    process_context.update(merchant_id=settings.merchant_id, phase="starting")
    try:
        with (
            stop_on_signals(stopper),
            open_app(
                settings,
                stopper=stopper,
                observer=metrics.sync_observer(),
                client_observer=metrics.client_observer(),
            ) as app,
            _health_server(settings, metrics, app.warehouse),
        ):
            metrics.watch_budget(app.client.budget)
            log.info("daemon_started")
            while not stopper.stopped:
                _one_lease_term(settings, app, stopper)
    except ShutdownRequestedError:
        pass  # stopped while starting up or waiting as a standby: nothing was in hand
    log.info("daemon_stopped")
    return 0


def _one_lease_term(settings: Settings, app: App, stopper: Stopper) -> None:
    """Hold the merchant's lease and sync; a lost lease ends the term, the next one waits."""
    assert settings.merchant_id is not None
    term = Stopper(parent=stopper)
    process_context.update(phase="standby")
    lease = acquire_lease(
        app.warehouse, settings.merchant_id, sleep=stopper.sleep, on_lost=term.stop
    )
    with lease:  # acquire_lease logs lease_acquired itself
        app.engine_for(term).run()
    if not stopper.stopped:
        log.error("lease_lost", action="stopped taking pages; waiting to hold the lease again")


@contextmanager
def _health_server(settings: Settings, metrics: Metrics, warehouse: Warehouse) -> Iterator[None]:
    if not settings.http_port:
        yield
        return
    readiness = ReadinessCheck(
        ping=warehouse.ping,
        last_commit_at=lambda: metrics.last_commit_at,
        poll_interval=settings.poll_interval,
        multiple=settings.ready_multiple,
    )
    with HealthServer(settings.http_port, registry=metrics.registry, readiness=readiness):
        log.info("http_listening", port=settings.http_port, paths="/metrics /healthz /readyz")
        yield


def backfill(settings: Settings, start: datetime, end: datetime) -> int:
    """One-shot snapshot of a range: a progress bar on a terminal, log lines otherwise."""
    stopper = Stopper()
    process_context.update(merchant_id=settings.merchant_id, phase="backfill")
    progress = RichProgress() if sys.stdout.isatty() else None
    try:
        with (
            stop_on_signals(stopper),
            open_app(settings, stopper=stopper, observer=progress) as app,
            progress or nullcontext(),
        ):
            result = app.engine.backfill(start, end)
    except ShutdownRequestedError:
        log.info("backfill_interrupted", action="run the same command again to resume")
        return 0
    if stopper.stopped:
        log.info(
            "backfill_interrupted",
            job=result.job,
            records=result.records,
            action="run the same command again to resume",
        )
        return 0
    log.info("backfill_finished", job=result.job, windows=result.windows, records=result.records)
    return 0


def migrate(settings: Settings) -> int:
    warehouse = Warehouse.connect(settings.database_url)
    try:
        warehouse.migrate()
    finally:
        warehouse.close()
    log.info("migrated", database=_safe_url(settings.database_url))
    return 0


def status(settings: Settings, *, as_json: bool, check: bool = False) -> int:
    assert settings.merchant_id is not None
    warehouse = Warehouse.connect(settings.database_url)
    try:
        if check:
            return _check(settings, warehouse)
        warehouse.migrate()
        report = warehouse.status(settings.merchant_id)
        quarantined = warehouse.quarantined(settings.merchant_id, limit=10)
    finally:
        warehouse.close()
    payload = {
        "status": _plain(dataclasses.asdict(report)),
        "quarantined": [_plain(dataclasses.asdict(row)) for row in quarantined],
    }
    if as_json:
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    console = Console()
    table = Table(title=f"recordsync status: {settings.merchant_id}", show_header=False)
    for key, value in _flatten(payload["status"]):
        table.add_row(key, "" if value is None else str(value))
    console.print(table)
    if quarantined:
        console.print(f"[bold red]{len(quarantined)} quarantined records (newest first):")
        for row in payload["quarantined"]:
            console.print(f"  {row}")
    return 0


def report(settings: Settings, *, days: int, by: str, fmt: str) -> int:
    """``recordsync report``: the BI views as a table, CSV or JSON on stdout."""
    from recordsync.service.report import report as render  # noqa: PLC0415 - this command only

    assert settings.merchant_id is not None
    warehouse = Warehouse.connect(settings.database_url)
    try:
        warehouse.migrate()
        render(warehouse, settings.merchant_id, days=days, by=by, fmt=fmt, out=sys.stdout)
    finally:
        warehouse.close()
    return 0


def _check(settings: Settings, warehouse: Warehouse) -> int:
    """``status --check``: 0 when the warehouse answers and the sync committed recently.

    The rule is /readyz's (``assess_readiness``) applied to the committed state, so a probe
    and a script agree; the last commit time is the one the daemon stored with its cursor.
    """
    assert settings.merchant_id is not None
    try:
        warehouse.ping()
        state = warehouse.load_state(settings.merchant_id)
    except RecordSyncError as exc:
        print(f"not ready: warehouse: {exc}")  # noqa: T201
        return 1
    last_commit = state.last_commit_at.timestamp() if state and state.last_commit_at else None
    now = time.time()
    verdict = assess_readiness(
        now=now,
        started_at=now - settings.ready_multiple * settings.poll_interval,
        last_commit_at=last_commit,
        warehouse_error=None,
        poll_interval=settings.poll_interval,
        multiple=settings.ready_multiple,
        startup_grace=0.0,
    )
    print(("ready" if verdict.ready else "not ready") + f": {verdict.reason}")  # noqa: T201
    return 0 if verdict.ready else 1


def demo(*, database_url: str, history_days: int, rounds_per_day: int) -> int:
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
    settings = Settings(
        base_url=sim.base_url,
        merchant_id=DEMO_MERCHANT_ID,
        secret=Secret(DEMO_SECRET),
        database_url=database_url,
        # The operator's choice of how much history to copy: everything the simulator has,
        # read off the platform's (the simulator's) clock.
        history_from=sim.now() - timedelta(days=history_days + 1),
    )
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
        rows = app.warehouse.fetch_records(settings.merchant_id or "")
        quarantined = app.warehouse.status(settings.merchant_id or "").quarantined
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


def _safe_url(url: str) -> str:
    """A database URL without its password, for logs."""
    from sqlalchemy.engine import make_url  # noqa: PLC0415

    return make_url(url).render_as_string(hide_password=True)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        rows: list[tuple[str, Any]] = []
        for key, item in value.items():
            rows.extend(_flatten(item, f"{prefix}{key}."))
        return rows
    return [(prefix.rstrip("."), value)]
