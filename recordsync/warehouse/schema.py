"""The warehouse tables as the code sees them; the Alembic revisions create the same ones.

``records`` holds one row per (merchant_id, record_id) at the highest revision seen (spec:
Record; Records endpoints, "the client keeps, per record_id, the highest revision").
``sync_state`` and ``snapshot_windows`` hold the cursors that cover those rows
(``recordsync.core.state``); they are always written in the same transaction as the rows.
``quarantined_records`` keeps every item that failed validation, exactly as received, so
nothing is silently lost; once per merchant and item however often its page is read
(``item_key``, revision 0011).  ``record_revisions`` is the append-only history of every revision
seen (revision 0002); the ``*_units`` columns of ``records`` (revision 0003) hold each amount
as an integer number of 10**-4 so that SQLite can sum money exactly (see ``types``).

The migrations spell the column types out per dialect instead of importing this module, so
that each stays a fixed record of its revision when this module changes; a test compares the
migrated schema with these tables on every backend.  The BI views (revision 0003) are read
through ``recordsync.warehouse.bi.summaries``.  ``merchant_leases`` and ``replicas``
(revision 0004) are the fleet's: which holder's writes count, who is alive; ``sync_requests``
(revision 0012) the work commands hand to a merchant's holder.  ``games`` and ``game_localizations``
(revision 0006) are the game catalogue, the dimension that names a record's ``game_id``;
``endpoint_availability`` (revision 0009) says which optional endpoints a merchant is served.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql, postgresql

from recordsync.warehouse.types import (
    big_id,
    cursor_text,
    exact_decimal,
    json_text,
    large_text,
    utc_datetime,
)

# Identifiers are opaque strings (spec: Conventions, Identifiers); UUIDs in practice.  255
# characters keep the composite keys inside MariaDB's 3072-byte index limit in utf8mb4.
ID_LENGTH: Final = 255
# Currency codes are at most 16 characters; statuses are short words, kept as received.
CODE_LENGTH: Final = 64
PHASE_LENGTH: Final = 16
# An event id equals its Idempotency-Key: 1-128 characters (spec: Authentication, Headers).
EVENT_ID_LENGTH: Final = 128
# A version string, a schema revision, a warehouse id.
REVISION_LENGTH: Final = 64
# A quarantined item's key (``quarantine.item_key``): a SHA-256 in hex.
ITEM_KEY_LENGTH: Final = 64

# Primary keys named as revision 0001 names them.
metadata = MetaData(naming_convention={"pk": "pk_%(table_name)s"})

records = Table(
    "records",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("record_id", String(ID_LENGTH), primary_key=True),
    Column("revision", BigInteger, nullable=False),
    Column("player_id", String(ID_LENGTH), nullable=False),
    Column("game_id", String(ID_LENGTH), nullable=False),
    Column("currency", String(CODE_LENGTH), nullable=False),
    Column("round_id", String(ID_LENGTH), nullable=False),
    Column("parent_round_id", String(ID_LENGTH), nullable=True),
    Column("bet_amount", exact_decimal(), nullable=False),
    Column("refund_amount", exact_decimal(), nullable=False),
    Column("payout_amount", exact_decimal(), nullable=False),
    Column("net_amount", exact_decimal(), nullable=False),
    Column("status", String(CODE_LENGTH), nullable=False),
    Column("created_at", utc_datetime(), nullable=False),
    Column("settled_at", utc_datetime(), nullable=True),
    Column("updated_at", utc_datetime(), nullable=False),
    Column("synced_at", utc_datetime(), nullable=False),
    # Revision 0003: each amount times 10**4 as an integer, NULL beyond +-(2**63 - 1); written
    # by the upsert with the amount, so SQLite's views sum integers, never floats.
    Column("bet_units", BigInteger, nullable=True),
    Column("refund_units", BigInteger, nullable=True),
    Column("payout_units", BigInteger, nullable=True),
    Column("net_units", BigInteger, nullable=True),
    # Revision 0016: the members of the record recordsync does not know, as sent
    # (``Record.extra_fields``); NULL when it had none.
    Column("extra_fields", json_text(), nullable=True),
    # Each secondary index is read by a query (revision 0017 dropped two that none read):
    # creation time by the dry runs' counts, verify, report's newest day and the OPEN-rounds
    # panels; player by daily_player_summary and a player's rounds (docs/bi.md).
    Index("ix_records_merchant_created", "merchant_id", "created_at"),
    Index("ix_records_merchant_player", "merchant_id", "player_id", "created_at"),
    # Revision 0005: the cross-check of round-end notifications looks rounds up by id.
    Index("ix_records_merchant_round", "merchant_id", "round_id"),
)

# Revision 0002: one row per revision recordsync has seen, written in the transaction that
# upserts the records.  ``sequence`` and ``changed_at`` come from the change stream (spec: Record
# change); they are NULL for a revision known only from a snapshot page.  A row is never
# rewritten, except that a revision first seen in a snapshot gets its sequence and changed_at
# when it later arrives through the change stream.
record_revisions = Table(
    "record_revisions",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("record_id", String(ID_LENGTH), primary_key=True),
    Column("revision", BigInteger, primary_key=True),
    Column("player_id", String(ID_LENGTH), nullable=False),
    Column("game_id", String(ID_LENGTH), nullable=False),
    Column("currency", String(CODE_LENGTH), nullable=False),
    Column("round_id", String(ID_LENGTH), nullable=False),
    Column("parent_round_id", String(ID_LENGTH), nullable=True),
    Column("bet_amount", exact_decimal(), nullable=False),
    Column("refund_amount", exact_decimal(), nullable=False),
    Column("payout_amount", exact_decimal(), nullable=False),
    Column("net_amount", exact_decimal(), nullable=False),
    Column("status", String(CODE_LENGTH), nullable=False),
    Column("created_at", utc_datetime(), nullable=False),
    Column("settled_at", utc_datetime(), nullable=True),
    Column("updated_at", utc_datetime(), nullable=False),
    # A decimal string of any length (spec: Record change), like sync_state.last_sequence.
    Column("sequence", cursor_text(), nullable=True),
    Column("changed_at", utc_datetime(), nullable=True),
    Column("synced_at", utc_datetime(), nullable=False),
    Column("extra_fields", json_text(), nullable=True),  # revision 0016, as in records
)

sync_state = Table(
    "sync_state",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("phase", String(PHASE_LENGTH), nullable=False),
    Column("change_cursor", cursor_text(), nullable=False),
    Column("anchor_at", utc_datetime(), nullable=False),
    Column("history_from", utc_datetime(), nullable=False),
    Column("snapshot_to", utc_datetime(), nullable=False),
    Column("rebuilds", Integer, nullable=False),
    # Sequences are decimal strings that may exceed 64 bits (spec: Record change).
    Column("last_sequence", cursor_text(), nullable=True),
    Column("last_projection_as_of", utc_datetime(), nullable=True),
    Column("last_commit_at", utc_datetime(), nullable=True),
    Column("updated_at", utc_datetime(), nullable=False),
)

snapshot_windows = Table(
    "snapshot_windows",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("job", String(ID_LENGTH), primary_key=True),
    Column("window_start", utc_datetime(), primary_key=True),
    Column("window_end", utc_datetime(), nullable=False),
    Column("cursor", cursor_text(), nullable=True),
    Column("cursor_issued_at", utc_datetime(), nullable=True),
    Column("done", Boolean, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("updated_at", utc_datetime(), nullable=False),
)

quarantined_records = Table(
    "quarantined_records",
    metadata,
    Column("id", big_id(), primary_key=True, autoincrement=True),
    Column("merchant_id", String(ID_LENGTH), nullable=False),
    Column("source", String(ID_LENGTH), nullable=False),
    Column("position", Text, nullable=False),
    # Text, not String: whatever a bad item carried as its id must fit.
    Column("record_id", Text, nullable=True),
    Column("reason", Text, nullable=False),
    Column("raw_json", large_text(), nullable=False),
    Column("quarantined_at", utc_datetime(), nullable=False),
    # Revision 0011: the item's key (its record and revision, else its content), unique per
    # merchant, so that a page read again quarantines nothing twice (``quarantine``).
    Column("item_key", String(ITEM_KEY_LENGTH), nullable=False),
    Index("ix_quarantined_records_merchant", "merchant_id", "id"),
    UniqueConstraint("merchant_id", "item_key", name="uq_quarantined_records_item"),
)

# Revision 0004, the fleet (several replicas sharing the merchants; see ``fleet``).
# ``merchant_leases``: one row per merchant ever held; ``epoch`` rises with every new holder,
# and every fenced page commit checks it in its own transaction (``lease.epochs``).  The lock
# itself is the database's (``lease.backends``); the row only says which holder's writes
# still count.
merchant_leases = Table(
    "merchant_leases",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("epoch", BigInteger, nullable=False),
    Column("holder", String(ID_LENGTH), nullable=False),
    Column("acquired_at", utc_datetime(), nullable=False),
    Column("released_at", utc_datetime(), nullable=True),
)

# One row per live replica (a process sharing the merchants), its heartbeat stamped by the
# database's clock; rows of dead replicas age out (``replicas``).
replicas = Table(
    "replicas",
    metadata,
    Column("replica_id", String(ID_LENGTH), primary_key=True),
    Column("hostname", String(ID_LENGTH), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", utc_datetime(), nullable=False),
    Column("heartbeat_at", utc_datetime(), nullable=False),
    Column("merchants_held", Integer, nullable=False),
    # Revision 0010: the merchants the replica is configured with, a JSON array; NULL for an
    # older replica (``fleet.share`` takes it to know the asking replica's merchants).
    Column("merchants", large_text(), nullable=True),
    # Revision 0014: the version the replica runs and the kinds of handed-over work it takes
    # (comma-separated ``values.RequestKind``); NULL for a replica of an earlier version.
    Column("version", String(REVISION_LENGTH), nullable=True),
    Column("request_kinds", String(ID_LENGTH), nullable=True),
)


def _request_life() -> list[Column[Any]]:
    """The columns of a request's life, shared by the request tables (``requests.book``)."""
    return [
        Column("state", String(PHASE_LENGTH), nullable=False),
        Column("requested_at", utc_datetime(), nullable=False),
        Column("started_at", utc_datetime(), nullable=True),
        Column("finished_at", utc_datetime(), nullable=True),
        Column("holder", String(ID_LENGTH), nullable=True),
        Column("error", Text, nullable=True),
    ]


