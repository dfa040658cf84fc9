"""extra_fields on records and record_revisions, the sightings of unknown fields, promotions.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02

``records.extra_fields`` and ``record_revisions.extra_fields``: the members of a record that
recordsync does not know, as the platform sent them (numbers as their decimal text), one JSON
object; NULL when the record had none, so a warehouse without drift stores nothing more.
PostgreSQL ``jsonb``, MariaDB ``JSON`` (a checked ``LONGTEXT``), SQLite ``TEXT``.  Nullable,
filled only by this version: an older replica writing a row leaves it NULL (the row then says
nothing of the unknown members, as before), so the revision is additive.

``record_field_sightings``: per merchant and unknown member name, when it was first and last
seen (by the database's clock) and the first record that carried it, for ``status`` and for
warning once.  ``promoted_fields``: the unknown fields an operator made columns of
(``recordsync fields promote``), with the column's type, and how far filling the column from
``extra_fields`` got (the key of the last row done, per table), so a promotion stopped at any
instant resumes where it was.

Types are spelled out per dialect as in 0001, which explains them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
additive = True

_MYSQL = ("mysql", "mariadb")
_ID = 255
_CODE = 64


def _time() -> sa.types.TypeEngine[Any]:
    return (
        sa.Text()
        .with_variant(postgresql.TIMESTAMP(timezone=True), "postgresql")
        .with_variant(mysql.DATETIME(fsp=6), *_MYSQL)
    )


def _json() -> sa.types.TypeEngine[Any]:
    return (
        sa.Text().with_variant(postgresql.JSONB(), "postgresql").with_variant(mysql.JSON(), *_MYSQL)
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
    # Checked, not assumed: MariaDB runs DDL outside the transaction, so a run killed after
    # a column was added and run again must not add it twice.  A nullable column without a
    # default is added without rewriting the table on all three backends.
    for table in ("records", "record_revisions"):
        if "extra_fields" not in _columns(table):
            # Not a batch: on SQLite that rebuilds the table, which the BI views refuse.
            op.add_column(table, sa.Column("extra_fields", _json(), nullable=True))
    op.create_table(
        "record_field_sightings",
        sa.Column("merchant_id", sa.String(_ID), nullable=False),
        sa.Column("field", sa.String(_ID), nullable=False),
        sa.Column("first_seen_at", _time(), nullable=False),
        sa.Column("last_seen_at", _time(), nullable=False),
        sa.Column("first_record_id", sa.String(_ID), nullable=False),
        sa.PrimaryKeyConstraint("merchant_id", "field", name="pk_record_field_sightings"),
        **_table_options(),
        if_not_exists=True,
    )
    op.create_table(
        "promoted_fields",
        sa.Column("field", sa.String(_ID), nullable=False),
        sa.Column("column_name", sa.String(_CODE), nullable=False),
        sa.Column("type", sa.String(_CODE), nullable=False),
        sa.Column("state", sa.String(_CODE), nullable=False),
        sa.Column("requested_at", _time(), nullable=False),
        sa.Column("finished_at", _time(), nullable=True),
        sa.Column("fill_table", sa.String(_CODE), nullable=True),
        sa.Column("fill_merchant_id", sa.String(_ID), nullable=True),
        sa.Column("fill_record_id", sa.String(_ID), nullable=True),
        sa.Column("fill_revision", sa.BigInteger(), nullable=True),
        sa.Column("rows_filled", sa.BigInteger(), nullable=False),
        sa.Column("rows_unfit", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("field", name="pk_promoted_fields"),
        **_table_options(),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("promoted_fields")
    op.drop_table("record_field_sightings")
    for table in ("record_revisions", "records"):
        op.drop_column(table, "extra_fields")
