"""Rows written once however often they arrive, on every backend: a quarantined item
once per merchant and item when its page is read again, and revision 0011 bringing an
existing warehouse, duplicates and all, to that key and to round events keyed per merchant
(their own tests: test_warehouse_round_events)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import orjson
from alembic import command
from sqlalchemy import insert, inspect, select
from support.warehouse_samples import MERCHANT, T0

from recordsync.core.models import RejectedItem
from recordsync.core.round_events import RoundEvent
from recordsync.core.state import TailPage
from recordsync.warehouse import Warehouse
from recordsync.warehouse.migrate import _config
from recordsync.warehouse.pages.quarantine import item_key
from recordsync.warehouse.schema import quarantined_records

OTHER = "merchant-2"
EVENT = RoundEvent(
    event_id="ev-1",
    merchant_id=MERCHANT,
    round_id="round-a",
    parent_round_id=None,
    external_player_id="player-ext-1",
    currency="USD",
    type="ROUND_ENDED",
    occurred_at=T0,
)


def item_json(record_id: str, revision: object, **changes: object) -> bytes:
    return orjson.dumps({"record_id": record_id, "revision": revision, **changes})


# A record refused at revision 3, the same revision refused again with other content, the
# next revision, and an item that is not even an object.
REVISION_3 = RejectedItem(1, item_json("rec-x", 3, bet_amount=1.5), "bet_amount: a float", "rec-x")
REVISION_3_AGAIN = RejectedItem(
    7, item_json("rec-x", 3, bet_amount=2.5), "bet_amount: a float", "rec-x"
)
REVISION_4 = RejectedItem(2, item_json("rec-x", 4, bet_amount=1.5), "bet_amount: a float", "rec-x")
NOT_AN_OBJECT = RejectedItem(3, b'"not an object"', "not an object", None)


def start(store: Warehouse, merchant: str = MERCHANT) -> None:
    store.state.start_rebuild(
        merchant,
        change_cursor="c0",
        anchor_at=T0,
        history_from=T0 - timedelta(days=1),
        snapshot_to=T0,
        windows=[],
    )


def tail_page(store: Warehouse, rejected, *, position: str, merchant: str = MERCHANT):
    return store.pages.commit_tail_page(
        merchant,
        TailPage(
            records=[],
            rejected=rejected,
            next_cursor=f"after-{position}",
            last_sequence="1",
            projection_as_of=T0,
            position=position,
        ),
    )


def quarantine_rows(store: Warehouse) -> list[dict]:
    query = select(quarantined_records).order_by(quarantined_records.c.id)
    with store.engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]


def test_a_page_read_again_quarantines_nothing_twice(warehouse):
    start(warehouse)
    tail_page(warehouse, [REVISION_3, NOT_AN_OBJECT], position="p1")
    tail_page(warehouse, [REVISION_3, NOT_AN_OBJECT], position="p1")  # read again
    tail_page(warehouse, [REVISION_3_AGAIN, REVISION_4], position="p2")
    rows = quarantine_rows(warehouse)
    assert [(row["position"], row["record_id"]) for row in rows] == [
        ("p1#1", "rec-x"),  # the first sighting of revision 3 stays
        ("p1#3", None),
        ("p2#2", "rec-x"),  # revision 4 is another item
    ]
    assert warehouse.records.status(MERCHANT).quarantined == 3


def test_the_same_item_of_another_merchant_is_quarantined_for_it(warehouse):
    start(warehouse)
    start(warehouse, OTHER)
    tail_page(warehouse, [REVISION_3, NOT_AN_OBJECT], position="p1")
    tail_page(warehouse, [REVISION_3, NOT_AN_OBJECT], position="p1", merchant=OTHER)
    assert len(warehouse.records.quarantined(MERCHANT)) == 2
    assert len(warehouse.records.quarantined(OTHER)) == 2


# -- revision 0011 on a warehouse that holds duplicates ----------------------------------------


def legacy_row(merchant: str, item: RejectedItem, position: str) -> dict:
    """A quarantine row as revision 0010's code wrote it: no key."""
    return {
        "merchant_id": merchant,
        "source": "tail",
        "position": position,
        "record_id": item.record_id,
        "reason": item.reason,
        "raw_json": item.raw.decode(),
        "quarantined_at": T0,
    }


def test_revision_0011_keeps_the_earliest_of_each_duplicate_and_keys_per_merchant(warehouse_url):
    store = Warehouse.connect(warehouse_url)
    try:
        config = _config()
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "0010")
        legacy = [
            legacy_row(MERCHANT, REVISION_3, "p1#1"),  # kept
            legacy_row(MERCHANT, NOT_AN_OBJECT, "p1#3"),  # kept
            legacy_row(MERCHANT, REVISION_3_AGAIN, "p2#7"),  # a duplicate of the first
            legacy_row(MERCHANT, NOT_AN_OBJECT, "p1#3"),  # a duplicate of the second
            legacy_row(MERCHANT, REVISION_4, "p2#2"),  # kept: another revision
            legacy_row(OTHER, REVISION_3, "p1#1"),  # kept: another merchant
        ]
        with store.engine.begin() as conn:
            for row in legacy:  # one by one: ids in this order
                conn.execute(insert(quarantined_records).values(**row))
        assert not store.events.record_round_event(EVENT, received_by="r1").duplicate
        store.migrate()

        rows = quarantine_rows(store)
        assert [(row["merchant_id"], row["position"]) for row in rows] == [
            (MERCHANT, "p1#1"),
            (MERCHANT, "p1#3"),
            (MERCHANT, "p2#2"),
            (OTHER, "p1#1"),
        ]
        assert [row["item_key"] for row in rows] == [
            item_key(row["record_id"], row["raw_json"]) for row in rows
        ]
        # The code's keys are the migration's: the same items read again add nothing.
        start(store)
        tail_page(store, [REVISION_3_AGAIN, NOT_AN_OBJECT, REVISION_4], position="p3")
        assert len(quarantine_rows(store)) == 4

        unique = {
            tuple(key["column_names"])
            for key in inspect(store.engine).get_unique_constraints("round_events")
        }
        assert unique == {("merchant_id", "event_id")}
        theirs = replace(EVENT, merchant_id=OTHER)
        assert not store.events.record_round_event(theirs, received_by="r2").duplicate
        assert store.events.record_round_event(EVENT, received_by="r2").duplicate
    finally:
        store.close()
