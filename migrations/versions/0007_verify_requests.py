"""verify_requests: a ``recordsync verify`` handed to the merchant's holder, with its result.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25

While a daemon holds a merchant, ``recordsync verify`` does not read the platform itself (the
merchant's rate limit is spent by one process at a time): it inserts a request, the holder
runs it inside its own budget at the lowest priority (repairs fenced by its epoch), and stores
the findings as a JSON document in ``result`` for the command to print
(recordsync/warehouse/requests/verify.py).

Types are spelled out per dialect as in 0001, which explains them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL = ("mysql", "mariadb")
_ID = 255
_STATE = 16


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
        "verify_requests",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("created_from", _time(), nullable=False),
        sa.Column("created_to", _time(), nullable=False),
        sa.Column("repair", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(_STATE), nullable=False),
        sa.Column("requested_at", _time(), nullable=False),
        sa.Column("started_at", _time(), nullable=True),
        sa.Column("finished_at", _time(), nullable=True),
        sa.Column("holder", sa.String(_ID), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        # The findings as JSON; LONGTEXT on MariaDB, where TEXT stops at 64 KiB.
        sa.Column("result", sa.Text().with_variant(mysql.LONGTEXT(), *_MYSQL), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_verify_requests"),
        **_table_options(),
        if_not_exists=True,
    )
    op.create_index(
        "ix_verify_requests_merchant_state",
        "verify_requests",
        ["merchant_id", "state", "id"],
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("verify_requests")
