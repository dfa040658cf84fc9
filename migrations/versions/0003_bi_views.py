"""BI feed: integer money units on records, and the views daily_game_summary,
daily_player_summary and sync_freshness.

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-06

The views mean the same on every backend (docs/bi.md describes each column):

- ``daily_game_summary``: per merchant, UTC day of ``created_at``, game and currency: rounds,
  rounds by status, the sums of bet, payout, refund and net, and the operator's gross gaming
  revenue ``bet - payout - refund``, all exact;
- ``daily_player_summary``: the same per player instead of per game;
- ``sync_freshness``: per merchant, the phase, the last projection_as_of and commit time, and
  how many whole seconds ago they were by the database's clock.

Exact sums.  PostgreSQL and MariaDB sum the NUMERIC(30,4) / DECIMAL(30,4) columns, which is
exact.  SQLite keeps amounts as decimal text and its SUM goes through floats, so this revision
adds ``bet_units``, ``refund_units``, ``payout_units`` and ``net_units`` (BIGINT, the amount
times 10**4, NULL beyond +-(2**63 - 1); written by the upsert on every backend alike and
back-filled here), and SQLite's views sum those integers:

- each value is split as ``u / 10**8`` and ``u % 10**8`` (SQLite truncates toward zero, so the
  two parts add up to ``u`` for either sign) and the parts are summed separately, so no sum
  overflows 64 bits before a group holds about 10**8 rows (SQLite raises "integer overflow"
  rather than rounding, should it ever happen);
- the two sums are normalised (carry, then the same sign for both parts) and printed exactly as
  text with 4 fraction digits, e.g. ``-1999999999999.9998``;
- when a group holds an amount whose units are NULL, that sum is NULL: unknown, never inexact.

The SQL is written out here rather than imported, so that this revision stays a fixed record.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Context, Decimal

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL = ("mysql", "mariadb")
_AMOUNTS = ("bet", "refund", "payout", "net")
_MAX_UNITS = 2**63 - 1
_UNITS_CONTEXT = Context(prec=40)
_BACKFILL_BATCH = 5000
_SPLIT = 100_000_000  # 10**8: the summed parts of a units value (see the docstring)
_STATUSES = (("rounds_open", "OPEN"), ("rounds_settled", "SETTLED"), ("rounds_void", "VOID"))
# (column of the view, amounts: the first one minus the others)
_SUMS = (
    ("bet_amount", ("bet",)),
    ("payout_amount", ("payout",)),
    ("refund_amount", ("refund",)),
    ("net_amount", ("net",)),
    ("ggr_amount", ("bet", "payout", "refund")),
)
_VIEWS = ("daily_game_summary", "daily_player_summary", "sync_freshness")


def _backend() -> str:
    name = op.get_bind().dialect.name
    return "mysql" if name in _MYSQL else name


# -- integer units ----------------------------------------------------------------------------


def _units(text: str | None) -> int | None:
    """SQLite's amount text as units of 10**-4, or None beyond a BIGINT."""
    if text is None:
        return None
    units = int(Decimal(text).scaleb(4, _UNITS_CONTEXT))
    return units if -_MAX_UNITS <= units <= _MAX_UNITS else None


def _backfill_sqlite() -> None:
    """Exact conversion of the stored text in Python, in batches by rowid."""
    conn = op.get_bind()
    names = ", ".join(f"{amount}_amount" for amount in _AMOUNTS)
    assignments = ", ".join(f"{amount}_units = ?" for amount in _AMOUNTS)
    last = -(2**63)
    while True:
        rows = conn.exec_driver_sql(
            f"SELECT rowid, {names} FROM records WHERE rowid > ? ORDER BY rowid LIMIT ?",  # noqa: S608
            (last, _BACKFILL_BATCH),
        ).all()
        if not rows:
            return
        conn.exec_driver_sql(
            f"UPDATE records SET {assignments} WHERE rowid = ?",  # noqa: S608
            [(*(_units(value) for value in row[1:]), row[0]) for row in rows],
        )
        last = rows[-1][0]


def _backfill_server(backend: str) -> None:
    """NUMERIC times 10**4 is an exact integer; the cast is guarded to the BIGINT range."""
    target = "SIGNED" if backend == "mysql" else "BIGINT"
    limit = "922337203685477.5807"
    assignments = ", ".join(
        f"{amount}_units = CASE WHEN ABS({amount}_amount) <= {limit} "
        f"THEN CAST({amount}_amount * 10000 AS {target}) END"
        for amount in _AMOUNTS
    )
    op.execute(f"UPDATE records SET {assignments}")  # noqa: S608 - fixed column names


