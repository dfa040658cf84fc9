"""``recordsync verify``: is a range of the warehouse complete and exact?  A yes, or a list.

The platform's records of ``[from, to)`` are read again (``GET /v1/records``, windows of at
most 24 h aligned on UTC days, each paged by cursor) and compared with the warehouse, record by
record and field by field (what counts as which difference: ``recordsync.sync.verify``).

The merchant's rate limit is shared by every process that reads for it (spec: Limits, "Record
rate"), and a separate process cannot see the daemon's budget.  So, like ``backfill``, verify
first tries to take the merchant's lease:

- no daemon holds the merchant: verify holds it for the run (a daemon starting meanwhile waits),
  reads with the merchant's whole budget at the lowest priority, and ``--repair`` writes are
  fenced by its own lease epoch like every page commit;
- a daemon holds it: verify reads beside it, inside a fixed share of the limit
  (``BESIDE_HOLDER_SHARE``, a quarter: one request per ``4 x record_seconds / record_requests``
  seconds), leaving the rest to the holder, whose tail polls once per poll interval when caught
  up.  A 429 still pauses verify for its Retry-After.  Its ``--repair`` writes carry no epoch:
  they move no cursor and go only through the revision guards (a stored revision never goes
  down; an equal one is rewritten only while it is still the stored one), so they commute
  with every commit of the holder, whatever the order: the holder's cursors, which are what
  the one-writer fencing protects, are never touched.  docs/operations.md says when to prefer
  running verify with the daemon stopped (a holder catching up on a long backlog).
"""

from __future__ import annotations

import csv
import io
import os
import secrets as random_tokens
import sys
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Final, TextIO

import orjson
import structlog
from prometheus_client import CollectorRegistry, write_to_textfile
from rich.console import Console
from rich.table import Table

from recordsync.core.errors import ConfigurationError, CursorExpiredError
from recordsync.core.models import RecordsPage
from recordsync.core.settings import Settings
from recordsync.core.state import Window
from recordsync.core.stopping import Stopper
from recordsync.logs import process_context
from recordsync.metrics import record_verify_run
from recordsync.platform.budget import Priority
from recordsync.service.app import App, open_app
from recordsync.service.progress import RichProgress
from recordsync.service.signals import stop_on_signals
from recordsync.sync.events import SyncObserver
from recordsync.sync.plan import plan_windows
from recordsync.sync.resilience import StepRunner
from recordsync.sync.verify import (
    FAULTS,
    DayTally,
    Difference,
    VerifyResult,
    classify,
    compare_page,
    warehouse_only,
)

log = structlog.get_logger("recordsync")

LEASE_SECONDS: Final = 10
# The part of the merchant's record rate limit verify takes while a daemon holds the merchant.
BESIDE_HOLDER_SHARE: Final = 0.25
JOB: Final = "verify"
FORMATS: Final = ("table", "json", "csv")
COLUMNS: Final = ("day", "platform_rows", "warehouse_rows", *Difference, "repaired")


def run_verify(
    settings: Settings,
    start: datetime,
    end: datetime,
    *,
    merchant_id: str | None = None,
    repair: bool = False,
    fmt: str = "table",
    metrics_file: Path | None = None,
    out: TextIO | None = None,
) -> int:
    """Compare ``[start, end)`` of the merchant with the platform and print the findings.

    Exit code: 0 when nothing is missing, behind or different, 1 otherwise (also when
    ``--repair`` repaired everything it found: something was wrong and a person should know).
    """
    if not start < end:
        raise ConfigurationError("verify: --from must be earlier than --to")
    if fmt not in FORMATS:
        raise ConfigurationError(f"verify: --format must be one of {', '.join(FORMATS)}")
    out = out or sys.stdout
    merchant = settings.merchant(merchant_id)
    stopper = Stopper()
    process_context.update(merchant_id=merchant.merchant_id, phase="verify")
    progress = RichProgress(Console(file=sys.stderr)) if sys.stderr.isatty() else None
    with (
        stop_on_signals(stopper),
        open_app(settings, merchant_id=merchant.merchant_id, stopper=stopper) as app,
    ):
        session = app.warehouse.fleet_session(
            f"verify-{os.getpid()}-{random_tokens.token_hex(2)}", lease_seconds=LEASE_SECONDS
        )
        try:
            epoch = session.try_hold(merchant.merchant_id)
            if epoch is None:
                _take_share(app)
                log.info(
                    "verify_beside_holder",
                    holder=session.holders().get(merchant.merchant_id),
                    requests=app.client.budget.requests,
                    seconds=app.client.budget.seconds,
                )
            with progress or nullcontext():
                result = verify_range(
                    app, start, end, repair=repair, epoch=epoch, stopper=stopper, progress=progress
                )
        finally:
            session.close()
    _report(merchant.merchant_id, start, end, result, metrics_file)
    render(result, merchant.merchant_id, start, end, fmt=fmt, out=out)
    return 0 if result.clean else 1


