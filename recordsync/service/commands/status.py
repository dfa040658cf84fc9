"""``recordsync status``: where the sync stands, for people (a table), scripts (``--json``) and
probes (``--check``, the readiness rule applied to the committed state).

Each merchant also shows who syncs it now: the replica holding its lock, asked of the
warehouse through a fleet session of this command's own (``status-<pid>``, never a replica:
it joins nothing, never heartbeats, takes no lock and writes no row, so read-only accounts
work), the lease epoch the holder writes under, and how fresh its data is (``sync_freshness``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from recordsync.core.errors import RecordSyncError
from recordsync.core.settings import Settings
from recordsync.service.commands.console import PipeConsole, utc_to_the_second
from recordsync.service.readiness import assess_readiness
from recordsync.warehouse import (
    Availability,
    DriftCheckRun,
    Freshness,
    Pause,
    QuarantinedRecord,
    WarehouseStatus,
)
from recordsync.warehouse.fields.sightings import Sighting
from recordsync.warehouse.reader import WarehouseReader
from recordsync.warehouse.timeouts import PROBE


@dataclass(frozen=True, slots=True)
class MerchantView:
    """One merchant as ``status`` shows it."""

    report: WarehouseStatus
    quarantined: Sequence[QuarantinedRecord]
    holder: str | None = None  # the replica holding the merchant's lock now; None: nobody
    epoch: int | None = None  # its lease epoch; None: never held by a replica
    freshness: Freshness | None = None  # its ``sync_freshness`` row; None before a build
    # The optional endpoints (the game catalogue) and whether the platform serves them.
    endpoints: Sequence[Availability] = ()
    paused: Pause | None = None  # an operator's pause (``recordsync merchant pause``)
    # The drift check's last run and wait (None: never ran), and its interval (0: off).
    drift: DriftCheckRun | None = None
    drift_interval: float = 0.0
    # Record members the platform added that no column holds yet (kept in extra_fields).
    unknown_fields: Sequence[Sighting] = ()


def show_status(settings: Settings, *, as_json: bool, check: bool = False) -> int:
    """Every configured merchant's status: a block each for people, one document for scripts
    (``{"merchants": [{"merchant_id", "status", "quarantined", "holder", "epoch",
    "freshness", "endpoints", "paused", "drift_check", "unknown_fields"}, ...]}``)."""
    merchant_ids = _merchant_ids(settings)
    if check:
        return _check(settings, merchant_ids)
    warehouse = WarehouseReader.open(settings.database_url)
    try:
        holders = current_holders(warehouse)
        paused = warehouse.paused(merchant_ids)
        views = [
            MerchantView(
                report=warehouse.status(merchant_id),
                quarantined=warehouse.quarantined(merchant_id, limit=10),
                holder=holders.get(merchant_id),
                epoch=warehouse.lease_epoch(merchant_id),
                freshness=warehouse.freshness(merchant_id),
                endpoints=warehouse.availability(merchant_id),
                paused=paused.get(merchant_id),
                drift=warehouse.drift_check_run(merchant_id),
                drift_interval=settings.drift_check_interval,
                unknown_fields=warehouse.unknown_fields(merchant_id),
            )
            for merchant_id in merchant_ids
        ]
    finally:
        warehouse.close()
    if as_json:
        payload = {"merchants": [_json_view(view) for view in views]}
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    console = PipeConsole()
    for view in views:
        render_status(console, view)
    return 0


def current_holders(warehouse: WarehouseReader) -> dict[str, str]:
    """merchant -> the replica whose lock holds it right now.

    Asked through a session of this process's own, as ``status-<pid>``: a replica id is
    ``host-pid-suffix`` (``daemon.run.replica_id``), so it is never mistaken for one.
    Opening the session and ``holders()`` only read (the leases not released, then which
    locks are granted; on SQLite who holds the fleet's file lock), so nothing is written and
    no lock is taken; the session is closed at once, never heartbeating.
    """
    return warehouse.holders(f"status-{os.getpid()}")


def _json_view(view: MerchantView) -> dict[str, Any]:
    freshness = view.freshness
    return {
        "merchant_id": view.report.merchant_id,
        "status": _plain(dataclasses.asdict(view.report)),
        "quarantined": [_plain(dataclasses.asdict(row)) for row in view.quarantined],
        "holder": view.holder,
        "epoch": view.epoch,
        "freshness": None
        if freshness is None
        else {
            "staleness_seconds": freshness.staleness_seconds,
            "seconds_since_commit": freshness.seconds_since_commit,
        },
        "endpoints": [_plain(dataclasses.asdict(item)) for item in view.endpoints],
        "paused": None if view.paused is None else _plain(dataclasses.asdict(view.paused)),
        "drift_check": _drift_json(view),
        "unknown_fields": [
            {
                "field": item.field,
                "first_seen_at": item.first_seen_at.isoformat(),
                "last_seen_at": item.last_seen_at.isoformat(),
                "first_record_id": item.first_record_id,
            }
            for item in view.unknown_fields
        ],
    }


def _drift_json(view: MerchantView) -> dict[str, Any] | None:
    drift = view.drift
    if drift is None or not view.drift_interval:
        return None
    return {
        "last_run_at": _plain(drift.last_run_at),
        "deferred_since": _plain(drift.deferred_since),
        "interval_seconds": view.drift_interval,
        "overdue": drift_overdue(view) is not None,
    }


def drift_overdue(view: MerchantView) -> str | None:
    """Why the drift check is late (its last run older than twice its interval), or None.

    A drift check is background work: behind the sync's own reads (a snapshot, a backfill)
    it is deferred rather than queued, and runs once the budget has room (``platform.budget``).
    """
    drift, interval = view.drift, view.drift_interval
    if drift is None or not interval:
        return None
    since = drift.last_run_at or drift.deferred_since
    if since is None or (drift.read_at - since).total_seconds() <= 2 * interval:
        return None
    last = "never ran" if drift.last_run_at is None else f"last ran {_when(drift.last_run_at)}"
    waiting = (
        f"; deferred behind the sync's own reads (a snapshot, a backfill) since "
        f"{_when(drift.deferred_since)}"
        if drift.deferred_since is not None
        else ""
    )
    return f"OVERDUE: {last}, every {interval:g} s{waiting}"


def _merchant_ids(settings: Settings) -> list[str]:
    """Every configured merchant; none configured is the settings' own error."""
    if not settings.merchants:
        settings.merchant()  # raises, naming how to configure one
    return [merchant.merchant_id for merchant in settings.merchants]


def render_status(console: Console, view: MerchantView) -> None:
    """The status for people: the state as one value per line, the jobs and the quarantine
    as small tables.  ``--json`` keeps the full structure for scripts."""
    report, quarantined = view.report, view.quarantined
    facts = Table(title=f"recordsync status: {report.merchant_id}", show_header=False)
    lines = [
        *_holder_lines(view),
        *_state_lines(report),
        *_freshness_lines(view),
        *_drift_lines(view),
        *_endpoint_lines(view),
    ]
    for label, value in lines:
        facts.add_row(label, value)
    console.print(facts)
    if report.jobs:
        jobs = Table(title="snapshot jobs")
        jobs.add_column("job")
        jobs.add_column("windows", justify="right")
        jobs.add_column("done", justify="right")
        jobs.add_column("records", justify="right")
        for job in report.jobs:
            share = job.windows_done / job.windows_total if job.windows_total else 1.0
            jobs.add_row(
                job.job,
                f"{job.windows_done}/{job.windows_total}",
                f"{share:.0%}",
                f"{job.records:,}",
            )
        console.print(jobs)
    if view.unknown_fields:
        fields = Table(title="unknown record fields (kept in extra_fields)")
        fields.add_column("field")
        for column in ("first seen", "last seen"):
            fields.add_column(column, min_width=len("2026-12-04T02:33:41Z"), no_wrap=True)
        fields.add_column("first record_id", overflow="fold")  # whole, to look it up
        for item in view.unknown_fields:
            fields.add_row(
                item.field,
                utc_to_the_second(item.first_seen_at),
                utc_to_the_second(item.last_seen_at),
                item.first_record_id,
            )
        console.print(fields)
    if quarantined:
        table = Table(title=f"quarantined records: the newest {len(quarantined)}")
        for column in ("id", "source", "record_id", "reason", "quarantined at"):
            table.add_column(column)
        for row in quarantined:
            table.add_row(
                str(row.id), row.source, row.record_id or "", row.reason, _when(row.quarantined_at)
            )
        console.print(table)


def rows_text(report: WarehouseStatus) -> str:
    """The merchant's rows as counted: exact, or "more than" the count's cap (``status``
    never counts a whole table of tens of millions)."""
    return f"{report.records:,}" if report.records_exact else f"more than {report.records:,}"


def _state_lines(report: WarehouseStatus) -> list[tuple[str, str]]:
    lines = [("records", rows_text(report)), ("quarantined", f"{report.quarantined:,}")]
    state = report.state
    if state is None:
        return [("phase", "not started (no sync state yet)"), *lines]
    return [
        ("phase", state.phase.value),
        ("history from", _when(state.history_from)),
        ("anchored at (platform time)", _when(state.anchor_at)),
        ("snapshot to", _when(state.snapshot_to)),
        ("last change sequence", state.last_sequence or "none yet"),
        ("platform time covered", _when(state.last_projection_as_of)),
        ("last commit", _when(state.last_commit_at)),
        ("rebuilds", str(state.rebuilds)),
        *lines,
    ]


def _holder_lines(view: MerchantView) -> list[tuple[str, str]]:
    if view.paused is not None:
        pause = view.paused
        why = f": {pause.reason}" if pause.reason else ""
        paused = [("paused", f"since {_when(pause.since)} by {pause.by}{why}")]
    else:
        paused = []
    holder = view.holder or (
        "nobody (paused)" if view.paused is not None else "nobody: no replica syncs it now"
    )
    epoch = "never held by a replica" if view.epoch is None else str(view.epoch)
    return [*paused, ("held by", holder), ("lease epoch", epoch)]


def _freshness_lines(view: MerchantView) -> list[tuple[str, str]]:
    """The ages of ``sync_freshness``, by the database's clock (docs/bi.md)."""
    freshness = view.freshness
    if freshness is None:
        return []
    return [
        ("data age (platform time)", _seconds(freshness.staleness_seconds)),
        ("since last commit", _seconds(freshness.seconds_since_commit)),
    ]


def _drift_lines(view: MerchantView) -> list[tuple[str, str]]:
    overdue = drift_overdue(view)
    if overdue is not None:
        return [("drift check", overdue)]
    if view.drift is None or view.drift.last_run_at is None or not view.drift_interval:
        return []
    return [("drift check", f"last ran {_when(view.drift.last_run_at)}")]


_ENDPOINT_LABELS = {"games": "game catalogue (GET /v1/games)"}


def _endpoint_lines(view: MerchantView) -> list[tuple[str, str]]:
    """Each optional endpoint: served, or refused since when and why (the feature alone is
    off: the records sync all the same)."""
    lines = []
    for item in view.endpoints:
        label = _ENDPOINT_LABELS.get(item.endpoint, item.endpoint)
        if item.available:
            lines.append((label, f"served (checked {_when(item.checked_at)})"))
            continue
        refusal = " ".join(str(part) for part in (item.status, item.code) if part is not None)
        text = (
            f"NOT served since {_when(item.since)} ({refusal or 'no answer'}); off for this "
            f"merchant, its records sync all the same; asked again at "
            f"{_when(item.next_check_at)}"
        )
        lines.append((label, text))
    return lines


def _seconds(value: int | None) -> str:
    return "none yet (no change page since the (re)build)" if value is None else f"{value:,} s"


def _when(value: datetime | None) -> str:
    return "never" if value is None else value.isoformat()


def _check(settings: Settings, merchant_ids: Sequence[str]) -> int:
    """``status --check``: 0 when the warehouse answers and every merchant's sync committed
    recently; one line per merchant (prefixed with its id when there are several).

    The rule is /readyz's (``assess_readiness``) applied to the committed state, so a probe
    and a script agree; the last commit time is the one the daemon stored with its cursor.
    A warehouse that is missing, down or at another schema version is "not ready" (exit 1),
    and so is one that keeps a read waiting: its sessions have the probe's bounds
    (``timeouts.PROBE``), so behind a lock the answer comes within ``PROBE_SECONDS``.
    """
    try:
        warehouse = WarehouseReader.open(settings.database_url, limits=PROBE)
        try:
            states = [warehouse.load_state(merchant_id) for merchant_id in merchant_ids]
        finally:
            warehouse.close()
    except RecordSyncError as exc:
        print(f"not ready: warehouse: {exc}")  # noqa: T201
        return 1
    now = time.time()
    all_ready = True
    for merchant_id, state in zip(merchant_ids, states, strict=True):
        last_commit = state.last_commit_at.timestamp() if state and state.last_commit_at else None
        verdict = assess_readiness(
            now=now,
            started_at=now - settings.readiness_multiple * settings.poll_interval,
            last_commit_at=last_commit,
            warehouse_error=None,
            poll_interval=settings.poll_interval,
            multiple=settings.readiness_multiple,
            startup_grace=0.0,
        )
        all_ready = all_ready and verdict.ready
        who = f"{merchant_id}: " if len(merchant_ids) > 1 else ""
        print(who + ("ready" if verdict.ready else "not ready") + f": {verdict.reason}")  # noqa: T201
    return 0 if all_ready else 1


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
