"""Rollups: the daily summary views served from totals that triggers on ``records`` maintain.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02

``daily_game_summary`` and ``daily_player_summary`` keep their names, columns and meaning
(revision 0003), but no longer aggregate ``records`` on the fly:

- ``summary_deltas``: append-only.  Triggers on ``records`` add, for every row inserted,
  updated or deleted, whoever writes it (a page, ``verify --repair``, an operator's SQL, a
  replica of an older version), the signed change of that row's contribution: the old row's
  negated, the new row's added.  PostgreSQL: statement triggers over transition tables (an
  ``INSERT ... ON CONFLICT DO UPDATE`` fires its INSERT and its UPDATE trigger once each,
  with the rows each touched), an update's two halves summed per group, groups that sum to
  nothing dropped; a TRUNCATE of ``records`` empties the summaries too.  MariaDB and SQLite:
  row triggers, which skip an update that changes nothing summed.  Appending never updates a
  shared row, so page commits running side by side never wait for each other here.
- ``daily_game_totals`` and ``daily_player_totals``: the deltas folded in, a row per group.
  The fold (``warehouse.bi.rollups``) runs in bounded batches in the merchant's holder.
- ``summary_builds``: per merchant, the UTC days whose rows existed before this revision and
  that the totals do not hold yet, ``next_day`` to ``last_day``; built one day at a time by
  the holder (``rollups``), which deletes the row when done.
- The views sum the totals and the deltas not folded yet, per group, and take the days still
  to build from ``records`` itself: exact at every moment, the current day included.

Money stays exact: PostgreSQL and MariaDB sum the NUMERIC / DECIMAL amounts (the totals are
``NUMERIC`` / ``DECIMAL(65,4)``); SQLite keeps, per amount, how many rows had integer units
and the sums of their two parts ``u / 10**8`` and ``u % 10**8`` (revision 0003 explains the
split), each a sum that adds and subtracts exactly; the views carry and print them as 0003's
did, NULL when a row of the group has no units.

Why the views are exact while the totals are built (an existing warehouse): the triggers and
the ``summary_builds`` rows are made in one step the writers cannot cross (PostgreSQL: one
transaction, whose CREATE TRIGGER waits for the writers in flight and holds the new ones
until it commits; MariaDB: CREATE TRIGGER waits for every open transaction on ``records``,
and the days are read after it).  So every row change after it has its delta, and every row
before it lies in a day to build.  A day to build is read from ``records`` by the views, its
totals and deltas left out; building it replaces its totals with an aggregation of its rows
and deletes its deltas, in one transaction that sees both at one moment (PostgreSQL: one
REPEATABLE READ snapshot: the page commits it does not see keep their deltas, which then
count; MariaDB: locking reads under the merchant's lease row, so no page of the merchant
commits meanwhile; SQLite: one writer).  Hence totals + deltas equal the rows of that day
from then on.

``additive``: only tables, triggers and views of the same columns are added; a replica of an
older version keeps writing ``records`` and reading the views, and the triggers keep the
summaries right for it (its merchants' deltas then wait for a holder of this version to be
folded, the views exact meanwhile).

The SQL is written out here rather than imported, so that this revision stays a fixed record.
"""

# ruff: noqa: S608 - every statement is built from this file's own names, never from input

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
additive = True

_MYSQL = ("mysql", "mariadb")
_ID = 255
_CODE = 64
_SPLIT = 100_000_000  # 10**8, as in revision 0003
_AMOUNTS = ("bet", "payout", "refund", "net")
_STATUSES = (("rounds_open", "OPEN"), ("rounds_settled", "SETTLED"), ("rounds_void", "VOID"))
_COUNTS = ("rounds", *(name for name, _ in _STATUSES))
_SUMMARIES = (("daily_game_summary", "game_id"), ("daily_player_summary", "player_id"))
_TOTALS = {"game_id": "daily_game_totals", "player_id": "daily_player_totals"}
_GROUP = ("merchant_id", "day", "game_id", "player_id", "currency")
_TRIGGERS = ("records_summary_insert", "records_summary_update", "records_summary_delete")
# (column of the view, amounts: the first one minus the others)
_SUMS = (
    ("bet_amount", ("bet",)),
    ("payout_amount", ("payout",)),
    ("refund_amount", ("refund",)),
    ("net_amount", ("net",)),
    ("ggr_amount", ("bet", "payout", "refund")),
)


def _backend() -> str:
    name = op.get_bind().dialect.name
    return "mysql" if name in _MYSQL else name


