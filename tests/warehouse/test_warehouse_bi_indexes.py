"""The BI indexes of ``records`` are left out while a new job the sync asks to defer them for
loads an empty table, and built once after it (``warehouse.bi_indexes``), on every backend."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import text
from support.dbfixtures import SERVER_PARAMS
from support.pages import commit_window_page
from support.warehouse_samples import (
    MERCHANT,
    T0,
    WINDOW,
    make_record,
    start_rebuild_of_window,
    windows,
)

from recordsync import cli
from recordsync.core.errors import WarehouseUnavailableError
from recordsync.core.models import Record
from recordsync.core.state import REBUILD_JOB, Window
from recordsync.warehouse import Warehouse
from recordsync.warehouse.bi import indexes as bi_indexes
from recordsync.warehouse.bi.indexes import (
    BI_INDEX_NAMES,
    RETIRED,
    build_statements,
    drop_statements,
)
from recordsync.warehouse.schema import records

JOB = "backfill:test"
ALL = sorted(BI_INDEX_NAMES)


def store_one(warehouse: Warehouse, *rows: Record) -> None:
    """A row (or ``rows``) in ``records`` under a rebuild of its own, which, started on an
    empty table, left the BI indexes out."""
    start_rebuild_of_window(warehouse, defer_bi_indexes=True)
    commit_window_page(
        warehouse,
        MERCHANT,
        REBUILD_JOB,
        WINDOW,
        records=list(rows) or [make_record("rec-1")],
        rejected=[],
        next_cursor="c1",
        cursor_issued_at=T0,
        done=False,
        position="first",
    )


def test_the_bi_indexes_are_every_secondary_index_of_records_and_no_key() -> None:
    assert set(BI_INDEX_NAMES) == {index.name for index in records.indexes}
    assert len(BI_INDEX_NAMES) == 3
    assert "pk_records" not in BI_INDEX_NAMES


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        (
            "sqlite",
            (
                "CREATE INDEX IF NOT EXISTS ix_records_merchant_player ON records "
                "(merchant_id, player_id, created_at)"
            ),
        ),
        (
            "postgresql",
            (
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_records_merchant_player ON records "
                "(merchant_id, player_id, created_at)"
            ),
        ),
        (
            "mysql",
            (
                "ALTER TABLE records ADD INDEX IF NOT EXISTS ix_records_merchant_player "
                "(merchant_id, player_id, created_at), ALGORITHM=INPLACE, LOCK=NONE"
            ),
        ),
    ],
    ids=["sqlite", "postgres", "mariadb"],
)
def test_an_index_is_built_online_from_its_definition_in_the_schema(backend, expected) -> None:
    assert build_statements(backend, str, ["ix_records_merchant_player"]) == [expected]


def test_several_indexes_are_one_alter_on_mariadb_and_dropped_if_they_exist() -> None:
    (alter,) = build_statements("mysql", str, ALL)
    assert alter.count("ADD INDEX IF NOT EXISTS") == 3
    assert drop_statements("mysql", str, ALL[:2]) == [
        f"ALTER TABLE records DROP INDEX IF EXISTS {ALL[0]}, DROP INDEX IF EXISTS {ALL[1]}"
    ]
    assert drop_statements("postgresql", str, ALL[:1]) == [f"DROP INDEX IF EXISTS {ALL[0]}"]
    assert build_statements("sqlite", str, []) == []


def test_a_migrated_warehouse_has_every_bi_index(warehouse: Warehouse) -> None:
    assert warehouse.bi.missing_bi_indexes() == []


def test_a_retired_index_an_older_replica_built_again_is_dropped_by_the_build(
    warehouse: Warehouse,
) -> None:
    """During a rolling upgrade a replica of a version before 0017 builds the indexes it
    dropped (to that version they are missing); this version's build drops them again."""
    with warehouse.engine.begin() as conn:
        for name in RETIRED:
            conn.exec_driver_sql(f"CREATE INDEX {name} ON records (merchant_id, created_at)")
    assert warehouse.bi.missing_bi_indexes() == list(RETIRED)  # work to do: the build runs
    warehouse.bi.build_bi_indexes()
    assert warehouse.bi.missing_bi_indexes() == []
    with warehouse.engine.connect() as conn:
        assert bi_indexes.retired(conn) == []


def test_a_new_backfill_into_an_empty_table_leaves_them_out(warehouse: Warehouse) -> None:
    warehouse.state.ensure_job(MERCHANT, JOB, windows(2), defer_bi_indexes=True)
    assert warehouse.bi.missing_bi_indexes() == ALL


def test_a_new_rebuild_into_an_empty_table_leaves_them_out(warehouse: Warehouse) -> None:
    start_rebuild_of_window(warehouse, defer_bi_indexes=True)
    assert warehouse.bi.missing_bi_indexes() == ALL


