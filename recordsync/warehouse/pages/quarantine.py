"""Quarantined items stored once per merchant and item, however often their page is read.

A page is read again after any failure (the sync resumes from the cursor that covers what is
stored) and the same record may come from a snapshot window and from the change stream, so
the same bad item reaches the quarantine again and again.  Each row carries ``item_key``,
unique per merchant: the item's record id and revision when it names both (a revision is
immutable on the platform, spec: Record), else its content.  The insert skips a key already
stored (``ON CONFLICT DO NOTHING`` on PostgreSQL and SQLite, a no-op ``ON DUPLICATE KEY
UPDATE`` on MariaDB, which unlike ``INSERT IGNORE`` still fails on bad data), so the first
sighting stays, as the migration that added the key (0011) keeps the earliest row.

The key is stored, so ``item_key`` must never change: revision 0011 computes the same one for
the rows it finds, in a copy of its own (a migration never imports the code it migrates).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.dialects import mysql, postgresql, sqlite

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.warehouse.schema import quarantined_records

_KEY = ("merchant_id", "item_key")


def _revision(raw_json: str) -> int | None:
    """The item's integer ``revision``, if its JSON is an object that has one."""
    try:
        item = json.loads(raw_json)
    except (ValueError, RecursionError):
        return None
    revision = item.get("revision") if isinstance(item, dict) else None
    return revision if isinstance(revision, int) and not isinstance(revision, bool) else None


def item_key(record_id: str | None, raw_json: str) -> str:
    """The item's key: its record and revision when it names both, else its stored JSON."""
    revision = _revision(raw_json)
    if record_id is not None and revision is not None:
        material = f"record\n{record_id}\n{revision}"
    else:
        material = f"raw\n{raw_json}"
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


def _insert_once(dialect_name: str) -> Any:
    if dialect_name == "postgresql":
        return postgresql.insert(quarantined_records).on_conflict_do_nothing(index_elements=_KEY)
    if dialect_name == "sqlite":
        return sqlite.insert(quarantined_records).on_conflict_do_nothing(index_elements=_KEY)
    if dialect_name in MYSQL_FAMILY:
        statement = mysql.insert(quarantined_records)
        return statement.on_duplicate_key_update(id=quarantined_records.c.id)
    raise ValueError(f"no quarantine insert for database backend {dialect_name!r}")


def quarantine(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert the rows (each with its ``item_key``) whose key the merchant has not stored."""
    if rows:
        conn.execute(_insert_once(conn.dialect.name), list(rows))
