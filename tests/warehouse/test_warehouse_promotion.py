"""Promoting a kept field to a column: filled from extra_fields in resumable batches, then
by the writer; values that do not fit left NULL and counted, their raw text kept."""

from __future__ import annotations

from decimal import Decimal

import msgspec
import pytest
from sqlalchemy import text
from support.dbfixtures import BACKEND_PARAMS
from support.warehouse_samples import (
    make_change,
    make_record,
    snapshot_page,
    start_rebuild_of_window,
    tail_page,
)

from recordsync.core.extra_fields import members
from recordsync.warehouse import Warehouse
from recordsync.warehouse.fields import promotion

pytestmark = pytest.mark.parametrize(
    "warehouse_url",
    BACKEND_PARAMS,
    indirect=True,
)
ROWS = 240


def _extra(n: int) -> str | None:
    if n % 4 == 0:
        return None  # no unknown member at all
    if n % 4 == 1:
        return '{"channel":"web"}'  # another member only
    if n == 2:
        return '{"tax":"not a number"}'  # does not fit a decimal
    return f'{{"tax":1234567890123456789012345.{n:04d},"channel":"app"}}'


def _records() -> list:
    return [
        msgspec.structs.replace(make_record(f"r{n:03d}", 1), extra_fields=_extra(n))
        for n in range(ROWS)
    ]


def _column(store: Warehouse, table: str) -> dict[tuple[str, int], tuple[object, str | None]]:
    with store.engine.connect() as conn:
        # MariaDB's JSON is its LONGTEXT already (and CAST has no TEXT there).
        extra = (
            "extra_fields"
            if conn.dialect.name in {"mysql", "mariadb"}
            else "CAST(extra_fields AS TEXT)"
        )
        sql = f"SELECT record_id, revision, tax, {extra} FROM {table}"
        rows = conn.execute(text(sql))
        return {(r, v): (tax, extra) for r, v, tax, extra in rows}


def _expected(extra: str | None) -> Decimal | None:
    value = members(extra).get("tax")
    return value if isinstance(value, Decimal) else None


def _equal_to_members(store: Warehouse) -> None:
    for table in ("records", "record_revisions"):
        for key, (tax, extra) in _column(store, table).items():
            assert (None if tax is None else Decimal(str(tax))) == _expected(extra), (table, key)


def test_a_promotion_fills_both_tables_exactly_and_the_writer_carries_on(
    rebuilding: Warehouse,
) -> None:
    snapshot_page(rebuilding, *_records())
    rebuilding.promoted_fields.ttl = 0.0  # the writers see a promotion at their next page
    plan = rebuilding.fields.promotion_plan("tax", "decimal")
    assert plan.carrying == {"records": ROWS // 2, "record_revisions": ROWS // 2}
    result = rebuilding.fields.promote_field("tax", "decimal", batch=50)
    assert (result.filled, result.unfit) == (2 * (ROWS // 2 - 1), 2)
    _equal_to_members(rebuilding)
    newer = msgspec.structs.replace(make_record("r003", 2), extra_fields='{"tax":7.25}')
    dropped = make_record("r007", 2)  # a later revision without the member: NULL again
    tail_page(rebuilding, make_change(newer, 10), make_change(dropped, 11))
    columns = _column(rebuilding, "records")
    assert Decimal(str(columns[("r003", 2)][0])) == Decimal("7.25")
    assert columns[("r007", 2)][0] is None
    _equal_to_members(rebuilding)
    (row,) = rebuilding.fields.list_fields().promoted
    assert (row["field"], row["state"]) == ("tax", "done")
    assert "tax" not in {item["field"] for item in rebuilding.fields.list_fields().unknown}


class _StoppedError(Exception):
    pass


def test_a_promotion_stopped_between_batches_resumes_where_it_was(rebuilding: Warehouse) -> None:
    snapshot_page(rebuilding, *_records())
    seen: list[int] = []

    def stop_after_two(rows: int, _unfit: int) -> None:
        seen.append(rows)
        if len(seen) == 2:
            raise _StoppedError

    with pytest.raises(_StoppedError):
        rebuilding.fields.promote_field("tax", "decimal", batch=20, on_batch=stop_after_two)
    result = rebuilding.fields.promote_field("tax", "decimal", batch=20)
    assert (result.filled, result.unfit) == (2 * (ROWS // 2 - 1), 2)
    _equal_to_members(rebuilding)


def test_the_dry_run_counts_in_pieces_across_merchants_and_revisions_exactly(
    rebuilding: Warehouse,
) -> None:
    snapshot_page(rebuilding, *_records())
    carrying = [r for r in _records() if r.extra_fields and '"tax"' in r.extra_fields]
    later = [msgspec.structs.replace(r, revision=2) for r in carrying[::3]]
    tail_page(rebuilding, *(make_change(r, 1000 + n) for n, r in enumerate(later)))
    other = "merchant-2"
    start_rebuild_of_window(rebuilding, merchant_id=other)
    snapshot_page(rebuilding, *_records()[:50], merchant_id=other)
    mine = ROWS // 2
    theirs = sum(1 for r in _records()[:50] if r.extra_fields and '"tax"' in r.extra_fields)
    expected = {"records": mine + theirs, "record_revisions": mine + len(later) + theirs}
    for piece in (1, 7, 64, 10**6):
        found = promotion.plan(rebuilding.engine, "tax", "decimal", piece=piece).carrying
        assert found == expected, piece