# Work a command hands to the merchant's holder, which runs it inside the merchant's rate
# budget (revision 0012; ``requests.book``): ``kind`` a ``values.RequestKind``, ``state`` a
# ``values.RequestState``; ``key`` names work asked for twice that should be followed, not
# queued again (a backfill's job); ``result`` is what the holder hands back (verify's
# findings, JSON).
sync_requests = Table(
    "sync_requests",
    metadata,
    Column("id", big_id(), primary_key=True, autoincrement=True),
    Column("merchant_id", String(ID_LENGTH), nullable=False),
    Column("kind", String(PHASE_LENGTH), nullable=False),
    Column("created_from", utc_datetime(), nullable=False),
    Column("created_to", utc_datetime(), nullable=False),
    Column("key", String(ID_LENGTH), nullable=True),
    Column("repair", Boolean, nullable=False),
    *_request_life(),
    Column("result", large_text(), nullable=True),
    # The last look of the command following it (revision 0014; ``requests.book.follow``):
    # a holder starts no request whose command is gone.  NULL: asked by an earlier version.
    Column("followed_at", utc_datetime(), nullable=True),
    Index("ix_sync_requests_merchant_state", "merchant_id", "state", "id"),
)

# What operators set on a merchant that every replica obeys (revision 0013; ``controls``): a
# merchant with ``paused_at`` set is held and synced by nobody.  ``changed_*``: the last
# pause or resume, and who did it.
merchant_controls = Table(
    "merchant_controls",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("paused_at", utc_datetime(), nullable=True),
    Column("paused_by", String(ID_LENGTH), nullable=True),
    Column("reason", Text, nullable=True),
    Column("changed_at", utc_datetime(), nullable=False),
    Column("changed_by", String(ID_LENGTH), nullable=False),
)

