"""Idempotent rows: a quarantined item once per merchant, a round event once per merchant.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28

- ``quarantined_records.item_key``: a page read again (after any failure, or the same record
  from a snapshot and from the change stream) quarantined its bad items again.
  Each row now carries a key, unique per merchant: SHA-256 of the item's record id and
  revision when it names both (a revision is immutable on the platform), else of its stored
  JSON.  The rows already there get theirs here, computed as ``recordsync.warehouse.
  quarantine.item_key`` computes it (copied: a revision stays a fixed record), and of each
  set of duplicates the earliest row (lowest id) is kept.
- ``round_events``: ``event_id`` was unique across merchants, so another merchant's colliding
  id got the first merchant's receipt and was never stored.  The spec has each merchant
  de-duplicate its own ids (Events, "Round end"): the key is now (merchant_id, event_id).
  No duplicates can exist under the old key; they are removed anyway (keeping the earliest)
  when a run killed half-way left the table with neither key.

Every step looks before it acts, so a revision killed half-way (MariaDB commits each DDL
statement by itself) runs again to the end.  SQLite cannot alter a constraint or a column in
place: the batch operations copy its table, elsewhere they are plain ALTER TABLE statements.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ITEM_KEY = 64  # a SHA-256 in hex
_FILL_BATCH = 1000  # quarantined rows keyed per statement
_QUARANTINE_KEY = "uq_quarantined_records_item"
_EVENT_KEY = "uq_round_events_merchant_event"
_OLD_EVENT_KEY = "uq_round_events_event_id"

_quarantine = sa.table(
    "quarantined_records",
    sa.column("id", sa.BigInteger()),
    sa.column("record_id", sa.Text()),
    sa.column("raw_json", sa.Text()),
    sa.column("item_key", sa.String(_ITEM_KEY)),
)


def _revision(raw_json: str) -> int | None:
    try:
        item = json.loads(raw_json)
    except (ValueError, RecursionError):
        return None
    found = item.get("revision") if isinstance(item, dict) else None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _item_key(record_id: str | None, raw_json: str) -> str:
    """``recordsync.warehouse.pages.quarantine.item_key`` as of this revision; never to change."""
    found = _revision(raw_json)
    if record_id is not None and found is not None:
        material = f"record\n{record_id}\n{found}"
    else:
        material = f"raw\n{raw_json}"
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


def _unique_keys(table: str) -> set[str]:
    return {
        str(unique["name"]) for unique in sa.inspect(op.get_bind()).get_unique_constraints(table)
    }


def _keep_earliest(table: str, *key: str) -> None:
    """Delete every row but the lowest id of each ``key``.  The derived table ``kept`` lets
    MariaDB read the table it deletes from (its error 1093 otherwise)."""
    columns = ", ".join(key)
    op.execute(
        f"DELETE FROM {table} WHERE id NOT IN "  # noqa: S608 - names of this module only
        f"(SELECT kept.id FROM (SELECT MIN(id) AS id FROM {table} GROUP BY {columns}) AS kept)"
    )


def _key_quarantined_rows() -> None:
    bind = op.get_bind()
    columns = {column["name"] for column in sa.inspect(bind).get_columns("quarantined_records")}
    if "item_key" not in columns:
        op.add_column(
            "quarantined_records", sa.Column("item_key", sa.String(_ITEM_KEY), nullable=True)
        )
    unkeyed = (
        sa.select(_quarantine.c.id, _quarantine.c.record_id, _quarantine.c.raw_json)
        .where(_quarantine.c.item_key.is_(None))
        .order_by(_quarantine.c.id)
        .limit(_FILL_BATCH)
    )
    fill = (
        sa.update(_quarantine)
        .where(_quarantine.c.id == sa.bindparam("row_id"))
        .values(item_key=sa.bindparam("key"))
    )
    while rows := bind.execute(unkeyed).all():
        keys = [{"row_id": row.id, "key": _item_key(row.record_id, row.raw_json)} for row in rows]
        bind.execute(fill, keys)
    _keep_earliest("quarantined_records", "merchant_id", "item_key")
    missing_key = _QUARANTINE_KEY not in _unique_keys("quarantined_records")
    with op.batch_alter_table("quarantined_records") as batch:
        batch.alter_column("item_key", existing_type=sa.String(_ITEM_KEY), nullable=False)
        if missing_key:
            batch.create_unique_constraint(_QUARANTINE_KEY, ["merchant_id", "item_key"])


def _key_round_events_per_merchant() -> None:
    keys = _unique_keys("round_events")
    if _EVENT_KEY in keys and _OLD_EVENT_KEY not in keys:
        return
    if _OLD_EVENT_KEY not in keys:
        _keep_earliest("round_events", "merchant_id", "event_id")
    with op.batch_alter_table("round_events") as batch:
        if _EVENT_KEY not in keys:
            batch.create_unique_constraint(_EVENT_KEY, ["merchant_id", "event_id"])
        if _OLD_EVENT_KEY in keys:
            batch.drop_constraint(_OLD_EVENT_KEY, type_="unique")


def upgrade() -> None:
    _key_quarantined_rows()
    _key_round_events_per_merchant()


def downgrade() -> None:
    """Back to 0010; fails where two merchants now share an event id (0010 cannot hold them)."""
    with op.batch_alter_table("round_events") as batch:
        batch.create_unique_constraint(_OLD_EVENT_KEY, ["event_id"])
        batch.drop_constraint(_EVENT_KEY, type_="unique")
    with op.batch_alter_table("quarantined_records") as batch:
        batch.drop_constraint(_QUARANTINE_KEY, type_="unique")
        batch.drop_column("item_key")
