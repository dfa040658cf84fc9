"""Migrations build the schema the code expects, on every backend, and run twice harmlessly."""

from __future__ import annotations

from types import ModuleType

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

import recordsync.warehouse as public
from recordsync.warehouse import Warehouse
from recordsync.warehouse.migrate import _config, current_revision, head_revision, script_location
from recordsync.warehouse.schema import CLUSTERED_BY_ROW_ID, ROW_ID, VERSION_TABLE, metadata_for

FLEET_TABLES = {"merchant_leases", "replicas", "backfill_requests"}
EVENT_TABLES = {"round_events"}  # revision 0005
VERIFY_TABLES = {"verify_requests"}  # revision 0007
REQUEST_TABLES = {"sync_requests"}  # revision 0012
CONTROL_TABLES = {"merchant_controls"}  # revision 0013
IDENTITY_TABLES = {"warehouse_identity", "schema_revisions", "drift_checks"}  # revision 0014
CATALOGUE_TABLES = {"games", "game_localizations"}
AVAILABILITY_TABLES = {"endpoint_availability"}  # revision 0009
ROLLUP_TABLES = {"summary_deltas", "daily_game_totals", "daily_player_totals", "summary_builds"}
FIELD_TABLES = {"record_field_sightings", "promoted_fields"}  # revision 0016
TABLES = {
    "records",
    "record_revisions",
    "sync_state",
    "snapshot_windows",
    "quarantined_records",
    VERSION_TABLE,
    *FLEET_TABLES,
    *EVENT_TABLES,
    *VERIFY_TABLES,
    *REQUEST_TABLES,
    *CONTROL_TABLES,
    *IDENTITY_TABLES,
    *CATALOGUE_TABLES,
    *AVAILABILITY_TABLES,
    *ROLLUP_TABLES,  # revision 0015
    *FIELD_TABLES,
}
VIEWS = {
    "daily_game_summary",
    "daily_player_summary",
    "sync_freshness",
    "daily_game_summary_named",
}
RECORD_INDEXES = {
    "ix_records_merchant_created": ["merchant_id", "created_at"],
    "ix_records_merchant_player": ["merchant_id", "player_id", "created_at"],
    "ix_records_merchant_round": ["merchant_id", "round_id"],
}
# What each backend must store money and times as (see recordsync/warehouse/types.py).
EXACT_TYPES = {
    "sqlite": ("TEXT", "TEXT"),
    "postgresql": ("NUMERIC(30, 4)", "TIMESTAMP WITH TIME ZONE"),
    "mysql": ("DECIMAL(30, 4)", "DATETIME(6)"),
}


def test_migrations_build_the_schema_on_an_empty_database_and_are_idempotent(warehouse_url):
    store = Warehouse.connect(warehouse_url)
    try:
        assert set(inspect(store.engine).get_table_names()) == set()
        store.migrate()
        store.migrate()
        tables = set(inspect(store.engine).get_table_names())
        views = set(inspect(store.engine).get_view_names())
        with store.engine.connect() as conn:
            revision = current_revision(conn)
    finally:
        store.close()
    assert tables == TABLES
    assert views == VIEWS
    assert revision == head_revision() == "0018"


def test_migrated_schema_matches_the_tables_the_code_uses(warehouse):
    with warehouse.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
        )
        assert compare_metadata(context, metadata_for(conn.dialect.name)) == []


def _clustered_by_row_id(warehouse) -> bool:
    return warehouse.engine.dialect.name in {"mysql", "mariadb"}


def _unique_keys(inspector, table: str) -> dict[str, list[str]]:
    return {u["name"]: u["column_names"] for u in inspector.get_unique_constraints(table)}


def test_records_have_the_bi_indexes_and_the_merchant_record_key(warehouse):
    """On MariaDB the (merchant_id, record_id) key is unique, the clustered key ``row_id``."""
    inspector = inspect(warehouse.engine)
    indexes = {
        index["name"]: index["column_names"]
        for index in inspector.get_indexes("records")
        if not index["unique"]
    }
    assert indexes == RECORD_INDEXES
    key = inspector.get_pk_constraint("records")["constrained_columns"]
    if _clustered_by_row_id(warehouse):
        assert key == [ROW_ID]
        unique = {CLUSTERED_BY_ROW_ID["records"]: ["merchant_id", "record_id"]}
        assert _unique_keys(inspector, "records") == unique
    else:
        assert key == ["merchant_id", "record_id"]


@pytest.mark.parametrize("table", ["records", "record_revisions"])
def test_money_and_times_use_exact_types_never_float(warehouse, table):
    columns = {c["name"]: c["type"] for c in inspect(warehouse.engine).get_columns(table)}
    dialect = warehouse.engine.dialect
    money, time = EXACT_TYPES["mysql" if dialect.name == "mariadb" else dialect.name]
    for name in ("bet_amount", "refund_amount", "payout_amount", "net_amount"):
        assert str(columns[name].compile(dialect=dialect)) == money
    for name in ("created_at", "settled_at", "updated_at", "synced_at"):
        assert str(columns[name].compile(dialect=dialect)) == time


