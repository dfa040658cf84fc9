"""replicas.merchants: the merchants each replica is configured with.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28

Replicas whose configurations differ (a rolling update that adds a merchant, a canary) must
still hold every merchant some live replica knows, and share only what each can hold.  So each
replica writes the merchants it is configured with when it joins: a JSON array of their ids,
NULL for a replica of an older version (taken to know the asking replica's merchants).  Added
only when missing, so that a revision killed half-way runs again.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL = ("mysql", "mariadb")


def upgrade() -> None:
    existing = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("replicas")}
    if "merchants" not in existing:
        # LONGTEXT on MariaDB, where TEXT stops at 64 KiB (a few thousand merchant ids).
        op.add_column(
            "replicas",
            sa.Column(
                "merchants", sa.Text().with_variant(mysql.LONGTEXT(), *_MYSQL), nullable=True
            ),
        )


def downgrade() -> None:
    op.drop_column("replicas", "merchants")