def _run(sql: str) -> None:
    """At the driver: the bodies hold colons and percent signs that are not parameters."""
    op.get_bind().exec_driver_sql(sql)


# -- what a row adds to its group -------------------------------------------------------------


def _measures(backend: str) -> list[str]:
    """The columns a delta and a total sum, in order."""
    if backend == "sqlite":
        amounts = [f"{a}_{part}" for a in _AMOUNTS for part in ("n", "hi", "lo")]
    else:
        amounts = [f"{a}_amount" for a in _AMOUNTS]
    return [*_COUNTS, *amounts]


def _day(backend: str, row: str) -> str:
    """The UTC day of ``row``'s created_at, as the views of revision 0003 compute it."""
    if backend == "postgresql":
        return f"CAST({row}.created_at AT TIME ZONE 'UTC' AS DATE)"
    if backend == "mysql":
        return f"CAST({row}.created_at AS DATE)"
    return f"substr({row}.created_at, 1, 10)"


def _contribution(backend: str, row: str, sign: int) -> list[str]:
    """``row``'s measures times ``sign`` (+1: it is there now; -1: it was)."""
    s = "" if sign > 0 else "-"
    values = [f"{s}1"]
    values += [
        f"CASE WHEN {row}.status = '{status}' THEN {s}1 ELSE 0 END" for _, status in _STATUSES
    ]
    for amount in _AMOUNTS:
        if backend == "sqlite":
            units = f"{row}.{amount}_units"
            values += [
                f"CASE WHEN {units} IS NULL THEN 0 ELSE {s}1 END",
                f"{s}coalesce({units} / {_SPLIT}, 0)",
                f"{s}coalesce({units} % {_SPLIT}, 0)",
            ]
        else:
            values.append(f"{s}{row}.{amount}_amount")
    return values


def _keyed(backend: str, row: str, sign: int) -> str:
    """SELECT list: the group of ``row`` and its signed measures, named."""
    keys = [f"{row}.merchant_id", _day(backend, row), f"{row}.game_id", f"{row}.player_id"]
    keys.append(f"{row}.currency")
    values = [*keys, *_contribution(backend, row, sign)]
    names = [*_GROUP, *_measures(backend)]
    return ", ".join(f"{value} AS {name}" for value, name in zip(values, names, strict=True))


def _summed(backend: str, source: str) -> str:
    """The rows of ``source`` (group and measures) summed per group, groups of all zeros left
    out: an update that moved no money and no count leaves no delta."""
    measures = _measures(backend)
    sums = ", ".join(f"SUM({m})" for m in measures)
    nonzero = " OR ".join(f"SUM({m}) <> 0" for m in measures)
    group = ", ".join(_GROUP)
    return f"SELECT {group}, {sums} FROM ({source}) c GROUP BY {group} HAVING {nonzero}"


def _into_deltas(backend: str) -> str:
    return f"INSERT INTO summary_deltas ({', '.join([*_GROUP, *_measures(backend)])}) "


def _summed_columns(backend: str) -> list[str]:
    """The columns whose change changes a row's contribution."""
    amounts = [f"{a}_units" if backend == "sqlite" else f"{a}_amount" for a in _AMOUNTS]
    return ["merchant_id", "created_at", "game_id", "player_id", "currency", "status", *amounts]


def _unchanged(backend: str) -> str:
    same = "<=>" if backend == "mysql" else "IS"
    return " AND ".join(f"OLD.{c} {same} NEW.{c}" for c in _summed_columns(backend))


# -- the triggers -----------------------------------------------------------------------------


