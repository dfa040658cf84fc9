"""``recordsync report``: the daily summary views over the last days of data, as text or data.

What it shows (docs/bi.md): per game and currency (named from the game catalogue, the
game_id kept beside the name), per game provider and currency, per player and currency, or
per currency,
the rounds by status and the exact sums of bet, payout, refund, the players' net and the
operator's gross gaming revenue (GGR = bet - payout - refund), over a period of UTC days.

The period ends at the newest UTC day that has records in the warehouse (by ``created_at``),
NOT at today's date on the local clock, and reaches ``days`` days back from there.  So a
report of a warehouse restored from a backup, or of a sync that is stopped, still shows its
latest data, and two machines with different clocks print the same report.  "Data as of"
comes from the ``sync_freshness`` view.

Formats: ``table`` (for reading, ``text_table``), ``csv`` and ``json`` (for scripts).  Amounts are
exact decimal strings with 4 fraction digits in csv and json, never floats; amounts that
cannot be summed exactly (SQLite only, beyond +-922337203685477.5807) are empty / null.

Reading is ``build_report`` (the warehouse's views) and summing is ``summarize`` (pure, in
``Decimal``); the renderers only format.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Context, Decimal, Inexact, localcontext
from typing import Any, Final, TextIO

from recordsync.core.errors import ConfigurationError
from recordsync.core.settings import Settings
from recordsync.core.times import format_time
from recordsync.service.commands.text_table import Column, table_lines
from recordsync.warehouse import DailySummary, Freshness, GameName
from recordsync.warehouse.reader import WarehouseReader

GROUPINGS: Final = ("game", "provider", "player", "currency")
FORMATS: Final = ("table", "csv", "json")
MAX_DAYS: Final = 3660

COUNTS: Final = ("rounds", "rounds_open", "rounds_settled", "rounds_void")
AMOUNTS: Final = ("bet_amount", "payout_amount", "refund_amount", "net_amount", "ggr_amount")
# The columns that name a row's subject, per grouping (the game's are named from the catalogue).
_SUBJECT_COLUMNS: Final = {
    "game": ("game_id", "game_name", "provider_name"),
    "provider": ("provider_code", "provider_name"),
    "player": ("player_id",),
    "currency": (),
}
_FOURTH: Final = Decimal("0.0001")
# Sums of NUMERIC(30,4) amounts over many days: far wider than needed, and Inexact trapped,
# so a sum can never be silently rounded.
_EXACT: Final = Context(prec=100, traps=[Inexact])


@dataclass(frozen=True, slots=True)
class ReportRow:
    """One line of the report: a game, provider or player (None when by currency) in one
    currency.  ``name`` is the game's or provider's name from the catalogue and ``provider``
    a game's provider name (None when the catalogue does not name them)."""

    subject: str | None
    currency: str
    rounds: int
    rounds_open: int
    rounds_settled: int
    rounds_void: int
    bet_amount: Decimal | None
    payout_amount: Decimal | None
    refund_amount: Decimal | None
    net_amount: Decimal | None
    ggr_amount: Decimal | None
    name: str | None = None
    provider: str | None = None


@dataclass(frozen=True, slots=True)
class Report:
    merchant_id: str
    by: str
    days: int
    first_day: date | None  # None: the merchant has no records in the warehouse
    last_day: date | None
    freshness: Freshness | None
    rows: tuple[ReportRow, ...]
    totals: tuple[ReportRow, ...]  # one per currency


def report(
    warehouse: WarehouseReader,
    merchant_id: str,
    *,
    days: int = 7,
    by: str = "game",
    fmt: str = "table",
    out: TextIO,
) -> None:
    """Write the report of the last ``days`` UTC days of data to ``out``.

    Invalid ``days``, ``by`` or ``fmt`` raise ``ConfigurationError`` naming the choices.
    """
    report_merchants(warehouse, [merchant_id], days=days, by=by, fmt=fmt, out=out)


def build_report(warehouse: WarehouseReader, merchant_id: str, *, days: int, by: str) -> Report:
    """Read the views for the period (see the module docstring) and sum them per group."""
    if by not in GROUPINGS:
        raise ConfigurationError(f"report by {by!r}: use one of {', '.join(GROUPINGS)}")
    if not 1 <= days <= MAX_DAYS:
        raise ConfigurationError(f"report days must be between 1 and {MAX_DAYS}, got {days}")
    last_day = warehouse.newest_record_day(merchant_id)
    freshness = warehouse.freshness(merchant_id)
    if last_day is None:
        return Report(merchant_id, by, days, None, None, freshness, (), ())
    first_day = last_day - timedelta(days=days - 1)
    daily = warehouse.daily_summaries(
        merchant_id,
        per="player" if by == "player" else "game",
        first_day=first_day,
        last_day=last_day,
    )
    names = warehouse.game_names(merchant_id) if by in {"game", "provider"} else {}
    return Report(
        merchant_id=merchant_id,
        by=by,
        days=days,
        first_day=first_day,
        last_day=last_day,
        freshness=freshness,
        rows=tuple(summarize(daily, by=by, names=names)),
        totals=tuple(summarize(daily, by="currency")),
    )


