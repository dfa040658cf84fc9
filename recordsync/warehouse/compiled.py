"""A write statement compiled once per warehouse, its rows encoded straight to the driver.

SQLAlchemy's per-value processing is the slowest part of a page write at tens of thousands
of records per second, so the upsert and the revision insert bypass it the same way: the
statement is compiled for the connected dialect once, its placeholders are checked against
the column order the row encoders produce, and pages go to the driver's executemany as
plain tuples.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy.engine import Dialect
from sqlalchemy.sql.dml import Insert

T = TypeVar("T")

# merchant_id, the page's items, synced_at -> one tuple per row in the statement's order.
Encoder = Callable[[str, Sequence[T], datetime], list[tuple[Any, ...]]]


@dataclass(frozen=True, slots=True)
class CompiledRows(Generic[T]):
    sql: str
    positional: bool
    columns: tuple[str, ...]
    encode: Encoder[T]

    def parameters(
        self, merchant_id: str, batch: Sequence[T], synced_at: datetime
    ) -> list[tuple[Any, ...]] | list[dict[str, Any]]:
        rows = self.encode(merchant_id, batch, synced_at)
        if self.positional:
            return rows
        # An engine configured with a named paramstyle: correct, if a little slower.
        return [dict(zip(self.columns, row, strict=True)) for row in rows]


def compile_rows(
    statement: Insert,
    dialect: Dialect,
    columns: tuple[str, ...],
    encoders: Mapping[str, Encoder[T]],
    *,
    default: str,
) -> CompiledRows[T]:
    """Compile ``statement`` for ``dialect``; its placeholders must be exactly ``columns``."""
    compiled = statement.compile(dialect=dialect)
    placeholders = tuple(compiled.positiontup or ()) if compiled.positional else None
    if placeholders is not None and placeholders != columns:
        raise RuntimeError(f"unexpected parameter order {placeholders}")
    if placeholders is None and set(compiled.params) != set(columns):
        raise RuntimeError(f"unexpected parameters {sorted(compiled.params)}")
    encode = encoders.get(dialect.name, encoders[default])
    return CompiledRows(
        sql=compiled.string, positional=compiled.positional, columns=columns, encode=encode
    )
