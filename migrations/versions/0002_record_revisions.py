"""Revision history: record_revisions, one row per (merchant, record, revision) seen.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-06

Append-only: the sync writes a row for each revision a page brings, in the transaction that
upserts the records (see recordsync/warehouse/pages/revisions.py).  ``sequence`` and ``changed_at``
are those of the change (spec: Record change) and NULL for a revision known only from a
snapshot.  Types are spelled out per dialect as in 0001, which explains them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL = ("mysql", "mariadb")
_ID = 255
_CODE = 64


def _money() -> sa.types.TypeEngine[Any]:
    return (
        sa.Text()
        .with_variant(postgresql.NUMERIC(30, 4), "postgresql")
        .with_variant(mysql.DECIMAL(30, 4), *_MYSQL)
    )


def _time() -> sa.types.TypeEngine[Any]:
    return (
        sa.Text()
        .with_variant(postgresql.TIMESTAMP(timezone=True), "postgresql")
        .with_variant(mysql.DATETIME(fsp=6), *_MYSQL)
    )


def _sequence() -> sa.types.TypeEngine[Any]:
    return sa.Text().with_variant(sa.String(4096), "postgresql")


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


def upgrade() -> None:
    op.create_table(
        "record_revisions",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("record_id", sa.String(_ID), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("player_id", sa.String(_ID), nullable=False),
        sa.Column("game_id", sa.String(_ID), nullable=False),
        sa.Column("currency", sa.String(_CODE), nullable=False),
        sa.Column("round_id", sa.String(_ID), nullable=False),
        sa.Column("parent_round_id", sa.String(_ID), nullable=True),
        sa.Column("bet_amount", _money(), nullable=False),
        sa.Column("refund_amount", _money(), nullable=False),
        sa.Column("payout_amount", _money(), nullable=False),
        sa.Column("net_amount", _money(), nullable=False),
        sa.Column("status", sa.String(_CODE), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("settled_at", _time(), nullable=True),
        sa.Column("updated_at", _time(), nullable=False),
        sa.Column("sequence", _sequence(), nullable=True),
        sa.Column("changed_at", _time(), nullable=True),
        sa.Column("synced_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("merchant_id", "record_id", "revision", name="pk_record_revisions"),
        **_table_options(),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("record_revisions")