def _postgres_triggers() -> list[str]:
    into = _into_deltas("postgresql")
    bodies = {
        "records_summary_insert": (
            "NEW TABLE AS new_rows",
            "INSERT",
            f"{into}SELECT {_keyed('postgresql', 'n', 1)} FROM new_rows n",
        ),
        "records_summary_update": (
            "OLD TABLE AS old_rows NEW TABLE AS new_rows",
            "UPDATE",
            into
            + _summed(
                "postgresql",
                f"SELECT {_keyed('postgresql', 'o', -1)} FROM old_rows o UNION ALL "
                f"SELECT {_keyed('postgresql', 'n', 1)} FROM new_rows n",
            ),
        ),
        "records_summary_delete": (
            "OLD TABLE AS old_rows",
            "DELETE",
            f"{into}SELECT {_keyed('postgresql', 'o', -1)} FROM old_rows o",
        ),
    }
    statements = []
    for name, (referencing, event, body) in bodies.items():
        statements += [
            (
                f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                f"$body$\nBEGIN\n    {body};\n    RETURN NULL;\nEND\n$body$"
            ),
            f"DROP TRIGGER IF EXISTS {name} ON records",
            (
                f"CREATE TRIGGER {name} AFTER {event} ON records REFERENCING {referencing} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
            ),
        ]
    statements += [
        (
            "CREATE OR REPLACE FUNCTION records_summary_truncate() RETURNS trigger "
            "LANGUAGE plpgsql AS $body$\nBEGIN\n"
            "    TRUNCATE summary_deltas, daily_game_totals, daily_player_totals, summary_builds;\n"
            "    RETURN NULL;\nEND\n$body$"
        ),
        "DROP TRIGGER IF EXISTS records_summary_truncate ON records",
        (
            "CREATE TRIGGER records_summary_truncate AFTER TRUNCATE ON records "
            "FOR EACH STATEMENT EXECUTE FUNCTION records_summary_truncate()"
        ),
    ]
    return statements


def _row_triggers(backend: str) -> list[str]:
    """MariaDB and SQLite: one delta row per row inserted or deleted; an update's two halves
    summed (one row when the group stays, none when nothing summed changed)."""
    statements = [f"DROP TRIGGER IF EXISTS {name}" for name in _TRIGGERS]
    if backend == "mysql":
        return statements + _mariadb_row_triggers()
    into = _into_deltas(backend)

    def values(row: str, sign: int) -> str:
        return f"SELECT {_keyed(backend, row, sign)}"

    inserted = f"{into}{values('NEW', 1)}"
    updated = into + _summed(backend, f"{values('OLD', -1)} UNION ALL {values('NEW', 1)}")
    deleted = f"{into}{values('OLD', -1)}"
    statements += [
        f"CREATE TRIGGER records_summary_insert AFTER INSERT ON records BEGIN {inserted}; END",
        (
            "CREATE TRIGGER records_summary_update AFTER UPDATE ON records "
            f"WHEN NOT ({_unchanged(backend)}) BEGIN {updated}; END"
        ),
        f"CREATE TRIGGER records_summary_delete AFTER DELETE ON records BEGIN {deleted}; END",
    ]
    return statements


def _mariadb_row_triggers() -> list[str]:
    """Every delta an ``INSERT ... VALUES`` of one row, never an ``INSERT ... SELECT``: InnoDB
    (``innodb_autoinc_lock_mode`` 1, the default) takes a bulk insert's table-level AUTO-INC
    lock on ``summary_deltas`` until the end of the page's statement, so two pages writing
    rows the other has locked deadlocked on it, reported as error 1467 ("Failed to read
    auto-increment value"); a row of known count takes only a short mutex."""
    into = _into_deltas("mysql")

    def row(name: str, sign: int) -> str:
        return f"{into}VALUES ({', '.join(_group_of(name) + _contribution('mysql', name, sign))})"

    same_group = " AND ".join(
        f"{old} <=> {new}" for old, new in zip(_group_of("OLD"), _group_of("NEW"), strict=True)
    )
    moved = [
        f"({new}) - ({old})"
        for new, old in zip(
            _contribution("mysql", "NEW", 1), _contribution("mysql", "OLD", 1), strict=True
        )
    ]
    any_moved = " OR ".join(f"{change} <> 0" for change in moved)
    summed = f"{into}VALUES ({', '.join(_group_of('NEW') + moved)})"
    each = "AFTER {} ON records FOR EACH ROW"
    return [
        f"CREATE TRIGGER records_summary_insert {each.format('INSERT')} {row('NEW', 1)}",
        (
            f"CREATE TRIGGER records_summary_update {each.format('UPDATE')} "
            f"BEGIN IF NOT ({_unchanged('mysql')}) THEN "
            f"IF {same_group} THEN IF {any_moved} THEN {summed}; END IF; "
            f"ELSE {row('OLD', -1)}; {row('NEW', 1)}; END IF; "
            "END IF; END"
        ),
        f"CREATE TRIGGER records_summary_delete {each.format('DELETE')} {row('OLD', -1)}",
    ]


def _group_of(row: str) -> list[str]:
    """MariaDB: ``row``'s group, in ``_GROUP`` order."""
    keys = (f"{row}.merchant_id", _day("mysql", row), f"{row}.game_id", f"{row}.player_id")
    return [*keys, f"{row}.currency"]


# -- the views --------------------------------------------------------------------------------


