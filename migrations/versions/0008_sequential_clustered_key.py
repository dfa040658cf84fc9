"""MariaDB / MySQL: records and record_revisions clustered by an AUTO_INCREMENT row_id.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25

InnoDB keeps a table's rows in the B-tree of its primary key, and every secondary index entry
carries that key.  Keyed by (merchant_id, record_id[, revision]) with random UUIDs, each insert
lands on a random leaf of a tree several times the default 128 MiB buffer pool, and each index
entry carries about 50 bytes of key: a backfill read 1.47 pages from disk per record
(bench/README.md, 7, "MariaDB: a sequential clustered key").  Here both tables get ``row_id``,
``BIGINT UNSIGNED AUTO_INCREMENT``, as their primary key, so rows are appended in arrival
order, and the old key stays as a UNIQUE key of the same columns: the upserts' ``ON DUPLICATE
KEY UPDATE`` (revision guard; history rows inserted once) meet an existing row through it, and
never name ``row_id``.  ``row_id`` is the last column, so ``SELECT *`` keeps every column where
it was and shows one more (docs/bi.md).

Each table is rebuilt by one ``ALTER TABLE`` (InnoDB copies it; existing rows are numbered in
the order of the old key); the rows are kept as they are.  MariaDB commits each DDL statement
by itself and Alembic stamps the revision after both, so a process killed between the two
leaves one table done and the revision unstamped: each direction skips a table already in the
layout it wants, and the next start finishes the job instead of failing on it forever.
SQLite and PostgreSQL are left alone: their tables are heaps, already in arrival order, with
indexes pointing at a row id.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL = ("mysql", "mariadb")
# table -> (the unique key's name, its columns: the primary key of revisions 0001 and 0002)
_KEYS = {
    "records": ("uq_records_merchant_record", "merchant_id, record_id"),
    "record_revisions": (
        "uq_record_revisions_merchant_record_revision",
        "merchant_id, record_id, revision",
    ),
}


def _clustered_by_row_id(table: str) -> bool:
    key = sa.inspect(op.get_bind()).get_pk_constraint(table)["constrained_columns"]
    return bool(key == ["row_id"])


def upgrade() -> None:
    if op.get_bind().dialect.name not in _MYSQL:
        return
    for table, (unique_key, columns) in _KEYS.items():
        if _clustered_by_row_id(table):
            continue
        op.execute(
            f"ALTER TABLE {table} DROP PRIMARY KEY,"
            f" ADD COLUMN row_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
            f" ADD PRIMARY KEY (row_id),"
            f" ADD CONSTRAINT {unique_key} UNIQUE ({columns})"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name not in _MYSQL:
        return
    for table, (unique_key, columns) in _KEYS.items():
        if not _clustered_by_row_id(table):
            continue
        op.execute(
            f"ALTER TABLE {table} DROP PRIMARY KEY, DROP COLUMN row_id,"
            f" DROP INDEX {unique_key}, ADD PRIMARY KEY ({columns})"
        )
