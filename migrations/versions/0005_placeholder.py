"""Placeholder for 0005 (written on another branch: round events, the game catalogue): drop at
merge.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

It exists only so that 0007 (verify requests) has its parent while the branches are apart;
the integrator keeps the real 0005 and deletes this file.
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
