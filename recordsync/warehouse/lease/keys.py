"""The names of the merchant locks: stable, and the same an older recordsync took.

- PostgreSQL: an advisory lock key, a stable 64-bit hash of ``"recordsync:" + merchant_id``
  (``lease_key``).  Advisory locks are per database, so two warehouses on one server do not
  interfere.
- MariaDB: ``GET_LOCK('recordsync:<database>:<merchant>')`` (``mysql_lock_name``).  Lock names
  are server-wide, hence the database in the name; names longer than 64 characters (MySQL's
  limit) are hashed.

They never change: a replica of an older version (one merchant per process, before the fleet)
took the same ones, so it and a fleet replica never sync one merchant at once during an upgrade.
"""

from __future__ import annotations

import hashlib
from typing import Final

MYSQL_LOCK_NAME_MAX: Final = 64


def lease_key(merchant_id: str) -> int:
    """The PostgreSQL advisory lock key: a stable signed 64-bit hash of the merchant."""
    digest = hashlib.sha256(f"recordsync:{merchant_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def mysql_lock_name(database: str, merchant_id: str) -> str:
    """``GET_LOCK`` name: readable when it fits in 64 characters, hashed otherwise."""
    name = f"recordsync:{database}:{merchant_id}"
    if len(name) <= MYSQL_LOCK_NAME_MAX:
        return name
    digest = hashlib.sha256(f"{database}:{merchant_id}".encode()).hexdigest()
    return ("recordsync:" + digest)[:MYSQL_LOCK_NAME_MAX]
