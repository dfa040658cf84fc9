"""``recordsync status``: where the sync stands, for people (a table), scripts (``--json``) and
probes (``--check``, the readiness rule applied to the committed state).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from datetime import datetime
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from recordsync.core.errors import RecordSyncError
from recordsync.core.settings import Settings
from recordsync.service.health import assess_readiness
from recordsync.warehouse import Warehouse


def show_status(settings: Settings, *, as_json: bool, check: bool = False) -> int:
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
