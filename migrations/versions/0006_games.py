"""The game catalogue as a dimension: games, game_localizations and the named BI view.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

- ``games``: per merchant and game_id, what the platform's catalogue says of the game (spec:
  Game): name, brand, category and its name, status, launch_supported, provider code and
  name, client_version, languages (tags joined by commas), whether the latest complete
  catalogue pass listed it (``listed``), and when it was first seen, last seen and changed.
  A game that leaves the catalogue keeps its row: ``listed`` false, ``last_seen_at`` frozen.
- ``game_localizations``: one row per game and language with the localized name.  A table,
  not a JSON column: the same join works on SQLite, PostgreSQL and MariaDB (docs/bi.md).
- ``daily_game_summary_named``: ``daily_game_summary`` with the game's name, category and
  provider beside its game_id (a LEFT JOIN: a game the catalogue never listed keeps its row,
  with NULL names).

Types are spelled out per dialect as in 0001, which explains them.  The SQL is written out
here rather than imported, so that this revision stays a fixed record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL = ("mysql", "mariadb")
_ID = 255
_CODE = 64

_SUMMARY_COLUMNS = (
    "merchant_id",
    "day",
    "game_id",
    "currency",
    "rounds",
    "rounds_open",
    "rounds_settled",
    "rounds_void",
    "bet_amount",
    "payout_amount",
    "refund_amount",
    "net_amount",
    "ggr_amount",
)
_NAME_COLUMNS = (
    ("name", "game_name"),
    ("category", "category"),
    ("category_name", "category_name"),
    ("provider_code", "provider_code"),
    ("provider_name", "provider_name"),
)


def _time() -> sa.types.TypeEngine[Any]:
    return (
        sa.Text()
        .with_variant(postgresql.TIMESTAMP(timezone=True), "postgresql")
        .with_variant(mysql.DATETIME(fsp=6), *_MYSQL)
    )


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


def _named_view() -> str:
    summary = [f"s.{column}" for column in _SUMMARY_COLUMNS]
    names = [f"g.{column} AS {alias}" for column, alias in _NAME_COLUMNS]
    columns = ",\n    ".join([*summary, *names])
    return (
        f"CREATE VIEW daily_game_summary_named AS\nSELECT\n    {columns}\n"
        "FROM daily_game_summary s\n"
        "LEFT JOIN games g ON g.merchant_id = s.merchant_id AND g.game_id = s.game_id"
    )


def upgrade() -> None:
    options = _table_options()
    op.create_table(
        "games",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("game_id", sa.String(_ID), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("brand", sa.Text(), nullable=True),
        sa.Column("category", sa.String(_ID), nullable=True),
        sa.Column("category_name", sa.Text(), nullable=True),
        sa.Column("status", sa.String(_CODE), nullable=False),
        sa.Column("launch_supported", sa.Boolean(), nullable=False),
        sa.Column("provider_code", sa.String(_ID), nullable=True),
        sa.Column("provider_name", sa.Text(), nullable=True),
        sa.Column("client_version", sa.String(_ID), nullable=True),
        sa.Column("languages", sa.Text(), nullable=False),
        sa.Column("listed", sa.Boolean(), nullable=False),
        sa.Column("first_seen_at", _time(), nullable=False),
        sa.Column("last_seen_at", _time(), nullable=False),
        sa.Column("changed_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("merchant_id", "game_id", name="pk_games"),
        **options,
        if_not_exists=True,
    )
    op.create_table(
        "game_localizations",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("game_id", sa.String(_ID), nullable=False),
        sa.Column("language", sa.String(_CODE), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("merchant_id", "game_id", "language", name="pk_game_localizations"),
        **options,
        if_not_exists=True,
    )
    # A run killed after the view (MariaDB commits each DDL statement by itself) runs again.
    op.execute("DROP VIEW IF EXISTS daily_game_summary_named")
    op.execute(_named_view())


def downgrade() -> None:
    op.execute("DROP VIEW daily_game_summary_named")
    op.drop_table("game_localizations")
    op.drop_table("games")