# The two request tables before revision 0012, kept for the previous version's pods during a
# rolling upgrade (revisions only add).  This version only fails what a previous version's
# command asks there, so that the command ends with a line instead of following a request no
# holder runs (``requests.previous``).
backfill_requests = Table(
    "backfill_requests",
    metadata,
    Column("id", big_id(), primary_key=True, autoincrement=True),
    Column("merchant_id", String(ID_LENGTH), nullable=False),
    Column("created_from", utc_datetime(), nullable=False),
    Column("created_to", utc_datetime(), nullable=False),
    Column("job", String(ID_LENGTH), nullable=False),
    *_request_life(),
    Index("ix_backfill_requests_merchant_state", "merchant_id", "state", "id"),
)

# Revision 0005: every round-end notification accepted from the platform (spec: Events, "Round
# end"), ``event_id`` unique per merchant (revision 0011; unique across merchants before, so
# another merchant's colliding id got the first merchant's receipt).  ``received_by`` is the
# replica that answered it (the others wake the merchant's holder from it where there is no
# NOTIFY); ``found_at`` is set once the cross-check saw the round in ``records``
# (``round_events``).
round_events = Table(
    "round_events",
    metadata,
    Column("id", big_id(), primary_key=True, autoincrement=True),
    Column("event_id", String(EVENT_ID_LENGTH), nullable=False),
    Column("merchant_id", String(ID_LENGTH), nullable=False),
    Column("round_id", String(ID_LENGTH), nullable=False),
    Column("parent_round_id", String(ID_LENGTH), nullable=True),
    Column("external_player_id", String(ID_LENGTH), nullable=False),
    Column("currency", String(CODE_LENGTH), nullable=False),
    Column("type", String(CODE_LENGTH), nullable=False),
    Column("occurred_at", utc_datetime(), nullable=False),
    Column("received_at", utc_datetime(), nullable=False),
    Column("received_by", String(ID_LENGTH), nullable=False),
    Column("found_at", utc_datetime(), nullable=True),
    UniqueConstraint("merchant_id", "event_id", name="uq_round_events_merchant_event"),
    Index("ix_round_events_merchant_found", "merchant_id", "found_at", "received_at"),
)