def _day_start(backend: str, day: str, *, after: bool = False) -> str:
    """The first instant of ``day`` (``after``: of the day after it), comparable with
    ``records.created_at`` in its index."""
    if backend == "postgresql":
        shifted = f"{day} + 1" if after else day
        return f"(CAST({shifted} AS TIMESTAMP) AT TIME ZONE 'UTC')"
    if backend == "mysql":
        shifted = f"{day} + INTERVAL 1 DAY" if after else day
        return f"CAST({shifted} AS DATETIME(6))"
    return f"date({day}, '+1 day')" if after else day


def _not_building(table: str) -> str:
    return (
        f"NOT EXISTS (SELECT 1 FROM summary_builds b WHERE b.merchant_id = {table}.merchant_id "
        f"AND {table}.day >= b.next_day AND {table}.day <= b.last_day)"
    )


def _arms(backend: str, subject: str, *, rollups: bool) -> str:
    """The rows the view sums: totals and deltas of the days built, and the rows of the days
    still to build (``rollups`` False: every row, as revision 0003's views read)."""
    measures = ", ".join(_measures(backend))
    keys = f"merchant_id, day, {subject}, currency"
    rows = f"SELECT {_keyed(backend, 'r', 1)} FROM records r"
    if not rollups:
        return rows
    # The builds first, so that no build left means no read of records at all (SQLite takes
    # a CROSS JOIN's left table as the outer loop; the servers find that order themselves).
    join = "CROSS JOIN" if backend == "sqlite" else "JOIN"
    building = (
        f"SELECT {_keyed(backend, 'r', 1)} FROM summary_builds b {join} records r "
        "ON r.merchant_id = b.merchant_id "
        f"AND r.created_at >= {_day_start(backend, 'b.next_day')} "
        f"AND r.created_at < {_day_start(backend, 'b.last_day', after=True)}"
    )
    return (
        f"SELECT {keys}, {measures} FROM {_TOTALS[subject]} t WHERE {_not_building('t')}\n"
        f"UNION ALL SELECT {keys}, {measures} FROM summary_deltas d WHERE {_not_building('d')}\n"
        f"UNION ALL SELECT {keys}, {measures} FROM ({building}) f"
    )


def _server_view(backend: str, name: str, subject: str, arms: str) -> str:
    integer = "BIGINT" if backend == "postgresql" else "SIGNED"
    counts = [f"CAST(SUM({count}) AS {integer}) AS {count}" for count in _COUNTS]
    sums = [
        " - ".join(f"SUM({amount}_amount)" for amount in amounts) + f" AS {column}"
        for column, amounts in _SUMS
    ]
    columns = ",\n    ".join(["merchant_id", "day", subject, "currency", *counts, *sums])
    return (
        f"CREATE VIEW {name} AS\nSELECT\n    {columns}\nFROM (\n{arms}\n) s\n"
        f"GROUP BY merchant_id, day, {subject}, currency\nHAVING SUM(rounds) <> 0"
    )


def _sqlite_view(name: str, subject: str, arms: str) -> str:
    """Revision 0003's carry, align and print, over the parts summed from the arms."""
    keys = ["merchant_id", "day", subject, "currency", *_COUNTS]
    kept = ", ".join(keys)
    totals = ["merchant_id", "day", subject, "currency", *(f"SUM({c}) AS {c}" for c in _COUNTS)]
    totals += [f"SUM({a}_{p}) AS {a}_{p}" for a in _AMOUNTS for p in ("n", "hi", "lo")]

    carried = []
    for column, amounts in _SUMS:
        counts = ", ".join(f"{amount}_n" for amount in amounts)
        count = counts if len(amounts) == 1 else f"min({counts})"
        hi = " - ".join(f"{amount}_hi" for amount in amounts)
        lo = " - ".join(f"{amount}_lo" for amount in amounts)
        carried += [
            f"{count} AS {column}_n",
            f"({hi}) + ({lo}) / {_SPLIT} AS {column}_h",
            f"({lo}) % {_SPLIT} AS {column}_l",
        ]

    aligned = []
    for column, _ in _SUMS:
        h, l = f"{column}_h", f"{column}_l"  # noqa: E741
        down, up = f"({h} > 0 AND {l} < 0)", f"({h} < 0 AND {l} > 0)"
        aligned += [
            f"{column}_n",
            f"{h} - {down} + {up} AS {h}",
            f"{l} + {_SPLIT} * ({down} - {up}) AS {l}",
        ]

    printed = []
    for column, _ in _SUMS:
        h, l = f"{column}_h", f"{column}_l"  # noqa: E741
        printed.append(
            f"CASE WHEN {column}_n < rounds THEN NULL ELSE "
            f"(CASE WHEN {h} < 0 OR {l} < 0 THEN '-' ELSE '' END) || "
            f"(CASE WHEN {h} <> 0 THEN abs({h}) || printf('%04d', abs({l}) / 10000) "
            f"ELSE abs({l}) / 10000 END) || '.' || printf('%04d', abs({l}) % 10000) "
            f"END AS {column}"
        )

    def select(columns: list[str], source: str) -> str:
        return "SELECT " + ",\n    ".join(columns) + f"\nFROM {source}"

    inner = (
        select(totals, f"(\n{arms}\n) s")
        + f"\nGROUP BY merchant_id, day, {subject}, currency\nHAVING SUM(rounds) <> 0"
    )
    level2 = select([kept, *carried], f"(\n{inner}\n)")
    level3 = select([kept, *aligned], f"(\n{level2}\n)")
    return f"CREATE VIEW {name} AS\n" + select([kept, *printed], f"(\n{level3}\n)")