def test_a_new_job_the_sync_does_not_defer_for_keeps_them(warehouse: Warehouse) -> None:
    """A load the rate limit bounds (``sync.indexes.defer_for``) keeps them up to date."""
    warehouse.state.ensure_job(MERCHANT, JOB, windows(2))
    start_rebuild_of_window(warehouse)
    assert warehouse.bi.missing_bi_indexes() == []


def test_a_rebuild_with_nothing_to_read_keeps_them(warehouse: Warehouse) -> None:
    warehouse.state.start_rebuild(
        MERCHANT,
        change_cursor="c",
        anchor_at=T0,
        history_from=T0,
        snapshot_to=T0,
        windows=[],
        defer_bi_indexes=True,
    )
    assert warehouse.bi.missing_bi_indexes() == []


def test_a_new_job_keeps_them_when_the_table_has_rows(warehouse: Warehouse) -> None:
    store_one(warehouse)
    warehouse.bi.build_bi_indexes()
    warehouse.state.ensure_job(MERCHANT, JOB, windows(2), defer_bi_indexes=True)
    warehouse.state.start_rebuild(
        MERCHANT,
        change_cursor="c2",
        anchor_at=T0 + timedelta(hours=1),
        history_from=WINDOW.start,
        snapshot_to=WINDOW.end,
        windows=[WINDOW],
        defer_bi_indexes=True,
    )
    assert warehouse.bi.missing_bi_indexes() == []


def test_a_resumed_job_keeps_them(warehouse: Warehouse) -> None:
    warehouse.state.ensure_job(MERCHANT, JOB, windows(2), defer_bi_indexes=True)
    assert warehouse.bi.build_bi_indexes() == ALL  # say, `recordsync migrate` meanwhile
    warehouse.state.ensure_job(MERCHANT, JOB, windows(2), defer_bi_indexes=True)
    assert warehouse.bi.missing_bi_indexes() == []


def test_a_build_adds_the_missing_ones_once(warehouse: Warehouse) -> None:
    warehouse.state.ensure_job(MERCHANT, JOB, windows(2), defer_bi_indexes=True)
    assert warehouse.bi.build_bi_indexes(MERCHANT) == ALL
    assert warehouse.bi.missing_bi_indexes() == []
    assert warehouse.bi.build_bi_indexes(MERCHANT) == []


def test_the_views_and_the_cross_check_read_the_same_without_them(warehouse: Warehouse) -> None:
    store_one(
        warehouse,
        *[
            make_record(f"rec-{n}", player_id=f"p{n % 3}", game_id=f"g{n % 2}", round_id=f"r{n}")
            for n in range(12)
        ],
    )

    def everything_read() -> object:
        day = warehouse.bi.newest_record_day(MERCHANT)
        assert day is not None
        fresh = warehouse.bi.freshness(MERCHANT)
        assert fresh is not None
        return (
            day,
            warehouse.bi.daily_summaries(MERCHANT, per="game", first_day=day, last_day=day),
            warehouse.bi.daily_summaries(MERCHANT, per="player", first_day=day, last_day=day),
            warehouse.records.record_ids_created(MERCHANT, T0, T0 + timedelta(days=1)),
            warehouse.events.rounds_announced_missing(MERCHANT, 0),
            # Its ages are whole seconds by the database's clock: the two reads may straddle
            # a second (a full CI run once saw 0, then 1), and the indexes do not change them.
            replace(fresh, staleness_seconds=None, seconds_since_commit=None),
        )

    without = everything_read()
    assert warehouse.bi.missing_bi_indexes() == ALL
    warehouse.bi.build_bi_indexes()
    assert warehouse.bi.missing_bi_indexes() == []
    assert everything_read() == without