# Revision 0007's verify requests; kept as ``backfill_requests`` is (see there).
verify_requests = Table(
    "verify_requests",
    metadata,
    Column("id", big_id(), primary_key=True, autoincrement=True),
    Column("merchant_id", String(ID_LENGTH), nullable=False),
    Column("created_from", utc_datetime(), nullable=False),
    Column("created_to", utc_datetime(), nullable=False),
    Column("repair", Boolean, nullable=False),
    *_request_life(),
    Column("result", large_text(), nullable=True),
    Index("ix_verify_requests_merchant_state", "merchant_id", "state", "id"),
)

# Revision 0006, the game catalogue as a dimension (spec: Game; docs/bi.md).  One row per game
# the merchant's catalogue ever listed; a game that leaves the catalogue keeps its row with
# ``listed`` false and its ``last_seen_at`` frozen ("not seen since").  ``changed_at`` moves
# when a pass finds the entry different; ``languages`` is the language tags joined by commas.
# Icons are not kept (recordsync never downloads them).
games = Table(
    "games",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("game_id", String(ID_LENGTH), primary_key=True),
    Column("name", Text, nullable=False),
    Column("brand", Text, nullable=True),
    Column("category", String(ID_LENGTH), nullable=True),
    Column("category_name", Text, nullable=True),
    Column("status", String(CODE_LENGTH), nullable=False),
    Column("launch_supported", Boolean, nullable=False),
    Column("provider_code", String(ID_LENGTH), nullable=True),
    Column("provider_name", Text, nullable=True),
    Column("client_version", String(ID_LENGTH), nullable=True),
    Column("languages", Text, nullable=False),
    Column("listed", Boolean, nullable=False),
    Column("first_seen_at", utc_datetime(), nullable=False),
    Column("last_seen_at", utc_datetime(), nullable=False),
    Column("changed_at", utc_datetime(), nullable=False),
)

# A game's name per language (spec: Game, localizations[]): a table rather than a JSON column,
# so that BI joins it the same way on every backend (docs/bi.md says why).
game_localizations = Table(
    "game_localizations",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("game_id", String(ID_LENGTH), primary_key=True),
    Column("language", String(CODE_LENGTH), primary_key=True),
    Column("name", Text, nullable=False),
)

# Revision 0009: whether the platform serves each optional endpoint (``games``) to a merchant,
# as its holder last saw it, for ``recordsync status``; ``status`` and ``code`` are
# the last refusal's (NULL: no answer came), ``since`` when it became as it is.
endpoint_availability = Table(
    "endpoint_availability",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("endpoint", String(CODE_LENGTH), primary_key=True),
    Column("available", Boolean, nullable=False),
    Column("status", Integer, nullable=True),
    Column("code", String(CODE_LENGTH), nullable=True),
    Column("since", utc_datetime(), nullable=False),
    Column("checked_at", utc_datetime(), nullable=False),
    Column("next_check_at", utc_datetime(), nullable=True),
)