def _named_view() -> str:
    """Revision 0006's, made again over the new ``daily_game_summary``."""
    summary = ["merchant_id", "day", "game_id", "currency", *_COUNTS]
    summary += [column for column, _ in _SUMS]
    names = [
        ("name", "game_name"),
        ("category", "category"),
        ("category_name", "category_name"),
        ("provider_code", "provider_code"),
        ("provider_name", "provider_name"),
    ]
    columns = ",\n    ".join(
        [*(f"s.{column}" for column in summary), *(f"g.{c} AS {alias}" for c, alias in names)]
    )
    return (
        f"CREATE VIEW daily_game_summary_named AS\nSELECT\n    {columns}\n"
        "FROM daily_game_summary s\n"
        "LEFT JOIN games g ON g.merchant_id = s.merchant_id AND g.game_id = s.game_id"
    )


def _create_views(backend: str, *, rollups: bool) -> None:
    # Dropped first: a run killed half-way (MariaDB commits each DDL statement by itself) runs
    # again whole; the named view rests on the game summary.
    _run("DROP VIEW IF EXISTS daily_game_summary_named")
    for name, subject in _SUMMARIES:
        _run(f"DROP VIEW IF EXISTS {name}")
        arms = _arms(backend, subject, rollups=rollups)
        if backend == "sqlite":
            _run(_sqlite_view(name, subject, arms))
        else:
            _run(_server_view(backend, name, subject, arms))
    _run(_named_view())


# -- the tables -------------------------------------------------------------------------------


def _day_type() -> sa.types.TypeEngine[Any]:
    return sa.String(10).with_variant(sa.Date(), "postgresql").with_variant(sa.Date(), *_MYSQL)


def _sum_columns(backend: str) -> list[sa.Column[Any]]:
    counts = [sa.Column(name, sa.BigInteger(), nullable=False) for name in _COUNTS]
    if backend == "sqlite":
        parts = [f"{a}_{p}" for a in _AMOUNTS for p in ("n", "hi", "lo")]
        return [*counts, *(sa.Column(name, sa.BigInteger(), nullable=False) for name in parts)]
    money: sa.types.TypeEngine[Any] = (
        postgresql.NUMERIC() if backend == "postgresql" else mysql.DECIMAL(65, 4)
    )
    return [*counts, *(sa.Column(f"{a}_amount", money, nullable=False) for a in _AMOUNTS)]


def _table_options() -> dict[str, str]:
    dialect = op.get_bind().dialect
    if dialect.name not in _MYSQL:
        return {}
    is_mariadb = getattr(dialect, "is_mariadb", False)
    return {
        "mysql_engine": "InnoDB",
        "mysql_charset": "utf8mb4",
        "mysql_collate": "utf8mb4_nopad_bin" if is_mariadb else "utf8mb4_bin",
    }