def summarize(
    daily: Iterable[DailySummary], *, by: str, names: dict[str, GameName] | None = None
) -> list[ReportRow]:
    """Sum daily rows per (subject, currency), exactly; ordered by currency, GGR (highest
    first; unknown last), then subject.

    ``names`` (game_id -> the catalogue's entry) names the games, and by provider groups
    the games' rows by their provider's code (None: games the catalogue never listed).
    """
    names = names or {}
    groups: dict[tuple[str | None, str], list[DailySummary]] = {}
    for row in daily:
        subject: str | None = row.subject
        if by == "currency":
            subject = None
        elif by == "provider":
            game = names.get(row.subject)
            subject = None if game is None else game.provider_code
        groups.setdefault((subject, row.currency), []).append(row)
    rows = []
    for (subject, currency), members in groups.items():
        name, provider = _naming(by, subject, members, names)
        rows.append(
            ReportRow(
                subject,
                currency,
                *(sum(getattr(row, count) for row in members) for count in COUNTS),
                *(_exact_sum(getattr(row, amount) for row in members) for amount in AMOUNTS),
                name=name,  # type: ignore[misc]
                provider=provider,
            )
        )
    return sorted(rows, key=_order)


def _naming(
    by: str, subject: str | None, members: list[DailySummary], names: dict[str, GameName]
) -> tuple[str | None, str | None]:
    """``(name, provider)`` of a row: the game's name and provider, or the provider's name."""
    if by == "game" and subject is not None and subject in names:
        return names[subject].name, names[subject].provider_name
    if by == "provider":
        for member in members:
            entry = names.get(member.subject)
            if entry is not None and entry.provider_name is not None:
                return entry.provider_name, None
    return None, None


def _exact_sum(values: Iterable[Decimal | None]) -> Decimal | None:
    """The exact sum with 4 fraction digits, or None when any part is unknown."""
    total = Decimal(0)
    with localcontext(_EXACT):
        for value in values:
            if value is None:
                return None
            total += value
        return total.quantize(_FOURTH)


def _order(row: ReportRow) -> tuple[Any, ...]:
    ggr = row.ggr_amount
    return (row.currency, ggr is None, -(ggr or 0), row.subject or "")


# -- rendering ----------------------------------------------------------------------------------


def _amount(value: Decimal | None) -> str | None:
    """Exact text, never an exponent: ``1500000000000000.3500``, ``-0.5000``."""
    return None if value is None else f"{value:f}"


def _columns(by: str) -> list[str]:
    return [*_SUBJECT_COLUMNS[by], "currency", *COUNTS, *AMOUNTS]


def _subject_values(by: str, row: ReportRow) -> list[str | None]:
    if by == "game":
        return [row.subject, row.name, row.provider]
    if by == "provider":
        return [row.subject, row.name]
    return [row.subject] if by == "player" else []


def _values(by: str, row: ReportRow) -> list[Any]:
    counts = [getattr(row, count) for count in COUNTS]
    return [
        *_subject_values(by, row),
        row.currency,
        *counts,
        *(_amount(getattr(row, a)) for a in AMOUNTS),
    ]


def render_csv(report: Report, out: TextIO) -> None:
    """A header and one line per row; an unknown amount is an empty field."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_columns(report.by))
    writer.writerows(_values(report.by, row) for row in report.rows)


def render_csv_grouped(reports: Sequence[Report], out: TextIO) -> None:
    """Several merchants' reports (of the same grouping) as one CSV, ``merchant_id`` first."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["merchant_id", *_columns(reports[0].by)])
    for one in reports:
        writer.writerows([one.merchant_id, *_values(one.by, row)] for row in one.rows)


def render_json(report: Report, out: TextIO) -> None:
    """One object: the period, the freshness, the rows and the per-currency totals."""

    json.dump(_document(report), out, indent=2, ensure_ascii=False)
    out.write("\n")


def render_json_grouped(reports: Sequence[Report], out: TextIO) -> None:
    """Several merchants' reports as ``{"merchants": [document, ...]}``."""
    document = {"merchants": [_document(one) for one in reports]}
    json.dump(document, out, indent=2, ensure_ascii=False)
    out.write("\n")


def _document(report: Report) -> dict[str, Any]:
    def objects(by: str, rows: Sequence[ReportRow]) -> list[dict[str, Any]]:
        return [dict(zip(_columns(by), _values(by, row), strict=True)) for row in rows]

    return {
        "merchant_id": report.merchant_id,
        "by": report.by,
        "days": report.days,
        "first_day": None if report.first_day is None else report.first_day.isoformat(),
        "last_day": None if report.last_day is None else report.last_day.isoformat(),
        "freshness": _freshness_json(report.freshness),
        "rows": objects(report.by, report.rows),
        "totals": objects("currency", report.totals),
    }


