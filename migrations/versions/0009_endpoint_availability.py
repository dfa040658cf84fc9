"""endpoint_availability: whether the platform serves each optional endpoint to a merchant.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28

An optional endpoint the platform does not serve to a merchant (``GET /v1/games`` answering
404 or 403, or failing on and on) disables that feature alone, for that merchant;
its holder writes what it saw here, so that ``recordsync status`` can say so from any
process: ``available``, the HTTP status and ``error.code`` of the last refusal (NULL when no
answer came), since when it is so, when it was last checked and when it is checked next.

Types are spelled out per dialect as in 0001, which explains them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL = ("mysql", "mariadb")
_ID = 255
_CODE = 64


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
        "endpoint_availability",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("endpoint", sa.String(_CODE), nullable=False),
        sa.Column("available", sa.Boolean(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("code", sa.String(_CODE), nullable=True),
        sa.Column("since", _time(), nullable=False),
        sa.Column("checked_at", _time(), nullable=False),
        sa.Column("next_check_at", _time(), nullable=True),
        sa.PrimaryKeyConstraint("merchant_id", "endpoint", name="pk_endpoint_availability"),
        **_table_options(),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("endpoint_availability")