def _create_tables(backend: str) -> None:
    options = _table_options()

    def key() -> list[sa.Column[Any]]:
        return [
            sa.Column("merchant_id", sa.String(_ID), nullable=False),
            sa.Column("day", _day_type(), nullable=False),
        ]

    op.create_table(
        "summary_deltas",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        *key(),
        sa.Column("game_id", sa.String(_ID), nullable=False),
        sa.Column("player_id", sa.String(_ID), nullable=False),
        sa.Column("currency", sa.String(_CODE), nullable=False),
        *_sum_columns(backend),
        sa.PrimaryKeyConstraint("id", name="pk_summary_deltas"),
        **options,
        if_not_exists=True,
    )
    op.create_index(
        "ix_summary_deltas_merchant_day",
        "summary_deltas",
        ["merchant_id", "day"],
        if_not_exists=True,
    )
    op.create_table(
        "daily_game_totals",
        *key(),
        sa.Column("game_id", sa.String(_ID), nullable=False),
        sa.Column("currency", sa.String(_CODE), nullable=False),
        *_sum_columns(backend),
        sa.PrimaryKeyConstraint(
            "merchant_id", "day", "game_id", "currency", name="pk_daily_game_totals"
        ),
        **options,
        if_not_exists=True,
    )
    # Keyed by player first: a player's days are one range; the days' players the index.
    op.create_table(
        "daily_player_totals",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("player_id", sa.String(_ID), nullable=False),
        sa.Column("day", _day_type(), nullable=False),
        sa.Column("currency", sa.String(_CODE), nullable=False),
        *_sum_columns(backend),
        sa.PrimaryKeyConstraint(
            "merchant_id", "player_id", "day", "currency", name="pk_daily_player_totals"
        ),
        **options,
        if_not_exists=True,
    )
    op.create_index(
        "ix_daily_player_totals_merchant_day",
        "daily_player_totals",
        ["merchant_id", "day"],
        if_not_exists=True,
    )
    op.create_table(
        "summary_builds",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("first_day", _day_type(), nullable=False),
        sa.Column("next_day", _day_type(), nullable=False),
        sa.Column("last_day", _day_type(), nullable=False),
        sa.PrimaryKeyConstraint("merchant_id", name="pk_summary_builds"),
        **options,
        if_not_exists=True,
    )


# -- the days to build ------------------------------------------------------------------------


def _utc_day(value: Any) -> date:
    """A ``created_at`` as each driver returns it, as its UTC day."""
    if isinstance(value, str):  # SQLite: fixed-width ISO-8601 UTC text
        return date.fromisoformat(value[:10])
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).date()
    return value.date() if isinstance(value, datetime) else value


def _plan_builds(backend: str) -> None:
    """One ``summary_builds`` row per merchant with rows: its first to its last UTC day.
    Each merchant is found by a walk of the (merchant_id, created_at) index, and its first
    and last rows by two lookups in it: no scan of the table."""
    bind = op.get_bind()
    bind.execute(sa.text("DELETE FROM summary_builds"))
    merchants = bind.execute(
        sa.text(
            "WITH RECURSIVE m(merchant_id) AS ("
            "SELECT MIN(merchant_id) FROM records "
            "UNION ALL SELECT (SELECT MIN(r.merchant_id) FROM records r "
            "WHERE r.merchant_id > m.merchant_id) FROM m WHERE m.merchant_id IS NOT NULL) "
            "SELECT merchant_id FROM m WHERE merchant_id IS NOT NULL"
        )
    ).scalars()
    for merchant_id in list(merchants):
        first, last = bind.execute(
            sa.text("SELECT MIN(created_at), MAX(created_at) FROM records WHERE merchant_id = :m"),
            {"m": merchant_id},
        ).one()
        days = [_utc_day(first), _utc_day(last)]
        values: list[Any] = [day.isoformat() for day in days] if backend == "sqlite" else days
        bind.execute(
            sa.text(
                "INSERT INTO summary_builds (merchant_id, first_day, next_day, last_day) "
                "VALUES (:m, :first, :first, :last)"
            ),
            {"m": merchant_id, "first": values[0], "last": values[1]},
        )


def upgrade() -> None:
    backend = _backend()
    _create_tables(backend)
    triggers = _postgres_triggers() if backend == "postgresql" else _row_triggers(backend)
    for statement in triggers:
        _run(statement)
    # After the triggers (see the module docstring): every row before them is in a day built.
    _plan_builds(backend)
    _create_views(backend, rollups=True)


def downgrade() -> None:
    backend = _backend()
    _create_views(backend, rollups=False)
    if backend == "postgresql":
        for name in (*_TRIGGERS, "records_summary_truncate"):
            _run(f"DROP TRIGGER IF EXISTS {name} ON records")
            _run(f"DROP FUNCTION IF EXISTS {name}()")
    else:
        for name in _TRIGGERS:
            _run(f"DROP TRIGGER IF EXISTS {name}")
    for table in ("summary_builds", "daily_player_totals", "daily_game_totals", "summary_deltas"):
        op.drop_table(table)