# -- the summary views ------------------------------------------------------------------------


def _status_counts() -> list[str]:
    return [
        f"COUNT(CASE WHEN status = '{status}' THEN 1 END) AS {name}" for name, status in _STATUSES
    ]


def _server_summary(name: str, subject: str, backend: str) -> str:
    day = (
        "CAST(created_at AT TIME ZONE 'UTC' AS DATE)"
        if backend == "postgresql"
        else "CAST(created_at AS DATE)"
    )
    sums = [
        " - ".join(f"SUM({amount}_amount)" for amount in amounts) + f" AS {column}"
        for column, amounts in _SUMS
    ]
    keys = ["merchant_id", f"{day} AS day", subject, "currency", "COUNT(*) AS rounds"]
    columns = ",\n    ".join([*keys, *_status_counts(), *sums])
    return (
        f"CREATE VIEW {name} AS\nSELECT\n    {columns}\nFROM records\n"
        f"GROUP BY merchant_id, {day}, {subject}, currency"
    )


def _sqlite_summary(name: str, subject: str) -> str:
    """Four nested selects: sum the split units, carry, align the signs, print exactly."""
    keys = ["merchant_id", "day", subject, "currency", "rounds", *(n for n, _ in _STATUSES)]
    kept = ", ".join(keys)

    totals = ["merchant_id", "substr(created_at, 1, 10) AS day", subject, "currency"]
    totals += ["COUNT(*) AS rounds", *_status_counts()]
    for amount in _AMOUNTS:
        totals += [
            f"COUNT({amount}_units) AS {amount}_n",
            f"SUM({amount}_units / {_SPLIT}) AS {amount}_hi",
            f"SUM({amount}_units % {_SPLIT}) AS {amount}_lo",
        ]

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

    inner = select(totals, "records") + f"\nGROUP BY merchant_id, day, {subject}, currency"
    level2 = select([kept, *carried], f"(\n{inner}\n)")
    level3 = select([kept, *aligned], f"(\n{level2}\n)")
    return f"CREATE VIEW {name} AS\n" + select([kept, *printed], f"(\n{level3}\n)")


def _freshness(backend: str) -> str:
    if backend == "postgresql":

        def age(column: str) -> str:
            return f"CAST(FLOOR(EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP - {column}))) AS BIGINT)"

    elif backend == "mysql":

        def age(column: str) -> str:
            return f"TIMESTAMPDIFF(SECOND, {column}, UTC_TIMESTAMP(6))"

    else:

        def age(column: str) -> str:
            return (
                "CAST(strftime('%s', 'now') AS INTEGER) - "
                f"CAST(strftime('%s', {column}) AS INTEGER)"
            )

    return (
        "CREATE VIEW sync_freshness AS\nSELECT merchant_id, phase, anchor_at, "
        "last_projection_as_of, last_commit_at,\n"
        f"    {age('last_projection_as_of')} AS staleness_seconds,\n"
        f"    {age('last_commit_at')} AS seconds_since_commit\nFROM sync_state"
    )


def _create_views(backend: str) -> None:
    # Dropped first: a run killed after some of them (MariaDB commits each DDL statement by
    # itself) is run again whole at the next start.
    for name in _VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for name, subject in (("daily_game_summary", "game_id"), ("daily_player_summary", "player_id")):
        if backend == "sqlite":
            op.execute(_sqlite_summary(name, subject))
        else:
            op.execute(_server_summary(name, subject, backend))
    op.execute(_freshness(backend))


def upgrade() -> None:
    backend = _backend()
    # Only the columns a killed earlier run did not add (see _create_views); SQLite has no
    # ADD COLUMN IF NOT EXISTS, so look.
    existing = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("records")}
    for amount in _AMOUNTS:
        if f"{amount}_units" not in existing:
            op.add_column("records", sa.Column(f"{amount}_units", sa.BigInteger(), nullable=True))
    if backend == "sqlite":
        _backfill_sqlite()
    else:
        _backfill_server(backend)
    _create_views(backend)


def downgrade() -> None:
    for name in reversed(_VIEWS):
        op.execute(f"DROP VIEW {name}")
    for amount in reversed(_AMOUNTS):
        op.drop_column("records", f"{amount}_units")
