"""``recordsync verify``: is a range of the warehouse complete and exact?  A yes, or a list.

The platform's records of ``[from, to)`` are read again (``GET /v1/records``, windows of at
most 24 h aligned on UTC days, each paged by cursor) at the lowest budget priority and
compared with the warehouse, record by record and field by field, by ``recordsync.sync.verify``
(what counts as which difference: ``recordsync.sync.comparison``).

The merchant's rate limit is spent by one process at a time (spec: Limits, "Record rate"; a
second process cannot see the first one's budget).  So, like ``backfill``, verify first tries
to take the merchant's lease:

- no daemon holds the merchant: verify holds it for the run (a daemon starting meanwhile
  waits), reads inside its own budget, and ``--repair`` writes are fenced by its own epoch;
- a daemon holds it: the run is handed to that holder through the warehouse (a ``sync_requests``
  row, ``commands.handover``), which runs the same ``verify_range`` inside ITS budget at the
  lowest priority, beside its tail, with repairs fenced by its own epoch, and stores the
  findings for this command to print. One process spends the merchant's limit, and one writer
  (the lease holder) writes, whichever way it runs.

A paused merchant is refused, a plain verify too (the platform sees no request for a paused
merchant), and a verify running here when the merchant is paused stops within a tick
(``pause_watch``), concluding nothing (exit 3).

``--repair`` writes rows only, never a cursor, through the revision guards
(``PageStore.repair_records``): a stored revision never goes down, rows only the warehouse
has are never deleted.
"""

from __future__ import annotations

import csv
import io
import sys
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TextIO

import orjson
import structlog
from prometheus_client import CollectorRegistry, write_to_textfile
from rich.console import Console
from rich.table import Table

from recordsync.core.errors import (
    ConfigurationError,
    RecordSyncError,
    ShutdownRequestedError,
)
from recordsync.core.settings import Settings
from recordsync.core.stopping import Stopper
from recordsync.logs import process_context
from recordsync.metrics.verify_file import record_verify_run
from recordsync.service.commands.console import PipeConsole
from recordsync.service.commands.handover import DoneThere, HeldHere
from recordsync.service.commands.merchant_command import MerchantCommand
from recordsync.service.commands.pause_watch import PauseWatch, refuse_before_any_request
from recordsync.service.commands.progress import RichProgress
from recordsync.service.signals import stop_on_signals
from recordsync.sync.comparison import FAULTS, Difference, verify_document
from recordsync.sync.verify import verify_range
from recordsync.warehouse import HolderRequest, RequestKind

log = structlog.get_logger("recordsync")

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
    A run that cannot finish raises, and the command exits 3 (``cli.EXIT_INCOMPLETE``).
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
    what = "verify --repair" if repair else "verify"
    refuse_before_any_request(settings.database_url, merchant.merchant_id, what=what)
    with (
        stop_on_signals(stopper) as signals,
        MerchantCommand(settings, merchant.merchant_id, stopper, name="verify") as command,
    ):
        watch: PauseWatch | None = None  # once it runs here
        handover = command.hand_over(
            RequestKind.VERIFY,
            # Keyed by what it compares: the same verify asked again (cron under `timeout`)
            # follows the one pending rather than queueing another.
            ask=lambda: command.warehouse.requests.ask(
                command.merchant_id,
                RequestKind.VERIFY,
                start,
                end,
                key=verify_key(start, end, repair=repair),
                repair=repair,
            ),
            what=what,
            handed_over=lambda request_id: log.info(
                "verify_handed_over",
                request_id=request_id,
                holder=command.session.holders().get(command.merchant_id),
            ),
        )

        def here(held: HeldHere, work: Stopper) -> dict[str, Any]:
            nonlocal watch
            store = command.holding(held.epoch)
            # Held here, it obeys a pause as a daemon would: within a tick (pause_watch).
            watch = PauseWatch(
                command.warehouse.controls.paused,
                command.merchant_id,
                stopper,
                look_every=command.settings.fleet_tick,
            )
            options = command.engines.options
            with watch, progress or nullcontext():
                result = verify_range(
                    command.client,
                    store,
                    start,
                    end,
                    page_size=options.page_size,
                    repair=repair,
                    stopper=work,
                    progress=progress,
                    give_up_unreachable=options.give_up_unreachable,
                    demand=command.engines.demand,
                )
            return verify_document(result, command.merchant_id, start, end)

        try:
            outcome = handover.run(here)
            document = _findings(outcome.request) if isinstance(outcome, DoneThere) else outcome
        except ShutdownRequestedError:
            # Exit 130/143 (a signal) or 3 (cli.EXIT_INCOMPLETE), never 1: "differences found".
            what_now = "nothing was concluded; run it again"
            if signals.signals:
                cancelled = handover.interrupted()
                what_now = what_now if cancelled is None else f"{cancelled}; {what_now}"
            log.info("verify_interrupted", action=what_now)
            interrupted = signals.interrupted(what_now)
            if interrupted is not None:
                raise interrupted from None
            paused = None if watch is None else watch.error(what, f"{what_now} once it is resumed")
            if paused is not None:
                raise paused from None
            raise
    # A pause that stopped it short: what it found proves nothing (exit 3).
    paused = None if watch is None else watch.error(what, "nothing was concluded; run it again")
    if paused is not None:
        raise paused
    _report(document, metrics_file)
    render(document, fmt=fmt, out=out)
    return 0 if document["clean"] else 1


