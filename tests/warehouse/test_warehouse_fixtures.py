"""The shared database fixtures skip (or fail, when services are required) with a clear reason."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine, inspect, select, text
from support.dbfixtures import (
    MARIADB_URL_ENV,
    POSTGRES_URL_ENV,
    REQUIRE_SERVICES_ENV,
    SERVER_PARAMS,
    fresh_database,
    reused_database,
)
from support.next_revision import apply_next_revision

from recordsync.warehouse import Warehouse
from recordsync.warehouse.schema import quarantined_records

NOWHERE = {
    "postgres": (POSTGRES_URL_ENV, "postgresql+psycopg://postgres@127.0.0.1:1/test"),
    "mariadb": (MARIADB_URL_ENV, "mysql+pymysql://root@127.0.0.1:1/test"),
}


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_an_absent_server_skips_with_how_to_start_it(kind, monkeypatch, tmp_path):
    monkeypatch.setenv(*NOWHERE[kind])
    monkeypatch.delenv(REQUIRE_SERVICES_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped, fresh_database(kind, tmp_path):
        pass
    reason = str(skipped.value)
    assert f"{kind} server not reachable at" in reason
    assert "127.0.0.1:1" in reason
    assert "docker run" in reason
    assert NOWHERE[kind][0] in reason


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_an_absent_server_fails_when_services_are_required(kind, monkeypatch, tmp_path):
    monkeypatch.setenv(*NOWHERE[kind])
    monkeypatch.setenv(REQUIRE_SERVICES_ENV, "1")
    with (
        pytest.raises(pytest.fail.Exception, match="not reachable"),
        fresh_database(kind, tmp_path),
    ):
        pass


def test_each_test_gets_a_new_empty_database(warehouse_url, request):
    engine = create_engine(warehouse_url)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
    assert request.node.callspec.id in {"sqlite", "postgres", "mariadb"}


def test_a_test_asking_for_the_warehouse_gets_it_migrated_from_the_template(
    warehouse_url, warehouse
):
    """A copy of the worker's migrated template (SQLite) or the worker's migrated database,
    emptied (the servers): either way at the schema's head, with every table."""
    warehouse.check_schema()  # raises unless the schema is this version's
    engine = create_engine(warehouse_url)
    try:
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert {"records", "record_revisions", "sync_state"} <= tables
    assert warehouse.state.load_state("nobody") is None


def _mariadb_schema(url: str) -> dict[str, str]:
    """Every table's and view's definition, its database's name taken out."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            database = conn.execute(text("SELECT DATABASE()")).scalar_one()
            found = {}
            for name, kind in conn.execute(text("SHOW FULL TABLES")).all():
                what = "VIEW" if kind == "VIEW" else "TABLE"
                definition = conn.execute(text(f"SHOW CREATE {what} `{name}`")).one()[1]
                found[name] = re.sub(r" AUTO_INCREMENT=\d+", "", definition).replace(
                    f"`{database}`.", ""
                )
            found["rows of the version table"] = str(
                conn.execute(text("SELECT * FROM recordsync_alembic_version")).all()
            )
            return found
    finally:
        engine.dispose()


@pytest.mark.mariadb
def test_a_mariadb_copy_of_the_template_is_the_migrated_schema_exactly(tmp_path):
    with (
        fresh_database("mariadb", tmp_path / "a") as migrated_here,
        fresh_database("mariadb", tmp_path / "b", migrated=True) as copied,
    ):
        store = Warehouse.connect(migrated_here)
        try:
            store.migrate()
        finally:
            store.close()
        assert _mariadb_schema(copied) == _mariadb_schema(migrated_here)


def _quarantine_one(conn) -> int:
    """A row in a table with a counter; the id it was given."""
    conn.execute(
        quarantined_records.insert().values(
            merchant_id="m",
            source="records",
            position="0",
            reason="test",
            raw_json="{}",
            quarantined_at=datetime(2026, 1, 1, tzinfo=UTC),
            item_key="k",
        )
    )
    return conn.execute(select(quarantined_records.c.id)).scalar_one()


def _identity(conn) -> str:
    return conn.execute(text("SELECT warehouse_id FROM warehouse_identity")).scalar_one()


@pytest.mark.parametrize("kind", SERVER_PARAMS)
def test_a_database_used_again_is_empty_with_counters_restarted_and_a_new_identity(kind):
    """What the next test finds is what migrating a new database leaves, though a session of
    the last one still holds a row lock that emptying the table would wait for."""
    with reused_database(kind) as first:
        engine = create_engine(first)
        left_open = engine.connect()
        with engine.begin() as conn:
            assert _quarantine_one(conn) == 1
            before = _identity(conn)
        left_open.begin()
        left_open.execute(quarantined_records.update().values(reason="locked"))
    left_open.invalidate()  # its session was ended by the fixture, as any test's left open
    engine.dispose()
    with reused_database(kind) as second:
        assert second == first
        engine = create_engine(second)
        try:
            with engine.begin() as conn:
                assert conn.execute(select(quarantined_records.c.id)).all() == []
                assert _identity(conn) != before
                assert _quarantine_one(conn) == 1
        finally:
            engine.dispose()
        store = Warehouse.connect(second)
        try:
            store.check_schema()
        finally:
            store.close()


@pytest.mark.parametrize("kind", SERVER_PARAMS)
def test_a_database_whose_schema_a_test_changed_is_never_used_again(kind, tmp_path):
    with reused_database(kind) as changed:
        apply_next_revision(changed, tmp_path)
    with reused_database(kind) as second:
        assert second != changed
        store = Warehouse.connect(second)
        try:
            store.check_schema()  # this version's head, not the next revision
        finally:
            store.close()
