"""Records snapshots over loopback: order, one consistent snapshot per chain, cursors."""

from __future__ import annotations

import base64
from datetime import timedelta
from decimal import Decimal

import pytest
from support.sim_platform import Platform, error_of, sim_now, small_config

from recordsync.core.times import format_time, parse_time
from recordsync.platform.parsing import parse_records_page
from recordsync.sim import SEQUENCE_BASE, ManualClock, SimConfig


def as_of(changes: list[dict], watermark: int) -> dict[str, dict]:
    """Each record at its newest revision with a sequence <= watermark, from the change log."""
    view: dict[str, dict] = {}
    for change in changes:
        if int(change["sequence"]) <= watermark:
            current = view.get(change["record_id"])
            if current is None or change["revision"] > current["revision"]:
                view[change["record_id"]] = change["record"]
    return view


def test_items_are_ordered_by_created_at_then_record_id(platform, sim):
    end = sim_now(sim)
    items = [
        item
        for page in platform.records_chain(end - timedelta(hours=24), end, limit=97)
        for item in page["items"]
    ]

    assert len(items) > 97
    keys = [(item["created_at"], item["record_id"]) for item in items]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)


def test_record_times_and_amounts_use_the_api_formats(platform, sim):
    end = sim_now(sim)
    page = next(platform.records_chain(end - timedelta(hours=24), end, limit=1000))
    scales = {"JPY": 0, "USD": 2, "EUR": 2, "USDT": 4}

    parsed = parse_records_page(page)
    assert parsed.rejected == []
    for item in page["items"]:
        for name in ("created_at", "updated_at", "settled_at"):
            if item[name] is not None:
                assert len(item[name]) == 24
                assert item[name].endswith("Z")
        scale = scales[item["currency"]]
        for name in ("bet_amount", "refund_amount", "payout_amount", "net_amount"):
            digits = item[name].partition(".")[2]
            assert len(digits) == scale, (name, item[name], item["currency"])
        assert Decimal(item["net_amount"]) == (
            Decimal(item["payout_amount"])
            + Decimal(item["refund_amount"])
            - Decimal(item["bet_amount"])
        )


def test_a_window_is_half_open(platform, sim):
    end = sim_now(sim)
    first = next(platform.records_chain(end - timedelta(hours=24), end, limit=1))["items"][0]
    created = first["created_at"]
    at = parse_time(created, field="created_at")
    starting = next(platform.records_chain(at, at + timedelta(milliseconds=1)))["items"]
    ending = next(platform.records_chain(at - timedelta(hours=1), at))["items"]
    assert first["record_id"] in {item["record_id"] for item in starting}
    assert first["record_id"] not in {item["record_id"] for item in ending}


def test_a_cursor_chain_is_one_snapshot_while_live_traffic_changes_records(platform, sim):
    end = sim_now(sim) + timedelta(hours=1)  # live rounds created now fall in the window too
    start = end - timedelta(hours=24)
    since = [("since", format_time(start - timedelta(days=1)))]

    pages = list(platform.records_chain(start, end, limit=50, between_pages=lambda: sim.step(40)))

    watermarks = {page["snapshot_watermark"] for page in pages}
    assert len(pages) > 3
    assert len(watermarks) == 1
    watermark = int(watermarks.pop())
    assert sim.watermark() != str(watermark)  # live traffic went on during the chain
    items = [item for page in pages for item in page["items"]]
    ids = [item["record_id"] for item in items]
    assert len(ids) == len(set(ids)), "a record was repeated"

    changes, _ = platform.changes_until_caught_up(since)
    expected = {
        record_id: record
        for record_id, record in as_of(changes, watermark).items()
        if format_time(start) <= record["created_at"] < format_time(end)
    }
    assert {item["record_id"]: item for item in items} == expected
    # ... and that snapshot is not simply the present: records changed and were created since.
    truth = sim.truth()
    assert any(item != truth[item["record_id"]] for item in items)
    assert any(
        rid not in expected and format_time(start) <= record["created_at"] < format_time(end)
        for rid, record in truth.items()
    )


def test_a_chain_stays_consistent_under_a_background_live_generator(start_sim):
    sim, platform = start_sim(small_config(live_rate=400.0))
    sim.start_live()
    end = sim_now(sim) + timedelta(hours=1)
    start = end - timedelta(hours=24)

    pages = list(platform.records_chain(start, end, limit=20))
    sim.stop_live()

    assert len({page["snapshot_watermark"] for page in pages}) == 1
    watermark = int(pages[0]["snapshot_watermark"])
    items = [item for page in pages for item in page["items"]]
    assert len({item["record_id"] for item in items}) == len(items)
    changes, _ = platform.changes_until_caught_up(
        [("since", format_time(start - timedelta(days=1)))]
    )
    expected = as_of(changes, watermark)
    for item in items:
        assert item == expected[item["record_id"]]
    in_window = {
        rid
        for rid, rec in expected.items()
        if format_time(start) <= rec["created_at"] < format_time(end)
    }
    assert {item["record_id"] for item in items} == in_window


def test_filters_narrow_the_snapshot(platform, sim):
    end = sim_now(sim)
    start = end - timedelta(hours=24)
    everything = [i for p in platform.records_chain(start, end) for i in p["items"]]
    player = everything[0]["player_id"]
    game = everything[0]["game_id"]

    by_player = [
        i for p in platform.records_chain(start, end, limit=3, player_id=player) for i in p["items"]
    ]
    by_game = [
        i
        for p in platform.records_chain(start, end, limit=7, game_id=game.upper())
        for i in p["items"]
    ]

    assert by_player == [i for i in everything if i["player_id"] == player]
    assert by_game == [i for i in everything if i["game_id"] == game]
    unknown = next(
        platform.records_chain(start, end, player_id="00000000-0000-4000-8000-000000000000")
    )
    assert unknown["items"] == []
    assert unknown["has_more"] is False


