"""The fleet: merchant_leases (epochs for fenced writes), replicas, backfill_requests.

Revision ID: 0004
Revises: 0003
Create Date: 2025-02-03

Several processes share the merchants of one warehouse (recordsync/warehouse/lease/session.py):

- ``merchant_leases``: per merchant, the lease ``epoch`` that every new holder raises by one,
  and that every fenced page commit checks inside its own transaction, so a holder that was
  paused and superseded cannot commit (recordsync/warehouse/lease/epochs.py);
- ``replicas``: per live process, its heartbeat by the database's clock;
- ``backfill_requests``: a backfill handed to the merchant's holder, with its state.

Types are spelled out per dialect as in 0001, which explains them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
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
    options = _table_options()
    op.create_table(
        "merchant_leases",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(_ID), nullable=False),
        sa.Column("acquired_at", _time(), nullable=False),
        sa.Column("released_at", _time(), nullable=True),
        sa.PrimaryKeyConstraint("merchant_id", name="pk_merchant_leases"),
        **options,
        if_not_exists=True,
    )
    op.create_table(
        "replicas",
        sa.Column("replica_id", sa.String(_ID), nullable=False),
        sa.Column("hostname", sa.String(_ID), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", _time(), nullable=False),
        sa.Column("heartbeat_at", _time(), nullable=False),
        sa.Column("merchants_held", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("replica_id", name="pk_replicas"),
        **options,
        if_not_exists=True,
    )
    op.create_table(
        "backfill_requests",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("created_from", _time(), nullable=False),
        sa.Column("created_to", _time(), nullable=False),
        sa.Column("job", sa.String(_ID), nullable=False),
        sa.Column("state", sa.String(_STATE), nullable=False),
        sa.Column("requested_at", _time(), nullable=False),
        sa.Column("started_at", _time(), nullable=True),
        sa.Column("finished_at", _time(), nullable=True),
        sa.Column("holder", sa.String(_ID), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_backfill_requests"),
        **options,
        if_not_exists=True,
    )
    # (merchant_id, state, id): 255 + 16 characters of utf8mb4 and a BIGINT, well inside
    # MariaDB's 3072-byte key limit.
    op.create_index(
        "ix_backfill_requests_merchant_state",
        "backfill_requests",
        ["merchant_id", "state", "id"],
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("backfill_requests")
    op.drop_table("replicas")
    op.drop_table("merchant_leases")
