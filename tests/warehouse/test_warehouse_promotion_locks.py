"""A promotion on a server beside the sync: each fill batch reads a range of the primary key
(never the rest of the table, sorted, for every batch), and its ALTER never queues the page
commits behind a long reader."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from sqlalchemy import Engine, create_engine, event, text
from support.dbfixtures import SERVER_PARAMS
from support.warehouse_samples import make_change, make_record, snapshot_page, tail_page

from recordsync.warehouse import Warehouse
from recordsync.warehouse.fields.promotion import ALTER_LOCK_WAIT

ROWS = 60


def _fill(store: Warehouse) -> None:
    snapshot_page(
        store,
        *(
            msgspec.structs.replace(make_record(f"r{n:03d}", 1), extra_fields=f'{{"tax":{n}.5}}')
            for n in range(ROWS)
        ),
    )
    tail_page(
        store, *(make_change(make_record(f"r{n:03d}", 2), 100 + n) for n in range(0, ROWS, 3))
    )


@pytest.fixture
def statements() -> Iterator[list[tuple[str, Any]]]:
    """Every SELECT of the rows of records or record_revisions any engine sends meanwhile."""
    seen: list[tuple[str, Any]] = []

    def heard(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().startswith("SELECT") and "extra_fields" in statement:
            seen.append((statement, parameters))

    event.listen(Engine, "before_cursor_execute", heard)
    yield seen
    event.remove(Engine, "before_cursor_execute", heard)


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_every_fill_batch_reads_a_range_of_the_key_in_its_order(
    rebuilding: Warehouse, statements: list[tuple[str, Any]]
) -> None:
    _fill(rebuilding)
    rebuilding.promoted_fields.ttl = 0.0
    rebuilding.fields.promote_field("tax", "decimal", batch=7)
    reads = [(sql, params) for sql, params in statements if "ORDER BY" in sql]
    assert len(reads) >= 2 * ROWS // 7
    with rebuilding.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            _postgres_reads_ranges(conn, reads)
        else:
            _mariadb_reads_ranges(conn, reads)


def _postgres_reads_ranges(conn: Any, reads: list[tuple[str, Any]]) -> None:
    # As on a table too big to scan or sort: a read the key's order cannot serve as a range
    # shows a sort or a filter over the index, whatever its size.
    for method in ("seqscan", "bitmapscan", "sort", "incremental_sort"):
        conn.exec_driver_sql(f"SET enable_{method} = off")
    for sql, params in reads:
        plan = "\n".join(row[0] for row in conn.exec_driver_sql(f"EXPLAIN {sql}", params))
        assert "Index Scan using pk_" in plan, plan
        assert "Sort" not in plan, plan
        assert "Filter:" not in plan, plan


def _mariadb_reads_ranges(conn: Any, reads: list[tuple[str, Any]]) -> None:
    # A ref on the merchant with the rest of the key as a filter reads from the merchant's
    # first entry on each batch: only a range of the key (or the whole key in order, for the
    # first batch) is bounded, and only read in its order, not sorted.
    for sql, params in reads:
        (plan,) = conn.exec_driver_sql(f"EXPLAIN {sql}", params).mappings().all()
        assert plan["key"].startswith("uq_"), (sql, params, plan)
        assert plan["type"] in {"range", "index"}, (sql, params, plan)
        assert "filesort" not in (plan["Extra"] or ""), (sql, params, plan)


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_a_promotion_waiting_behind_a_long_reader_lets_the_pages_through(
    rebuilding: Warehouse, warehouse_url: str
) -> None:
    _fill(rebuilding)
    rebuilding.promoted_fields.ttl = 0.0
    reader_engine = create_engine(warehouse_url)
    reader = reader_engine.connect()
    reader.begin()
    reader.execute(text("SELECT COUNT(*) FROM records")).scalar_one()  # holds the table
    promoted: list[object] = []
    promotion = threading.Thread(
        target=lambda: promoted.append(rebuilding.fields.promote_field("tax", "decimal"))
    )
    try:
        promotion.start()
        time.sleep(ALTER_LOCK_WAIT / 2)  # the ALTER is waiting for the reader now
        took: list[float] = []

        def one_page() -> None:
            began = time.perf_counter()
            tail_page(rebuilding, make_change(make_record("r001", 3), 500))
            took.append(time.perf_counter() - began)

        page = threading.Thread(target=one_page)
        page.start()
        page.join(timeout=6 * ALTER_LOCK_WAIT)
        assert took, "the page commit waited behind the promotion's ALTER"
        assert took[0] < 3 * ALTER_LOCK_WAIT
        assert promotion.is_alive()  # still waiting for the reader, and trying again
    finally:
        reader.rollback()
        reader.close()
        reader_engine.dispose()
        promotion.join(timeout=30)
    assert promoted
    with rebuilding.engine.connect() as conn:
        top = conn.execute(text("SELECT revision, tax FROM records WHERE record_id = 'r004'"))
        assert [(v, Decimal(str(tax))) for v, tax in top] == [(1, Decimal("4.5"))]
