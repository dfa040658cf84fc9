"""A checksum of every table of a warehouse, to prove a command wrote nothing: each table's
rows, every column, in a fixed order, hashed (the schema version table included)."""

from __future__ import annotations

import hashlib

from sqlalchemy import MetaData, select
from sqlalchemy.engine import Engine


def table_checksums(engine: Engine, *, ignore: frozenset[str] = frozenset()) -> dict[str, str]:
    """Every table's checksum but those in ``ignore`` (``replicas``: a running daemon's
    heartbeat moves it by itself)."""
    tables = MetaData()
    tables.reflect(bind=engine)
    sums: dict[str, str] = {}
    with engine.connect() as conn:
        for name, table in sorted(tables.tables.items()):
            if name in ignore:
                continue
            digest = hashlib.sha256()
            ordered = select(table).order_by(*table.columns)
            for row in conn.execute(ordered):
                digest.update(repr(tuple(row)).encode())
            sums[name] = digest.hexdigest()
    return sums
