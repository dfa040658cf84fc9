"""Initial warehouse schema: records, sync_state, snapshot_windows, quarantined_records.

Revision ID: 0001
Revises:
Create Date: 2024-11-21

Column types are spelled out per dialect here (not imported from recordsync.warehouse.types)
so this revision stays a fixed record of the schema; a test checks that it matches the tables
the code uses.  Why each type was chosen is explained in recordsync/warehouse/types.py:

- money: NUMERIC(30,4) on PostgreSQL, DECIMAL(30,4) on MariaDB, the exact decimal string as
  TEXT on SQLite (SQLite's numeric types are floats);
- times: TIMESTAMP WITH TIME ZONE on PostgreSQL, DATETIME(6) holding UTC on MariaDB, fixed-width
  ISO-8601 UTC text on SQLite;
- cursors (up to 4096 characters): VARCHAR(4096) on PostgreSQL, TEXT elsewhere.

MariaDB tables use utf8mb4 with the binary no-pad collation: identifiers are opaque strings,
so "abc" and "ABC" (or "abc ") are different records and must not collide in a key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
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


def _cursor() -> sa.types.TypeEngine[Any]:
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
    options = _table_options()
    op.create_table(
        "records",
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
        sa.Column("synced_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("merchant_id", "record_id", name="pk_records"),
        **options,
        if_not_exists=True,
    )
    op.create_index(
        "ix_records_merchant_created", "records", ["merchant_id", "created_at"], if_not_exists=True
    )
    op.create_index(
        "ix_records_merchant_updated", "records", ["merchant_id", "updated_at"], if_not_exists=True
    )
    op.create_index(
        "ix_records_merchant_player",
        "records",
        ["merchant_id", "player_id", "created_at"],
        if_not_exists=True,
    )
    op.create_index(
        "ix_records_merchant_game",
        "records",
        ["merchant_id", "game_id", "created_at"],
        if_not_exists=True,
    )

    op.create_table(
        "sync_state",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("change_cursor", _cursor(), nullable=False),
        sa.Column("anchor_at", _time(), nullable=False),
        sa.Column("history_from", _time(), nullable=False),
        sa.Column("snapshot_to", _time(), nullable=False),
        sa.Column("rebuilds", sa.Integer(), nullable=False),
        sa.Column("last_sequence", _cursor(), nullable=True),
        sa.Column("last_projection_as_of", _time(), nullable=True),
        sa.Column("last_commit_at", _time(), nullable=True),
        sa.Column("updated_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("merchant_id", name="pk_sync_state"),
        **options,
        if_not_exists=True,
    )

    op.create_table(
        "snapshot_windows",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("job", sa.String(_ID), nullable=False),
        sa.Column("window_start", _time(), nullable=False),
        sa.Column("window_end", _time(), nullable=False),
        sa.Column("cursor", _cursor(), nullable=True),
        sa.Column("cursor_issued_at", _time(), nullable=True),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.Column("records", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("merchant_id", "job", "window_start", name="pk_snapshot_windows"),
        **options,
        if_not_exists=True,
    )

    op.create_table(
        "quarantined_records",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("source", sa.String(_ID), nullable=False),
        sa.Column("position", sa.Text(), nullable=False),
        sa.Column("record_id", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("raw_json", sa.Text().with_variant(mysql.LONGTEXT(), *_MYSQL), nullable=False),
        sa.Column("quarantined_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_quarantined_records"),
        **options,
        if_not_exists=True,
    )
    op.create_index(
        "ix_quarantined_records_merchant",
        "quarantined_records",
        ["merchant_id", "id"],
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("quarantined_records")
    op.drop_table("snapshot_windows")
    op.drop_table("sync_state")
    op.drop_table("records")