def _freshness_json(freshness: Freshness | None) -> dict[str, Any] | None:
    if freshness is None:
        return None

    def time(value: Any) -> str | None:
        return None if value is None else format_time(value)

    return {
        "phase": freshness.phase.value,
        "last_projection_as_of": time(freshness.last_projection_as_of),
        "last_commit_at": time(freshness.last_commit_at),
        "staleness_seconds": freshness.staleness_seconds,
    }


_HEADERS: Final = {
    "game_id": "game id",
    "game_name": "game",
    "provider_name": "provider",
    "provider_code": "provider code",
    "player_id": "player",
    "currency": "currency",
    "rounds": "rounds",
    "rounds_open": "open",
    "rounds_settled": "settled",
    "rounds_void": "void",
    "bet_amount": "bet",
    "payout_amount": "payout",
    "refund_amount": "refund",
    "net_amount": "players' net",
    "ggr_amount": "GGR",
}


def render_table(report: Report, out: TextIO) -> None:
    """The rows, then the per-currency totals below a rule, with the period as caption."""
    if report.first_day is None or report.last_day is None:
        out.write(f"no records for merchant {report.merchant_id!r} in the warehouse\n")
        _print_freshness(report.freshness, out)
        return
    columns = [
        Column(_HEADERS[name], right=name in COUNTS or name in AMOUNTS)
        for name in _columns(report.by)
    ]
    sections = [[_cells(report.by, row, None) for row in report.rows]]
    if report.by != "currency":
        sections.append([_cells(report.by, row, "total") for row in report.totals])
    lines = table_lines(
        columns,
        sections,
        title=f"{report.merchant_id}: rounds and money by {report.by}",
        caption=(
            f"UTC days {report.first_day} to {report.last_day}: {report.days} days back from "
            "the newest day with data"
        ),
    )
    out.writelines(f"{line}\n" for line in lines)
    _print_freshness(report.freshness, out)


def _cells(by: str, row: ReportRow, label: str | None) -> list[str]:
    """Thousands grouped for reading; still every digit.  ``label`` replaces the subject
    cells (the totals); a subject the catalogue does not name shows as a dash."""
    if label is not None:
        subject = [label, *([""] * (len(_SUBJECT_COLUMNS[by]) - 1))] if _SUBJECT_COLUMNS[by] else []
    else:
        subject = [value or "-" for value in _subject_values(by, row)]
    counts = [f"{getattr(row, count):,}" for count in COUNTS]
    amounts = [_shown(getattr(row, amount)) for amount in AMOUNTS]
    return [*subject, row.currency, *counts, *amounts]


def _shown(value: Decimal | None) -> str:
    return "n/a" if value is None else f"{value:,f}"


def _print_freshness(freshness: Freshness | None, out: TextIO) -> None:
    if freshness is None:
        out.write("data as of: never synced\n")
        return
    as_of = freshness.last_projection_as_of
    if as_of is None:
        out.write(f"data as of: not yet known (phase {freshness.phase.value})\n")
        return
    out.write(
        f"data as of {format_time(as_of)} ({freshness.staleness_seconds} s ago by the database "
        f"clock; phase {freshness.phase.value})\n"
    )


def report_merchants(
    warehouse: WarehouseReader,
    merchant_ids: Sequence[str],
    *,
    days: int = 7,
    by: str = "game",
    fmt: str = "table",
    out: TextIO,
) -> None:
    """The report of several merchants, grouped by merchant, in one output.

    One merchant's report stands alone, so a single-merchant deployment (or ``--merchant
    ID``) prints what it always printed.  Several: a table per merchant, one CSV with a
    leading ``merchant_id`` column, or ``{"merchants": [document, ...]}`` in JSON.
    """
    if fmt not in FORMATS:
        raise ConfigurationError(f"report format {fmt!r}: use one of {', '.join(FORMATS)}")
    built = [build_report(warehouse, merchant_id, days=days, by=by) for merchant_id in merchant_ids]
    if fmt == "csv":
        if len(built) == 1:
            render_csv(built[0], out)
        else:
            render_csv_grouped(built, out)
    elif fmt == "json":
        if len(built) == 1:
            render_json(built[0], out)
        else:
            render_json_grouped(built, out)
    else:
        for one in built:
            render_table(one, out)


def show_report(
    settings: Settings, *, days: int, by: str, fmt: str, merchant_id: str | None = None
) -> int:
    """``recordsync report``: the BI views as a table, CSV or JSON on stdout; the merchant
    named, or every configured merchant."""
    if merchant_id is not None or not settings.merchants:
        merchant_ids = [settings.merchant(merchant_id).merchant_id]
    else:
        merchant_ids = [merchant.merchant_id for merchant in settings.merchants]
    warehouse = WarehouseReader.open(settings.database_url)
    try:
        report_merchants(warehouse, merchant_ids, days=days, by=by, fmt=fmt, out=sys.stdout)
    finally:
        warehouse.close()
    return 0