def _take_share(app: App) -> None:
    """Shrink this process's budget to its share of the merchant's limit (see the module)."""
    budget = app.client.budget
    budget.resize(1, budget.seconds / (budget.requests * BESIDE_HOLDER_SHARE))


def verify_range(
    app: App,
    start: datetime,
    end: datetime,
    *,
    repair: bool,
    epoch: int | None,
    stopper: Stopper,
    progress: SyncObserver | None = None,
) -> VerifyResult:
    """Read ``[start, end)`` from the platform a UTC day at a time and compare (and repair)."""
    runner = StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=True)
    windows = plan_windows(start, end)
    if progress is not None:
        progress.windows_planned(JOB, len(windows), 0)
    days: list[DayTally] = []
    for window in windows:
        while True:
            try:
                tally = _verify_window(app, window, runner, repair=repair, epoch=epoch)
                break
            except CursorExpiredError:
                # The window took longer than its cursor lives (24 h): read it again whole.
                log.warning("verify_window_restarted", window_start=window.start.isoformat())
        days.append(tally)
        if progress is not None:
            progress.window_page(JOB, window, tally.platform_rows, done=True)
    return VerifyResult(days, repair=repair)


def _verify_window(
    app: App, window: Window, runner: StepRunner, *, repair: bool, epoch: int | None
) -> DayTally:
    merchant_id = app.merchant.merchant_id
    warehouse = app.warehouse
    page_size = app.options.page_size
    tally = DayTally(window.start.date())
    # The warehouse's rows are listed BEFORE the platform's snapshot is taken: a row the tail
    # stores later is then never mistaken for one the platform does not know.
    stored_ids = runner.run(
        lambda: warehouse.record_ids_created(merchant_id, window.start, window.end),
        what="verify: read record ids",
    )
    tally.warehouse_rows = len(stored_ids)
    listed: set[str] = set()
    cursor: str | None = None
    while True:
        page: RecordsPage = runner.run(
            _page_reader(app, window, cursor, page_size), what="verify: read records"
        )
        fresh = [record for record in page.records if record.record_id not in listed]
        ids = [record.record_id for record in fresh]
        stored = runner.run(
            partial(warehouse.stored_records, merchant_id, ids), what="verify: read rows"
        )
        findings = compare_page(fresh, stored)
        listed.update(ids)
        for kind, record_id in findings.differences:
            tally.note(kind, record_id)
        if repair and (findings.newer or findings.same_revision):
            runner.run(
                partial(
                    warehouse.repair_records,
                    merchant_id,
                    newer=findings.newer,
                    same_revision=findings.same_revision,
                    epoch=epoch,
                ),
                what="verify: repair",
            )
            fixed = [*findings.newer, *findings.same_revision]
            after = runner.run(
                partial(warehouse.stored_records, merchant_id, [r.record_id for r in fixed]),
                what="verify: read repaired rows",
            )
            tally.repaired += sum(
                1 for record in fixed if classify(record, after.get(record.record_id)) not in FAULTS
            )
        if not page.has_more or page.next_cursor is None:
            break
        cursor = page.next_cursor
    tally.platform_rows = len(listed)
    for record_id in warehouse_only(listed, stored_ids):
        tally.note(Difference.WAREHOUSE_ONLY, record_id)
    return tally


def _page_reader(
    app: App, window: Window, cursor: str | None, page_size: int
) -> Callable[[], RecordsPage]:
    """One page of the window at the lowest priority: verify never delays the sync's reads."""
    if cursor is None:
        return lambda: app.client.records_first(
            window.start, window.end, limit=page_size, priority=Priority.BACKGROUND
        )
    return lambda: app.client.records_next(cursor, limit=page_size, priority=Priority.BACKGROUND)


