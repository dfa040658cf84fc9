"""``recordsync fields list`` and ``recordsync fields promote NAME --type TYPE [--dry-run]``.

``list`` shows the record fields recordsync knows, the promoted ones (with how far their
filling got) and the unknown ones the platform added (kept in ``extra_fields``).  ``promote``
makes one a typed column of ``records`` and ``record_revisions`` without reading the history
again (``warehouse.fields.promotion``); the sync may run meanwhile, and a promotion stopped
at any point is finished by running the same command again.

Exit codes: 0 done (or, with ``--dry-run``, what it would do); 1 the warehouse failed
meanwhile (run it again: it resumes); 130 or 143 stopped by SIGINT or SIGTERM (the same: run
it again); 2 a name or type it cannot take, a field promoted
already with another type (its dry run ends so too), or a schema this version does not read
(never migrated: run ``recordsync migrate``).  Each ends with one plain line.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from recordsync.core.errors import ConfigurationError
from recordsync.core.settings import Settings
from recordsync.platform.unknown_members import KNOWN_RECORD_FIELDS
from recordsync.service.commands.console import PipeConsole, utc_to_the_second
from recordsync.service.signals import end_on_signals
from recordsync.warehouse import Warehouse
from recordsync.warehouse.fields.promoted import DONE, FILLING, TYPES, check_name
from recordsync.warehouse.fields.promotion import PromotionRefused


def list_fields(settings: Settings, *, as_json: bool) -> int:
    with end_on_signals("nothing was changed"):
        warehouse = Warehouse.for_reading(settings.database_url)
        try:
            view = warehouse.fields.list_fields()
        finally:
            warehouse.close()
    if as_json:
        payload = {
            "known": sorted(KNOWN_RECORD_FIELDS),
            "promoted": [_plain(row) for row in view.promoted],
            "unknown": [_plain(row) for row in view.unknown],
        }
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    console = PipeConsole()
    console.print("known: " + ", ".join(sorted(KNOWN_RECORD_FIELDS)), soft_wrap=True)
    _promoted_table(console, view.promoted)
    _unknown_table(console, view.unknown)
    sys.stderr.write(
        f"{len(KNOWN_RECORD_FIELDS)} known, {len(view.promoted)} promoted, "
        f"{len(view.unknown)} unknown fields\n"
    )
    return 0


def promote_field(
    settings: Settings, name: str, kind: str, *, dry_run: bool, unseen: bool = False
) -> int:
    problem = check_name(name)
    if problem is not None:
        raise ConfigurationError(f"fields promote: {problem}")
    if kind not in TYPES:
        raise ConfigurationError(f"fields promote: --type must be one of {', '.join(TYPES)}")
    if dry_run:
        with end_on_signals("nothing was changed"):
            return _dry_run(settings, name, kind, unseen=unseen)
    with end_on_signals("run the same command again: the promotion resumes where it stopped"):
        return _promote(settings, name, kind, unseen=unseen)


def _promote(settings: Settings, name: str, kind: str, *, unseen: bool) -> int:
    # No count of the rows first: over a year's tables it is a scan longer than a writer's
    # statement limit, and the fill counts what it fills anyway.
    warehouse = Warehouse.connect(settings.database_url, keep_revisions=settings.keep_revisions)
    try:
        # Never migrated, or another revision: exit 2 naming what to run, not a missing
        # table's exit 1 ("run it again", which would never help).
        warehouse.check_schema()
        held = _held(warehouse, name)
        if held is None and not unseen and not _seen(warehouse, name):
            raise ConfigurationError(f"fields promote: {_UNSEEN.format(name=name)}")
        try:
            result = warehouse.fields.promote_field(name, kind)
        except PromotionRefused as exc:
            raise ConfigurationError(f"fields promote: {exc}") from None
    finally:
        warehouse.close()
    # The counts are of both tables, as the dry run's are: said so, since they exceed the
    # records.  Run again once done, the same counts are no new work: said so too.
    counts = (
        f"{result.filled:,} rows of records and record_revisions filled from extra_fields, "
        f"{result.unfit:,} did not fit {kind} (left NULL, raw text kept in extra_fields)"
    )
    if held is not None and held["state"] == DONE:
        said = f"{name} was promoted already as {kind}, nothing to do: {counts}"
    else:
        said = f"promoted {name} as {kind}: {counts}"
    sys.stderr.write(said + "\n")
    return 0


# A column is for good: a name no page has carried is more likely a typo than a field to come.
_UNSEEN = (
    "no page has carried {name} yet (fields list shows the fields seen); "
    "--unseen promotes it before it arrives"
)


def _seen(warehouse: Warehouse, name: str) -> bool:
    """Whether any merchant's pages carried ``name`` (its sightings)."""
    return name in {row["field"] for row in warehouse.fields.list_fields().unknown}


def _held(warehouse: Warehouse, name: str) -> dict[str, Any] | None:
    """The field's row in the promoted fields (its type and state), or None."""
    return {row["field"]: row for row in warehouse.fields.list_fields().promoted}.get(name)


def _dry_run(settings: Settings, name: str, kind: str, *, unseen: bool) -> int:
    """What the promotion would do, read with the read commands' limits; a field promoted
    already with another type ends as the promotion itself would (exit 2)."""
    warehouse = Warehouse.for_reading(settings.database_url)
    try:
        held = _held(warehouse, name)
        if held is not None and held["type"] != kind:
            raise ConfigurationError(
                f"fields promote: {name} is promoted already, as {held['type']}"
            )
        plan = warehouse.fields.promotion_plan(name, kind)
        refused = held is None and not unseen and not _seen(warehouse, name)
    finally:
        warehouse.close()
    carrying = ", ".join(f"{n:,} rows of {table}" for table, n in plan.carrying.items())
    if plan.state is None:
        said = (
            f"would add the {kind} column {name} to records and record_revisions and fill it "
            f"from extra_fields: {carrying} carry it"
        )
    else:
        again = "finishes its fill" if plan.state == FILLING else "changes nothing"
        said = (
            f"{name} is promoted already as {kind} ({plan.state}): running it again {again}; "
            f"{carrying} carry it"
        )
    if refused:
        said = f"{said}; but {_UNSEEN.format(name=name)}"
    sys.stderr.write(said + "\n")
    return 0


def _promoted_table(console: Console, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    table = Table(title="promoted fields")
    for column in ("field", "type", "state", "rows filled", "did not fit"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["field"],
            row["type"],
            row["state"],
            f"{row['rows_filled']:,}",
            str(row["rows_unfit"]),
        )
    console.print(table)


def _unknown_table(console: Console, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    table = Table(title="unknown fields (kept in extra_fields)")
    for column in ("field", "merchants", "first seen", "last seen"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["field"],
            str(row["merchants"]),
            utc_to_the_second(row["first_seen_at"]),
            utc_to_the_second(row["last_seen_at"]),
        )
    console.print(table)


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A row as JSON takes it: times as ISO text, and keys as plain ``str`` (a promoted row's
    keys are SQLAlchemy's ``quoted_name``, a subclass orjson refuses)."""
    return {
        str(key): value.isoformat() if hasattr(value, "isoformat") else value
        for key, value in row.items()
    }