def test_a_merchant_that_never_had_a_record_has_watermark_zero(start_sim):
    sim, platform = start_sim(small_config(rounds_per_day=0))
    end = sim_now(sim)

    page = next(platform.records_chain(end - timedelta(hours=24), end))

    assert page["items"] == []
    assert page["snapshot_watermark"] == "0"
    assert page["has_more"] is False
    assert page["next_cursor"] is None
    assert page["projection_as_of"].endswith("Z")


def test_watermarks_are_sequences_above_64_bits(platform, sim):
    end = sim_now(sim)
    page = next(platform.records_chain(end - timedelta(hours=1), end))
    assert int(page["snapshot_watermark"]) >= SEQUENCE_BASE > 2**64
    assert page["snapshot_watermark"] == sim.watermark()


def first_cursor(platform: Platform, sim) -> str:
    end = sim_now(sim)
    page = next(platform.records_chain(end - timedelta(hours=24), end, limit=10))
    assert page["has_more"]
    return page["next_cursor"]


def test_records_cursors_expire_24_hours_after_the_chains_first_page(start_sim):
    clock = ManualClock()
    sim, platform = start_sim(small_config(), clock=clock)
    cursor = first_cursor(platform, sim)
    clock.advance(12 * 3600)
    page = platform.data("/v1/records", [("cursor", cursor), ("limit", "10")])
    later_cursor = page["next_cursor"]

    clock.advance(12 * 3600 + 1)  # 24 h and 1 s after the first page, 12 h after the second

    for stale in (cursor, later_cursor):
        response = platform.get("/v1/records", [("cursor", stale)])
        assert response.status_code == 410
        assert error_of(response)["code"] == "CURSOR_EXPIRED"


def test_a_configured_ttl_is_honoured(start_sim):
    clock = ManualClock()
    sim, platform = start_sim(small_config(cursor_ttl_seconds=60), clock=clock)
    cursor = first_cursor(platform, sim)
    clock.advance(59)
    assert platform.get("/v1/records", [("cursor", cursor)]).status_code == 200
    clock.advance(2)
    assert platform.get("/v1/records", [("cursor", cursor)]).status_code == 410


def test_expire_cursors_makes_every_issued_cursor_answer_410(platform, sim):
    records_cursor = first_cursor(platform, sim)
    changes_cursor = platform.data("/v1/record-changes", [("from_now", "true")])["next_cursor"]

    sim.expire_cursors()

    for path, cursor in (("/v1/records", records_cursor), ("/v1/record-changes", changes_cursor)):
        response = platform.get(path, [("cursor", cursor)])
        assert response.status_code == 410
        assert error_of(response)["code"] == "CURSOR_EXPIRED"
    fresh = first_cursor(platform, sim)
    assert platform.get("/v1/records", [("cursor", fresh)]).status_code == 200


def test_expire_next_records_cursor_refuses_only_the_next_records_cursor_presented(platform, sim):
    records_cursor = first_cursor(platform, sim)
    changes_cursor = platform.data("/v1/record-changes", [("from_now", "true")])["next_cursor"]

    sim.expire_next_records_cursor()

    # A change cursor and a chain's first page are not records cursors: served.
    assert platform.get("/v1/record-changes", [("cursor", changes_cursor)]).status_code == 200
    fresh = first_cursor(platform, sim)
    expired = platform.get("/v1/records", [("cursor", records_cursor)])
    assert expired.status_code == 410
    assert error_of(expired)["code"] == "CURSOR_EXPIRED"
    # Once: the next records cursor presented, an older one as well, is served again.
    assert platform.get("/v1/records", [("cursor", fresh)]).status_code == 200
    assert platform.get("/v1/records", [("cursor", records_cursor)]).status_code == 200


def flip(text: str, index: int) -> str:
    return text[:index] + ("A" if text[index] != "A" else "B") + text[index + 1 :]


def test_tampered_or_foreign_cursors_are_invalid(platform, sim, start_sim):
    cursor = first_cursor(platform, sim)
    body, _, tag = cursor.partition(".")
    payload = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    forged = base64.urlsafe_b64encode(payload.replace(b"m-1", b"m-2")).rstrip(b"=").decode()
    _, other = start_sim(SimConfig(merchant_id="m-1", secret=platform.secret, seed=7))
    foreign = first_cursor(other, other.sim)

    for bad in (
        flip(cursor, 3),
        flip(cursor, len(cursor) - 2),
        f"{forged}.{tag}",
        "not-a-cursor",
        body,
        foreign,
        platform.data("/v1/record-changes", [("from_now", "true")])["next_cursor"],
    ):
        response = platform.get("/v1/records", [("cursor", bad)])
        assert response.status_code == 400, bad
        assert error_of(response)["code"] == "CURSOR_INVALID"
    assert len(cursor) <= 4096


@pytest.mark.parametrize("limit", [1, 13, 1000], ids=["1", "13", "1000"])
def test_a_chain_reads_every_record_of_the_window_once(platform, sim, limit):
    end = sim_now(sim)
    start = end - timedelta(hours=24)
    pages = list(platform.records_chain(start, end, limit=limit))
    items = [i for p in pages for i in p["items"]]

    assert all(len(p["items"]) <= limit for p in pages)
    assert pages[-1]["has_more"] is False
    assert pages[-1]["next_cursor"] is None
    truth = sim.truth()
    expected = sorted(
        (r["created_at"], rid)
        for rid, r in truth.items()
        if format_time(start) <= r["created_at"] < format_time(end)
    )
    assert [(i["created_at"], i["record_id"]) for i in items] == expected
