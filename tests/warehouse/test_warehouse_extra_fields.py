"""Unknown record members are kept with their rows, exactly, under the highest-revision rule."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
import orjson
from sqlalchemy import select
from support.pages import commit_window_page
from support.warehouse_reads import fetch_revisions
from support.warehouse_samples import (
    MERCHANT,
    WINDOW,
    make_change,
    make_record,
    snapshot_page,
    tail_page,
)

from recordsync.core.extra_fields import members
from recordsync.platform.parsing import parse_changes_page, parse_records_page, usual_records_page
from recordsync.warehouse import Warehouse
from recordsync.warehouse.schema import records

# One member of every JSON type, as the platform would write them.
SENT = (
    b'"channel":"mobile \\"app\\"\\t\\u00e9","tax":123456789012345678901234567890.123456789,'
    b'"spins":42,"bonus":true,"promo":null,"jackpot":{"pool":"0.10","tiers":[1,2.50,{"x":[]}]},'
    b'"tags":["a",1,false]'
)
EXPECTED = {
    "channel": 'mobile "app"\t\u00e9',
    "tax": Decimal("123456789012345678901234567890.123456789"),
    "spins": 42,
    "bonus": True,
    "promo": None,
    "jackpot": {"pool": "0.10", "tiers": [1, Decimal("2.50"), {"x": []}]},
    "tags": ["a", 1, False],
}


def _wire(record_id: str, revision: int, extra: bytes) -> bytes:
    """A record as the platform sends it, ``extra`` members inserted among the known ones."""
    known = msgspec.json.encode(make_record(record_id, revision))
    fields = {k: v for k, v in orjson.loads(known).items() if k != "extra_fields"}
    fields.update(created_at="2024-03-01T00:01:00.000Z", updated_at="2024-03-01T00:01:01.000Z")
    known = orjson.dumps(fields)
    return known[:-1] + (b"," + extra if extra else b"") + b"}"


def _records_body(*items: bytes) -> bytes:
    return (
        b'{"data":{"items":[' + b",".join(items) + b'],"has_more":false,"next_cursor":null,'
        b'"snapshot_watermark":"w"},"request_id":"req-1"}'
    )


def _stored(store: Warehouse) -> dict[str, Any]:
    with store.engine.begin() as conn:
        rows = conn.execute(select(records.c.record_id, records.c.extra_fields)).all()
    return {record_id: members(extra) if extra else None for record_id, extra in rows}


def test_unknown_members_of_every_type_are_stored_exactly_in_both_tables(
    rebuilding: Warehouse,
) -> None:
    body = _records_body(_wire("a", 1, SENT), _wire("b", 1, b""))
    page = usual_records_page(body)
    assert page is not None
    # The usual path and the orjson one (taken for any page the usual cannot read) agree.
    assert parse_records_page(orjson.loads(body)["data"], body=body).records == page.records
    snapshot_page(rebuilding, *page.records)
    assert _stored(rebuilding) == {"a": EXPECTED, "b": None}
    history = {
        row["record_id"]: row["extra_fields"] for row in fetch_revisions(rebuilding, MERCHANT)
    }
    assert members(history["a"]) == EXPECTED
    assert history["b"] is None


def test_a_change_page_keeps_the_record_members_and_ignores_the_change_item_members(
    rebuilding: Warehouse,
) -> None:
    record = _wire("a", 2, SENT)
    item = (
        b'{"sequence":"7","record_id":"a","revision":2,"changed_at":"2024-03-01T00:00:00.000Z",'
        b'"shard":"x","record":' + record + b"}"
    )
    body = b'{"data":{"items":[' + item + b'],"has_more":false,"next_cursor":"c"},"request_id":"r"}'
    page = parse_changes_page(orjson.loads(body)["data"], body=body)
    assert not page.rejected
    tail_page(rebuilding, *page.changes)
    assert _stored(rebuilding) == {"a": EXPECTED}


def test_a_stale_revision_never_replaces_the_members_and_a_later_one_replaces_them_all(
    rebuilding: Warehouse,
) -> None:
    newer = msgspec.structs.replace(make_record("a", 3), extra_fields='{"tax":1.5}')
    tail_page(rebuilding, make_change(newer, 10))
    stale = msgspec.structs.replace(make_record("a", 2), extra_fields='{"tax":9,"other":1}')
    snapshot_page(rebuilding, stale)
    assert _stored(rebuilding) == {"a": {"tax": Decimal("1.5")}}
    tail_page(rebuilding, make_change(make_record("a", 4), 11))
    assert _stored(rebuilding) == {"a": None}
    kept = {row["revision"]: row["extra_fields"] for row in fetch_revisions(rebuilding, MERCHANT)}
    assert members(kept[3]) == {"tax": Decimal("1.5")}
    assert kept[4] is None


def test_a_known_field_whose_type_changed_is_quarantined_naming_it_with_the_raw_value_kept(
    rebuilding: Warehouse,
) -> None:
    money_as_number = _wire("m", 1, b"").replace(b'"bet_amount":"10.00"', b'"bet_amount":10.000')
    revision_as_text = _wire("r", 1, b"").replace(b'"revision":1', b'"revision":"1"')
    body = _records_body(money_as_number, revision_as_text, _wire("ok", 1, b""))
    page = parse_records_page(orjson.loads(body)["data"], body=body)
    assert [record.record_id for record in page.records] == ["ok"]
    commit_window_page(
        rebuilding,
        MERCHANT,
        "rebuild",
        WINDOW,
        records=page.records,
        rejected=page.rejected,
        next_cursor="w-1",
        cursor_issued_at=None,
        done=False,
        position="start",
    )
    kept = {row.record_id: row for row in rebuilding.records.quarantined(MERCHANT, limit=10)}
    assert kept["m"].reason.startswith("bet_amount:")
    assert '"bet_amount":10.000' in kept["m"].raw_json
    assert kept["r"].reason.startswith("revision:")
    assert '"revision":"1"' in kept["r"].raw_json
