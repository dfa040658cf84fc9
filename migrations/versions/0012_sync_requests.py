"""sync_requests: one table for the work commands hand to a merchant's holder.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28

``backfill_requests`` (0004) and ``verify_requests`` (0007) were one mechanism written twice:
the same life (pending, running under a holder, done or failed), the same
columns but one.  ``sync_requests`` carries both, a ``kind`` apart, and whatever kind the
control plane adds next.  The rows already there are copied, in one statement, so that a
request pending or running at the upgrade is run by the new version's holder: a backfill's
``job`` becomes its ``key``; a verify keeps its ``repair`` and ``result``.

The two tables stay (revisions only add): pods of the previous version keep using them during
a rolling upgrade.  The copy runs only while ``sync_requests`` is empty, so a revision killed
after its copy and run again copies nothing twice (no new-version process writes requests
before the schema is at this revision).

Types are spelled out per dialect as in 0001, which explains them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL = ("mysql", "mariadb")
_ID = 255
_STATE = 16

_COLUMNS = (
    "merchant_id, kind, created_from, created_to, key, repair, state, requested_at, "
    "started_at, finished_at, holder, error, result"
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


def upgrade() -> None:
    op.create_table(
        "sync_requests",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("kind", sa.String(_STATE), nullable=False),
        sa.Column("created_from", _time(), nullable=False),
        sa.Column("created_to", _time(), nullable=False),
        sa.Column("key", sa.String(_ID), nullable=True),
        sa.Column("repair", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(_STATE), nullable=False),
        sa.Column("requested_at", _time(), nullable=False),
        sa.Column("started_at", _time(), nullable=True),
        sa.Column("finished_at", _time(), nullable=True),
        sa.Column("holder", sa.String(_ID), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        # LONGTEXT on MariaDB, where TEXT stops at 64 KiB (verify's findings).
        sa.Column("result", sa.Text().with_variant(mysql.LONGTEXT(), *_MYSQL), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_sync_requests"),
        **_table_options(),
        if_not_exists=True,
    )
    op.create_index(
        "ix_sync_requests_merchant_state",
        "sync_requests",
        ["merchant_id", "state", "id"],
        if_not_exists=True,
    )
    bind = op.get_bind()
    if bind.execute(sa.text("SELECT COUNT(*) FROM sync_requests")).scalar_one():
        return  # copied by a run of this revision killed before its version row
    key = "`key`" if bind.dialect.name in _MYSQL else "key"  # a reserved word in MariaDB
    columns = _COLUMNS.replace("key", key)
    # Oldest first by request time, so that ids keep the order holders take them in.
    bind.execute(
        sa.text(
            f"INSERT INTO sync_requests ({columns}) "  # noqa: S608 - fixed names, no input
            "SELECT merchant_id, kind, created_from, created_to, job_key, repair, state, "
            "requested_at, started_at, finished_at, holder, error, result FROM ("
            "SELECT merchant_id, 'backfill' AS kind, created_from, created_to, job AS job_key, "
            "false AS repair, state, requested_at, started_at, finished_at, holder, error, "
            "NULL AS result, id AS old_id FROM backfill_requests "
            "UNION ALL "
            "SELECT merchant_id, 'verify', created_from, created_to, NULL, repair, state, "
            "requested_at, started_at, finished_at, holder, error, result, id "
            "FROM verify_requests"
            ") AS earlier ORDER BY requested_at, kind, old_id"
        )
    )


def downgrade() -> None:
    op.drop_table("sync_requests")
