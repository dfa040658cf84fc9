"""Round-end notifications: round_events, and the records index the cross-check reads by.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

- ``round_events``: one row per round-end notification accepted from the platform (spec:
  Events, "Round end"), ``event_id`` unique (the platform retries with the same id and a
  duplicate changes nothing).  ``received_by`` names the replica that answered it, so the
  others know which notifications they still have to act on; ``found_at`` is set once the
  cross-check saw the round in ``records`` (so the check never looks at it again).
- ``ix_records_merchant_round``: the cross-check asks ``records`` for rounds by id.

Types are spelled out per dialect as in 0001, which explains them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL = ("mysql", "mariadb")
_ID = 255
_EVENT_ID = 128  # an Idempotency-Key, which the event id equals (spec: Authentication, Headers)
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
        "round_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("event_id", sa.String(_EVENT_ID), nullable=False),
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("round_id", sa.String(_ID), nullable=False),
        sa.Column("parent_round_id", sa.String(_ID), nullable=True),
        sa.Column("external_player_id", sa.String(_ID), nullable=False),
        sa.Column("currency", sa.String(_CODE), nullable=False),
        sa.Column("type", sa.String(_CODE), nullable=False),
        sa.Column("occurred_at", _time(), nullable=False),
        sa.Column("received_at", _time(), nullable=False),
        sa.Column("received_by", sa.String(_ID), nullable=False),
        sa.Column("found_at", _time(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_round_events"),
        sa.UniqueConstraint("event_id", name="uq_round_events_event_id"),
        **_table_options(),
        if_not_exists=True,
    )
    # The cross-check's scan: a merchant's rounds not yet found, oldest first.
    op.create_index(
        "ix_round_events_merchant_found",
        "round_events",
        ["merchant_id", "found_at", "received_at"],
        if_not_exists=True,
    )
    op.create_index(
        "ix_records_merchant_round", "records", ["merchant_id", "round_id"], if_not_exists=True
    )


def downgrade() -> None:
    op.drop_index("ix_records_merchant_round", table_name="records")
    op.drop_table("round_events")
