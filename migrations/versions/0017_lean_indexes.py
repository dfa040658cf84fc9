"""Lean indexes: the two secondary indexes of ``records`` that no query reads are dropped.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02

Each index of ``records`` costs every page commit a random leaf per row, and at twenty million
rows 40-60 bytes a row.  Every query of recordsync, of docs/bi.md and of the shipped Grafana
boards was looked up (and EXPLAINed) against them: (``merchant_id``, ``updated_at``) and
(``merchant_id``, ``game_id``, ``created_at``) are read by none of them.  The BI views group
by day, game and currency over a creation-time range; nothing filters rows by update time or by
one game.  They go:

- MariaDB: one ``ALTER TABLE ... DROP INDEX``, a change of metadata (no copy of the table);
- PostgreSQL and SQLite: ``DROP INDEX``, inside the migration's transaction (the runner holds
  one across revisions, so not CONCURRENTLY): the drop itself is a change of the catalogue,
  and its wait for the table's lock is bounded by the migration session's lock timeout
  (``timeouts.DDL``), after which ``migrate`` tries again.

IF EXISTS throughout, so a revision killed half-way runs again to the end.  Additive: an older
replica never needs either index; one that takes up a merchant during a rolling upgrade may
build them again (its BI index build sees them missing), and this version's build drops them
(``warehouse.bi.indexes.RETIRED``).  The downgrade builds them back.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
additive = True

_MYSQL = ("mysql", "mariadb")
_INDEXES = {
    "ix_records_merchant_updated": ("merchant_id", "updated_at"),
    "ix_records_merchant_game": ("merchant_id", "game_id", "created_at"),
}


def upgrade() -> None:
    backend = op.get_bind().dialect.name
    if backend in _MYSQL:
        drops = ", ".join(f"DROP INDEX IF EXISTS {name}" for name in _INDEXES)
        op.execute(f"ALTER TABLE records {drops}")
    else:
        for name in _INDEXES:
            op.execute(f"DROP INDEX IF EXISTS {name}")


def downgrade() -> None:
    for name, columns in _INDEXES.items():
        op.create_index(name, "records", list(columns), if_not_exists=True)