def test_money_units_are_64_bit_integers(warehouse):
    columns = {c["name"]: c["type"] for c in inspect(warehouse.engine).get_columns("records")}
    dialect = warehouse.engine.dialect
    for name in ("bet_units", "refund_units", "payout_units", "net_units"):
        assert str(columns[name].compile(dialect=dialect)).startswith("BIGINT")


def test_revisions_are_keyed_by_merchant_record_and_revision(warehouse):
    inspector = inspect(warehouse.engine)
    key = inspector.get_pk_constraint("record_revisions")["constrained_columns"]
    if _clustered_by_row_id(warehouse):
        assert key == [ROW_ID]
        unique = {CLUSTERED_BY_ROW_ID["record_revisions"]: ["merchant_id", "record_id", "revision"]}
        assert _unique_keys(inspector, "record_revisions") == unique
    else:
        assert key == ["merchant_id", "record_id", "revision"]


def test_scripts_are_found_from_the_source_checkout():
    versions = script_location() / "versions"
    for name in (
        "0001_initial_schema.py",
        "0002_record_revisions.py",
        "0003_bi_views.py",
        "0004_fleet.py",
        "0005_round_events.py",
        "0006_games.py",
        "0007_verify_requests.py",
        "0008_sequential_clustered_key.py",
        "0009_endpoint_availability.py",
        "0010_replica_merchants.py",
        "0011_idempotent_rows.py",
        "0012_sync_requests.py",
        "0013_merchant_controls.py",
        "0014_warehouse_identity.py",
        "0015_rollups.py",
        "0016_extra_fields.py",
        "0017_lean_indexes.py",
        "0018_views_planned_cheap.py",
    ):
        assert (versions / name).is_file()


SESSION_CHECKS = {
    "sqlite": [
        ("PRAGMA journal_mode", "wal"),
        ("PRAGMA busy_timeout", 30000),
        ("PRAGMA foreign_keys", 1),
        ("PRAGMA cache_size", -32768),
        ("PRAGMA wal_autocheckpoint", 16384),
    ],
    "postgresql": [("SELECT 1", 1)],
    "mysql": [
        ("SELECT @@session.time_zone", "+00:00"),
        ("SELECT @@character_set_client", "utf8mb4"),
    ],
}


def test_connect_applies_the_session_settings_each_backend_needs(warehouse):
    dialect = warehouse.engine.dialect.name
    with warehouse.engine.connect() as conn:
        for query, expected in SESSION_CHECKS["mysql" if dialect == "mariadb" else dialect]:
            assert conn.exec_driver_sql(query).scalar_one() == expected, query


def test_the_package_exports_its_public_names_sorted():
    assert public.__all__ == sorted(public.__all__)
    assert all(hasattr(public, name) for name in public.__all__)


def test_the_package_exports_every_public_name_it_binds():
    bound = {
        name
        for name, value in vars(public).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert set(public.__all__) == bound


def test_the_bi_revisions_downgrade_to_0001_and_upgrade_again(warehouse):
    config = _config()
    with warehouse.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0001")
    inspector = inspect(warehouse.engine)
    assert set(inspector.get_table_names()) == TABLES - {
        "record_revisions",
        *FLEET_TABLES,
        *EVENT_TABLES,
        *VERIFY_TABLES,
        *REQUEST_TABLES,
        *ROLLUP_TABLES,
        *CONTROL_TABLES,
        *IDENTITY_TABLES,
        *CATALOGUE_TABLES,
        *AVAILABILITY_TABLES,
        *FIELD_TABLES,
    }
    assert inspector.get_view_names() == []
    assert not any(c["name"].endswith("_units") for c in inspector.get_columns("records"))
    warehouse.migrate()
    assert set(inspect(warehouse.engine).get_view_names()) == VIEWS


REVISIONS = [
    "0001",
    "0002",
    "0003",
    "0004",
    "0005",
    "0006",
    "0007",
    "0008",
    "0009",
    "0010",
    "0011",
    "0012",
    "0013",
    "0014",
    "0015",
    "0016",
    "0017",
    "0018",
]


@pytest.mark.parametrize("revision", REVISIONS)
def test_a_revision_killed_before_its_version_row_runs_again_at_the_next_start(
    warehouse_url, revision
):
    """MariaDB commits each DDL statement by itself (and alembic does not wrap SQLite's), so a
    process killed inside a revision leaves part of it applied with the version row still at
    the revision before.  Worst case: everything applied.  The next start runs the revision
    again; it must finish, not stop on "already exists" at every restart."""
    store = Warehouse.connect(warehouse_url)
    try:
        config = _config()
        before = REVISIONS[REVISIONS.index(revision) - 1] if revision != "0001" else "base"
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
            command.stamp(config, before, purge=True)
        store.migrate()
        inspector = inspect(store.engine)
        assert set(inspector.get_table_names()) == TABLES
        assert set(inspector.get_view_names()) == VIEWS
        with store.engine.connect() as conn:
            assert current_revision(conn) == head_revision()
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
            )
            assert compare_metadata(context, metadata_for(conn.dialect.name)) == []
    finally:
        store.close()