# Revision 0014: the warehouse's identity, one row drawn at its migration to 0014; a state
# export names it, so that an import knows whether its cursors cover this warehouse's rows
# (``sync.state_import``).
warehouse_identity = Table(
    "warehouse_identity",
    metadata,
    Column("warehouse_id", String(REVISION_LENGTH), primary_key=True),
    Column("created_at", utc_datetime(), nullable=False),
)

# Revision 0014: when each merchant's drift check last ran (``last_run_at``) and since when it
# has been deferred behind the sync's own reads (``deferred_since``, NULL once it runs), by the
# database's clock; written by its holder (``drift_checks``), read by ``status``.
drift_checks = Table(
    "drift_checks",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("last_run_at", utc_datetime(), nullable=True),
    Column("deferred_since", utc_datetime(), nullable=True),
)

# Revision 0014: every revision applied and whether it only adds to the one before it
# (``migrate.SchemaState``: an older version keeps running on additive revisions above its
# own); written by migrations/env.py after each upgrade.
schema_revisions = Table(
    "schema_revisions",
    metadata,
    Column("revision", String(REVISION_LENGTH), primary_key=True),
    Column("down_revision", String(REVISION_LENGTH), nullable=True),
    Column("additive", Boolean, nullable=False),
)

# Revision 0008, MariaDB / MySQL only: InnoDB stores a table's rows in its primary key's
# B-tree, and every secondary index entry carries that key.  With (merchant_id, record_id[,
# revision]) as the key, random ids put each insert on a random leaf of a tree far larger than
# the default buffer pool, and each index entry carries ~50 bytes of key (measured with
# ``bench/ingest.py``).  So there ``records`` and ``record_revisions`` are
# clustered by ``row_id``, an AUTO_INCREMENT surrogate: rows are appended in arrival order, and
# the old key stays, unique, under the names below.  The upserts (``pages.mariadb``) never name
# ``row_id``; their ``ON DUPLICATE KEY UPDATE`` meets an existing row through the unique key.
# SQLite and PostgreSQL keep ``metadata`` as it is: their tables are heaps (rowid order).
ROW_ID: Final = "row_id"
CLUSTERED_BY_ROW_ID: Final = {
    "records": "uq_records_merchant_record",
    "record_revisions": "uq_record_revisions_merchant_record_revision",
}
_MYSQL_FAMILY: Final = frozenset({"mysql", "mariadb"})


# Revision 0015, the rollups behind the daily summary views (``bi.rollups``): what each
# group sums differs by backend (``summed_columns``), so these tables are built per dialect.
# ``summary_deltas``: append-only signed changes written by triggers on ``records``;
# ``daily_game_totals`` / ``daily_player_totals``: the deltas folded; ``summary_builds``: per
# merchant, the days of rows older than the revision that the totals do not hold yet.
SUMMARY_COUNTS: Final = ("rounds", "rounds_open", "rounds_settled", "rounds_void")
SUMMARY_AMOUNTS: Final = ("bet", "payout", "refund", "net")
# SQLite: per amount, rows with integer units and the sums of the two parts of the units.
SQLITE_PARTS: Final = ("n", "hi", "lo")


def summed_columns(dialect_name: str) -> tuple[str, ...]:
    """The columns a delta and a total sum, in order, on ``dialect_name``."""
    if dialect_name == "sqlite":
        parts = tuple(f"{a}_{p}" for a in SUMMARY_AMOUNTS for p in SQLITE_PARTS)
    else:
        parts = tuple(f"{a}_amount" for a in SUMMARY_AMOUNTS)
    return (*SUMMARY_COUNTS, *parts)


