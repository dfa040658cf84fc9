"""warehouse_identity, schema_revisions, and what a replica says of itself in ``replicas``.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02

``warehouse_identity`` holds one row, an id drawn once, here, the first time the warehouse is
migrated to this revision: a state export names the warehouse it came from, and an import into
another one is refused (``sync.state_import``), since its cursors cover rows this warehouse
never committed.  A copy of the database (a restored backup, a staging clone) keeps the id:
what tells a restored warehouse from the newer state of the same one is the state itself.

``schema_revisions`` holds one row per revision applied, with whether it only adds (a table, a
nullable column, an index) to what the revision before it had: a replica of an older version
finding the schema at a revision it does not know keeps running when every revision above its
own is additive (``warehouse.migrate``).  The rows are written after each upgrade by
``migrations/env.py`` from the scripts' own ``additive`` flag.

``drift_checks``: when each merchant's drift check last ran, and since when it has been
deferred behind the sync's own reads, so that ``status`` says why one is overdue.

``replicas.version`` and ``replicas.request_kinds``: the version a replica runs and the kinds of
handed-over work it takes, so that a command refuses to hand work to a holder that cannot do
it (an older version's) instead of following a request nobody runs.  NULL for a replica of a
version before this one.

``sync_requests.followed_at``: the last look, by the database's clock, of the command following
a request, so that a holder never starts work whose command is gone (killed while its request
waited: ``requests.book.FOLLOWED_WITHIN``).  NULL for a request an earlier version asked.

Types are spelled out per dialect as in 0001, which explains them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
additive = True

_MYSQL = ("mysql", "mariadb")
_ID = 255
_REVISION = 64
# The database's clock, in the form each backend's time columns hold (as database_clock's).
_NOW = {
    "postgresql": "statement_timestamp()",
    "mysql": "UTC_TIMESTAMP(6)",
    "sqlite": "(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00')",
}


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


def _columns(table: str) -> set[str]:
    return {column["name"] for column in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    op.create_table(
        "warehouse_identity",
        sa.Column("warehouse_id", sa.String(_REVISION), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("warehouse_id", name="pk_warehouse_identity"),
        **_table_options(),
        if_not_exists=True,
    )
    bind = op.get_bind()
    if not bind.execute(sa.text("SELECT COUNT(*) FROM warehouse_identity")).scalar_one():
        bind.execute(
            sa.text(
                "INSERT INTO warehouse_identity (warehouse_id, created_at) "  # noqa: S608 - fixed
                f"VALUES (:id, {_NOW.get(bind.dialect.name, _NOW['mysql'])})"
            ),
            {"id": str(uuid.uuid4())},
        )
    op.create_table(
        "drift_checks",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("last_run_at", _time(), nullable=True),
        sa.Column("deferred_since", _time(), nullable=True),
        sa.PrimaryKeyConstraint("merchant_id", name="pk_drift_checks"),
        **_table_options(),
        if_not_exists=True,
    )
    op.create_table(
        "schema_revisions",
        sa.Column("revision", sa.String(_REVISION), nullable=False),
        sa.Column("down_revision", sa.String(_REVISION), nullable=True),
        sa.Column("additive", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("revision", name="pk_schema_revisions"),
        **_table_options(),
        if_not_exists=True,
    )
    # Checked, not assumed: MariaDB runs DDL outside the transaction, so a run killed after
    # these columns were added and run again must not add them twice.
    present = _columns("replicas")
    with op.batch_alter_table("replicas") as batch:
        if "version" not in present:
            batch.add_column(sa.Column("version", sa.String(_REVISION), nullable=True))
        if "request_kinds" not in present:
            batch.add_column(sa.Column("request_kinds", sa.String(_ID), nullable=True))
    if "followed_at" not in _columns("sync_requests"):
        with op.batch_alter_table("sync_requests") as batch:
            batch.add_column(sa.Column("followed_at", _time(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sync_requests") as batch:
        batch.drop_column("followed_at")
    with op.batch_alter_table("replicas") as batch:
        batch.drop_column("request_kinds")
        batch.drop_column("version")
    op.drop_table("schema_revisions")
    op.drop_table("drift_checks")
    op.drop_table("warehouse_identity")