@pytest.mark.parametrize("warehouse_url", [SERVER_PARAMS[0]], indirect=True)
def test_an_invalid_postgres_index_left_by_a_dead_build_is_replaced(warehouse: Warehouse) -> None:
    store_one(warehouse)
    warehouse.bi.build_bi_indexes()
    name = "ix_records_merchant_round"
    with warehouse.engine.begin() as conn:
        conn.execute(text(f"DROP INDEX {name}"))
        conn.execute(text(f"CREATE INDEX {name} ON records (merchant_id, round_id)"))
        # What a CREATE INDEX CONCURRENTLY killed half-way leaves behind.
        conn.execute(
            text(
                "UPDATE pg_index SET indisvalid = false WHERE indexrelid = CAST(:name AS regclass)"
            ),
            {"name": name},
        )
    assert warehouse.bi.missing_bi_indexes() == [name]
    assert warehouse.bi.build_bi_indexes() == [name]
    with warehouse.engine.connect() as conn:
        valid = conn.execute(
            text("SELECT indisvalid FROM pg_index WHERE indexrelid = CAST(:name AS regclass)"),
            {"name": name},
        ).scalar_one()
    assert valid is True
    assert warehouse.bi.missing_bi_indexes() == []


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_two_replicas_building_at_once_both_end_fine(warehouse_url: str) -> None:
    first, second = Warehouse.connect(warehouse_url), Warehouse.connect(warehouse_url)
    try:
        first.migrate()
        store_one(first)
        first.state.ensure_job(
            MERCHANT, JOB, windows(1), defer_bi_indexes=True
        )  # rows: none left out
        with first.engine.begin() as conn:  # drop them by hand, as a first load would
            for statement in drop_statements(conn.dialect.name, str, ALL):
                conn.execute(text(statement))
        assert first.bi.missing_bi_indexes() == ALL
        built: list[list[str]] = []
        errors: list[BaseException] = []

        def build(warehouse: Warehouse) -> None:
            try:
                built.append(warehouse.bi.build_bi_indexes(MERCHANT))
            except BaseException as error:  # noqa: BLE001 - reported by the assertion below
                errors.append(error)

        threads = [threading.Thread(target=build, args=(store,)) for store in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert sorted(name for names in built for name in names) in (ALL, sorted(ALL * 2))
        assert first.bi.missing_bi_indexes() == []
        assert second.bi.build_bi_indexes() == []
    finally:
        first.close()
        second.close()


def test_a_window_plan_does_not_depend_on_them(warehouse: Warehouse) -> None:
    """Deferred or not, the job's windows are the ones registered."""
    plan = [Window(T0 - timedelta(days=2), T0 - timedelta(days=1))]
    progress = warehouse.state.ensure_job(MERCHANT, JOB, plan, defer_bi_indexes=True)
    assert [item.window for item in progress] == plan


def test_recordsync_migrate_builds_what_a_first_load_left_out(warehouse_url: str, tmp_path):
    store = Warehouse.connect(warehouse_url)
    try:
        store.migrate()
        store.state.ensure_job(
            MERCHANT, JOB, windows(2), defer_bi_indexes=True
        )  # abandoned half-way
        assert store.bi.missing_bi_indexes() == ALL
        config = tmp_path / "recordsync.toml"
        config.write_text(f'merchant_id = "{MERCHANT}"\ndatabase_url = "{warehouse_url}"\n')
        assert cli.main(["--config", str(config), "migrate"]) == 0
        assert store.bi.missing_bi_indexes() == []
    finally:
        store.close()


MARIADB_ONLY = [param for param in SERVER_PARAMS if param.id == "mariadb"]


@pytest.mark.parametrize("warehouse_url", MARIADB_ONLY, indirect=True)
def test_a_mariadb_build_behind_an_open_transaction_gives_up_and_never_stalls_the_pages(
    warehouse: Warehouse,
) -> None:
    """Issue 30: MariaDB queues every statement on ``records`` behind an ALTER waiting for its
    metadata lock, and an ALTER without a lock-wait limit waited for an open transaction for
    as long as it stayed open (a year by default), every page commit behind it.  Now it gives
    up after a second (tried again later) and the pages go on."""
    store_one(warehouse)
    with warehouse.engine.begin() as conn:  # left out, as by a first load
        for statement in drop_statements(conn.dialect.name, str, ALL):
            conn.execute(text(statement))
    reader = warehouse.engine.connect()
    reader.execute(text("SELECT record_id FROM records LIMIT 1")).all()  # its transaction stays
    outcome: list[BaseException | list[str]] = []

    def build() -> None:
        try:
            outcome.append(warehouse.bi.build_bi_indexes(MERCHANT))
        except WarehouseUnavailableError as error:
            outcome.append(error)

    builder = threading.Thread(target=build)
    started = time.monotonic()
    builder.start()
    slowest = 0.0
    try:
        for number in range(1, 16):  # pages keep committing while the build waits
            time.sleep(0.1)
            began = time.monotonic()
            commit_window_page(
                warehouse,
                MERCHANT,
                REBUILD_JOB,
                WINDOW,
                records=[make_record(f"rec-page-{number}")],
                rejected=[],
                next_cursor=f"c{number + 1}",
                cursor_issued_at=T0,
                done=False,
                position=f"c{number}",
            )
            slowest = max(slowest, time.monotonic() - began)
        builder.join(10)
    finally:
        reader.rollback()
        reader.close()
    (gave_up,) = outcome
    assert isinstance(gave_up, WarehouseUnavailableError)
    assert time.monotonic() - started < 10
    assert slowest < 2.0, f"a page commit waited {slowest:.1f} s behind the build"
    assert warehouse.bi.build_bi_indexes(MERCHANT) == ALL  # tried again, the reader gone
