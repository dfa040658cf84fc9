"""``recordsync fields list`` and ``recordsync fields promote NAME --type TYPE [--dry-run]``.

``list`` shows the record fields recordsync knows, the promoted ones (with how far their
filling got) and the unknown ones the platform added (kept in ``extra_fields``).  ``promote``
makes one a typed column of ``records`` and ``record_revisions`` without reading the history
again (``warehouse.fields.promotion``); the sync may run meanwhile, and a promotion stopped
at any point is finished by running the same command again.

Exit codes: 0 done (or, with ``--dry-run``, what it would do); 1 the warehouse failed
meanwhile (run it again: it resumes); 2 a name or type it cannot take, or a field promoted
already with another type.  Each ends with one plain line.
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
from recordsync.service.commands.console import PipeConsole
from recordsync.warehouse import Warehouse
from recordsync.warehouse.fields.promoted import TYPES, check_name
from recordsync.warehouse.fields.promotion import PromotionRefused


def _open(settings: Settings) -> Warehouse:
    return Warehouse.connect(settings.database_url, keep_revisions=settings.keep_revisions)


def list_fields(settings: Settings, *, as_json: bool) -> int:
    warehouse = _open(settings)
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


def promote_field(settings: Settings, name: str, kind: str, *, dry_run: bool) -> int:
    problem = check_name(name)
    if problem is not None:
        raise ConfigurationError(f"fields promote: {problem}")
    if kind not in TYPES:
        raise ConfigurationError(f"fields promote: --type must be one of {', '.join(TYPES)}")
    warehouse = _open(settings)
    try:
        plan = warehouse.fields.promotion_plan(name, kind)
        carrying = ", ".join(f"{n:,} rows of {table}" for table, n in plan.carrying.items())
        if dry_run:
            state = "" if plan.state is None else f" (promoted already: {plan.state})"
            sys.stderr.write(
                f"would add the {kind} column {name} to records and record_revisions and fill "
                f"it from extra_fields: {carrying} carry it{state}\n"
            )
            return 0
        try:
            result = warehouse.fields.promote_field(name, kind)
        except PromotionRefused as exc:
            raise ConfigurationError(f"fields promote: {exc}") from None
    finally:
        warehouse.close()
    sys.stderr.write(
        f"promoted {name} as {kind}: {result.filled:,} rows filled from extra_fields, "
        f"{result.unfit:,} did not fit {kind} (left NULL, raw text kept in extra_fields)\n"
    )
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
            row["first_seen_at"].isoformat(timespec="seconds"),
            row["last_seen_at"].isoformat(timespec="seconds"),
        )
    console.print(table)


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {
        key: value.isoformat() if hasattr(value, "isoformat") else value
        for key, value in row.items()
    }