def verify_key(start: datetime, end: datetime, *, repair: bool) -> str:
    """What a verify compares, as its request's key: asked twice, followed once."""
    return f"verify:{start.isoformat()}/{end.isoformat()}" + (":repair" if repair else "")


def _findings(request: HolderRequest) -> dict[str, Any]:
    """The findings the holder stored with the request it ran."""
    if request.result is None:
        raise RecordSyncError(f"verify request {request.id} ended at its holder without findings")
    document: dict[str, Any] = orjson.loads(request.result)
    return document


def _report(document: dict[str, Any], metrics_file: Path | None) -> None:
    """The run's log event, and its metrics for node_exporter's textfile collector."""
    totals = document["totals"]
    counts = {kind.value: totals[kind.value] for kind in Difference}
    fields: dict[str, Any] = {
        "created_from": document["created_from"],
        "created_to": document["created_to"],
        "platform_rows": totals["platform_rows"],
        "warehouse_rows": totals["warehouse_rows"],
        "repair": document["repair"],
        "repaired": totals["repaired"],
        **counts,
    }
    if document["clean"]:
        log.info("verify_finished", **fields)
    else:
        log.error(
            "verify_found_differences",
            action="repaired what the platform returned"
            if document["repair"]
            else "run again with --repair, or investigate (docs/operations.md)",
            **fields,
        )
    if metrics_file is not None:
        registry = CollectorRegistry()
        record_verify_run(
            registry,
            document["merchant_id"],
            clean=document["clean"],
            differences=counts,
            repaired=totals["repaired"],
        )
        write_to_textfile(str(metrics_file), registry)


# -- output -------------------------------------------------------------------------------------


def render(document: dict[str, Any], *, fmt: str, out: TextIO) -> None:
    """The findings (``verify_document``) as a table, JSON or CSV."""
    if fmt == "json":
        out.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif fmt == "csv":
        out.write(_csv(document))
    else:
        _table(document, PipeConsole(file=out, width=120))


def _csv(document: dict[str, Any]) -> str:
    """One row per UTC day, then a ``total`` row."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    for day in document["days"]:
        writer.writerow(day)
    writer.writerow({"day": "total", **document["totals"]})
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


def _table(document: dict[str, Any], console: Console) -> None:
    repair = document["repair"]
    names = [str(name) for name in _HEADERS if repair or name != "repaired"]
    table = Table(
        title=f"{document['merchant_id']}: the platform's records against the warehouse",
        caption=f"created in [{document['created_from']}, {document['created_to']})",
    )
    table.add_column("UTC day")
    for name in names:
        table.add_column(_HEADERS[name], justify="right")
    for row in document["days"]:
        table.add_row(row["day"], *(f"{row[name]:,}" for name in names))
    table.add_section()
    totals = document["totals"]
    table.add_row("total", *(f"{totals[name]:,}" for name in names), style="bold")
    console.print(table)
    for kind in Difference:
        examples = document["examples"][kind.value]
        if examples:
            more = totals[kind.value] - len(examples)
            tail = f" and {more:,} more" if more > 0 else ""
            console.print(f"{_HEADERS[kind]}: {', '.join(examples)}{tail}")
    faults = sum(totals[kind.value] for kind in FAULTS)
    if document["clean"]:
        console.print("complete and exact: nothing missing, behind or different")
    else:
        verdict = f"{faults:,} rows missing, behind or different"
        if repair:
            verdict += f"; {totals['repaired']:,} repaired from the platform's records"
        console.print(verdict)