def _summary_tables(target: MetaData, dialect_name: str) -> None:
    if dialect_name == "postgresql":
        money: Any = postgresql.NUMERIC()
    elif dialect_name in _MYSQL_FAMILY:
        money = mysql.DECIMAL(65, 4)
    else:
        money = BigInteger
    day = String(10).with_variant(Date(), "postgresql").with_variant(Date(), *_MYSQL_FAMILY)

    def sums() -> list[Column[Any]]:
        return [
            Column(name, BigInteger if name in SUMMARY_COUNTS else money, nullable=False)
            for name in summed_columns(dialect_name)
        ]

    Table(
        "summary_deltas",
        target,
        Column("id", big_id(), primary_key=True, autoincrement=True),
        Column("merchant_id", String(ID_LENGTH), nullable=False),
        Column("day", day, nullable=False),
        Column("game_id", String(ID_LENGTH), nullable=False),
        Column("player_id", String(ID_LENGTH), nullable=False),
        Column("currency", String(CODE_LENGTH), nullable=False),
        *sums(),
        Index("ix_summary_deltas_merchant_day", "merchant_id", "day"),
    )
    Table(
        "daily_game_totals",
        target,
        Column("merchant_id", String(ID_LENGTH), primary_key=True),
        Column("day", day, primary_key=True),
        Column("game_id", String(ID_LENGTH), primary_key=True),
        Column("currency", String(CODE_LENGTH), primary_key=True),
        *sums(),
    )
    Table(
        "daily_player_totals",
        target,
        Column("merchant_id", String(ID_LENGTH), primary_key=True),
        Column("player_id", String(ID_LENGTH), primary_key=True),
        Column("day", day, primary_key=True),
        Column("currency", String(CODE_LENGTH), primary_key=True),
        *sums(),
        Index("ix_daily_player_totals_merchant_day", "merchant_id", "day"),
    )
    Table(
        "summary_builds",
        target,
        Column("merchant_id", String(ID_LENGTH), primary_key=True),
        Column("first_day", day, nullable=False),
        Column("next_day", day, nullable=False),
        Column("last_day", day, nullable=False),
    )


def metadata_for(dialect_name: str) -> MetaData:
    """The tables as the migrations create them on ``dialect_name``: ``metadata`` with the
    summary tables of that backend, and on MariaDB / MySQL with ``row_id`` as the primary key
    of the tables named in ``CLUSTERED_BY_ROW_ID`` and their old key unique.  Reads and
    writes keep using ``records`` and ``record_revisions``, whose columns are the same
    everywhere."""
    physical = MetaData(naming_convention=metadata.naming_convention)
    _summary_tables(physical, dialect_name)
    for table in metadata.sorted_tables:
        unique_key = CLUSTERED_BY_ROW_ID.get(table.name)
        if unique_key is None or dialect_name not in _MYSQL_FAMILY:
            table.to_metadata(physical)
            continue
        key = [column.name for column in table.primary_key.columns]
        Table(
            table.name,
            physical,
            *(Column(c.name, c.type, nullable=c.nullable) for c in table.columns),
            Column(ROW_ID, mysql.BIGINT(unsigned=True), primary_key=True, autoincrement=True),
            UniqueConstraint(*key, name=unique_key),
            *(Index(i.name, *(c.name for c in i.columns)) for i in table.indexes),
        )
    return physical


# Alembic's bookkeeping table, named for us so it cannot clash with a warehouse that already
# runs its own Alembic history in the same database.
VERSION_TABLE: Final = "recordsync_alembic_version"

# Revision 0016: every unknown member name a merchant's records carried, when it was first and
# last seen (the database's clock) and the first record that had it (``fields.sightings``).
record_field_sightings = Table(
    "record_field_sightings",
    metadata,
    Column("merchant_id", String(ID_LENGTH), primary_key=True),
    Column("field", String(ID_LENGTH), primary_key=True),
    Column("first_seen_at", utc_datetime(), nullable=False),
    Column("last_seen_at", utc_datetime(), nullable=False),
    Column("first_record_id", String(ID_LENGTH), nullable=False),
)

# Revision 0016: the unknown fields promoted to typed columns of ``records`` and
# ``record_revisions`` (``fields.promotion``), and how far their filling from ``extra_fields``
# got: the key of the last row done in ``fill_table``, so a stopped promotion resumes there.
promoted_fields = Table(
    "promoted_fields",
    metadata,
    Column("field", String(ID_LENGTH), primary_key=True),
    Column("column_name", String(CODE_LENGTH), nullable=False),
    Column("type", String(CODE_LENGTH), nullable=False),
    Column("state", String(CODE_LENGTH), nullable=False),
    Column("requested_at", utc_datetime(), nullable=False),
    Column("finished_at", utc_datetime(), nullable=True),
    Column("fill_table", String(CODE_LENGTH), nullable=True),
    Column("fill_merchant_id", String(ID_LENGTH), nullable=True),
    Column("fill_record_id", String(ID_LENGTH), nullable=True),
    Column("fill_revision", BigInteger, nullable=True),
    Column("rows_filled", BigInteger, nullable=False),
    Column("rows_unfit", BigInteger, nullable=False),
)
