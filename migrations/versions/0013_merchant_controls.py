"""merchant_controls: what operators set on a merchant that every replica obeys (pause).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28

A paused merchant is held and synced by no replica, across restarts and rebalances
(recordsync/warehouse/controls.py): the fleet's every tick reads this table.  One row per
merchant that was ever paused; ``paused_at`` NULL once resumed (the row says who resumed it,
and when).

Types are spelled out per dialect as in 0001, which explains them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL = ("mysql", "mariadb")
_ID = 255


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


def upgrade() -> None:
    op.create_table(
        "merchant_controls",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("paused_at", _time(), nullable=True),
        sa.Column("paused_by", sa.String(_ID), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("changed_at", _time(), nullable=False),
        sa.Column("changed_by", sa.String(_ID), nullable=False),
        sa.PrimaryKeyConstraint("merchant_id", name="pk_merchant_controls"),
        **_table_options(),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("merchant_controls")