def _report(
    merchant_id: str,
    start: datetime,
    end: datetime,
    result: VerifyResult,
    metrics_file: Path | None,
) -> None:
    """The run's log event, and its metrics for node_exporter's textfile collector."""
    counts = {kind.value: result.total(kind) for kind in Difference}
    fields: dict[str, Any] = {
        "created_from": start.isoformat(),
        "created_to": end.isoformat(),
        "platform_rows": result.platform_rows,
        "warehouse_rows": result.warehouse_rows,
        "repair": result.repair,
        "repaired": result.repaired,
        **counts,
    }
    if result.clean:
        log.info("verify_finished", **fields)
    else:
        log.error(
            "verify_found_differences",
            action="repaired what the platform returned"
            if result.repair
            else "run again with --repair, or investigate (docs/operations.md)",
            **fields,
        )
    if metrics_file is not None:
        registry = CollectorRegistry()
        record_verify_run(
            registry, merchant_id, clean=result.clean, differences=counts, repaired=result.repaired
        )
        write_to_textfile(str(metrics_file), registry)


# -- output -------------------------------------------------------------------------------------


def render(
    result: VerifyResult,
    merchant_id: str,
    start: datetime,
    end: datetime,
    *,
    fmt: str,
    out: TextIO,
) -> None:
    if fmt == "json":
        document = _document(result, merchant_id, start, end)
        out.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif fmt == "csv":
        out.write(_csv(result))
    else:
        _table(result, merchant_id, start, end, Console(file=out, width=120))


def _row(day: DayTally) -> dict[str, Any]:
    return {
        "day": day.day.isoformat(),
        "platform_rows": day.platform_rows,
        "warehouse_rows": day.warehouse_rows,
        **{kind.value: day.counts[kind] for kind in Difference},
        "repaired": day.repaired,
    }


def _totals(result: VerifyResult) -> dict[str, Any]:
    return {
        "platform_rows": result.platform_rows,
        "warehouse_rows": result.warehouse_rows,
        **{kind.value: result.total(kind) for kind in Difference},
        "repaired": result.repaired,
    }


def _document(
    result: VerifyResult, merchant_id: str, start: datetime, end: datetime
) -> dict[str, Any]:
    return {
        "merchant_id": merchant_id,
        "created_from": start.isoformat(),
        "created_to": end.isoformat(),
        "repair": result.repair,
        "clean": result.clean,
        "days": [_row(day) for day in result.days],
        "totals": _totals(result),
        "examples": {kind.value: result.examples(kind) for kind in Difference},
    }


def _csv(result: VerifyResult) -> str:
    """One row per UTC day, then a ``total`` row."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    for day in result.days:
        writer.writerow(_row(day))
    writer.writerow({"day": "total", **_totals(result)})
    return buffer.getvalue()


_HEADERS: Final = {
    "platform_rows": "platform",
    "warehouse_rows": "warehouse",
    Difference.MISSING: "missing",
    Difference.BEHIND: "behind",
    Difference.DIFFERENT: "different",
    Difference.WAREHOUSE_ONLY: "warehouse only",
    Difference.AHEAD: "ahead",
    "repaired": "repaired",
}


def _table(
    result: VerifyResult, merchant_id: str, start: datetime, end: datetime, console: Console
) -> None:
    names = [name for name in _HEADERS if result.repair or name != "repaired"]
    table = Table(
        title=f"{merchant_id}: the platform's records against the warehouse",
        caption=f"created in [{start.isoformat()}, {end.isoformat()})",
    )
    table.add_column("UTC day")
    for name in names:
        table.add_column(_HEADERS[name], justify="right")
    for day in result.days:
        row = _row(day)
        table.add_row(row["day"], *(f"{row[str(name)]:,}" for name in names))
    table.add_section()
    totals = _totals(result)
    table.add_row("total", *(f"{totals[str(name)]:,}" for name in names), style="bold")
    console.print(table)
    for kind in Difference:
        examples = result.examples(kind)
        if examples:
            more = result.total(kind) - len(examples)
            tail = f" and {more:,} more" if more > 0 else ""
            console.print(f"{_HEADERS[kind]}: {', '.join(examples)}{tail}")
    if result.clean:
        console.print("complete and exact: nothing missing, behind or different")
    else:
        verdict = f"{result.faults:,} rows missing, behind or different"
        if result.repair:
            verdict += f"; {result.repaired:,} repaired from the platform's records"
        console.print(verdict)
