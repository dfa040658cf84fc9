"""Hostile values in every field of every page the client reads.

Whatever the platform sends, a page ends in one of two ways: parsed, with each item accepted
or quarantined with a reason naming its field, or refused with ``ProtocolError`` (retried
within the policy's attempts, its cursor never advanced).  Never another exception: one
would fail the page on every retry, for ever.
"""

import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.parsing_samples import (
    EXTREME_TIMES,
    HOLE,
    hostile_texts,
    json_values,
    record,
    records_page,
    splice,
)

from recordsync.core.errors import InvalidRecordError, ProtocolError, RetryableError
from recordsync.core.models import RecordChange
from recordsync.platform.envelope import decode_reply
from recordsync.platform.parsing import (
    parse_capabilities,
    parse_changes_page,
    parse_games_page,
    parse_records_page,
    usual_records_page,
)
from recordsync.sync.plan import highest_sequence

HEADERS = {"content-type": "application/json"}
HOSTILE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def change(**record_overrides):
    inner = record(**record_overrides)
    return {
        "sequence": "7",
        "record_id": inner["record_id"],
        "revision": inner["revision"],
        "changed_at": "2026-01-01T00:00:06.000Z",
        "record": inner,
    }


def game(**overrides):
    raw = {
        "game_id": "g-1",
        "name": "Gold Rush",
        "brand": "Acme",
        "category": "SLOT",
        "category_detail": {"code": "SLOT", "name": "Slots"},
        "status": "AVAILABLE",
        "launch_supported": True,
        "provider": {"code": "p-1", "name": "Provider"},
        "client_version": "1.2.3",
        "languages": ["en", "de"],
        "localizations": [{"language": "en", "name": "Gold Rush"}],
        "icon": {"url": "https://example/icon.png"},
    }
    raw.update(overrides)
    return raw


def answer(data):
    return {"data": data, "request_id": "req-1"}


def read(endpoint, raw, parse):
    """What the client makes of the bytes: the page, or the ProtocolError refusing it."""
    try:
        reply = decode_reply(endpoint, 200, HEADERS, raw)
        if parse is parse_games_page:
            return parse(reply.data, request_id=reply.request_id)
        return parse(reply.data, request_id=reply.request_id, body=reply.body)
    except ProtocolError as exc:
        refused = exc
    assert refused.endpoint == endpoint
    return refused


def check_page(page, accepted, *, good):
    """A parsed page keeps the good item; the hostile one is accepted or quarantined with
    a reason naming its field, its raw JSON kept as JSON (``1e400`` as sent, which Python's
    decoder reads back)."""
    if isinstance(page, ProtocolError):
        return
    assert [getattr(item, accepted) for item in page_items(page)][:1] == [good]
    for rejected in page.rejected:
        assert rejected.reason.split(":")[0].split("[")[0].split(".")[0] in NAMES
        kept(rejected.raw)


def kept(raw):
    """A quarantined item read back, its numbers as their text (whatever their size)."""
    return json.loads(raw, parse_int=str, parse_float=str)


def page_items(page):
    return getattr(page, "records", None) or getattr(page, "changes", None) or page.games


RECORD_FIELDS = set(record())
CHANGE_FIELDS = {"sequence", "record_id", "revision", "changed_at", "record"}
GAME_FIELDS = set(game())
NAMES = RECORD_FIELDS | CHANGE_FIELDS | GAME_FIELDS | {"record", "change", "game"}


@HOSTILE
@given(st.sampled_from([*RECORD_FIELDS, "unknown_field"]), hostile_texts())
def test_a_hostile_value_in_any_record_field_is_quarantined_or_the_page_refused(field, text):
    bad = record(record_id="bad")
    bad[field] = HOLE
    raw = splice(answer(records_page([record(record_id="good"), bad])), text)
    full = read("records", raw, parse_records_page)
    check_page(full, "record_id", good="good")
    fast = usual_records_page(raw)  # the client's hot path may only decline or agree
    if fast is not None:
        assert fast == full


@HOSTILE
@given(
    st.sampled_from(["next_cursor", "has_more", "snapshot_watermark", "projection_as_of", "x"]),
    hostile_texts(),
)
def test_a_hostile_value_in_a_records_page_member_is_read_or_refused(member, text):
    raw = splice(answer(records_page([record()], **{member: HOLE})), text)
    full = read("records", raw, parse_records_page)
    fast = usual_records_page(raw)
    if fast is not None:
        assert fast == full


@HOSTILE
@given(
    st.sampled_from([*CHANGE_FIELDS, "unknown_field", *(f"record.{f}" for f in RECORD_FIELDS)]),
    hostile_texts(),
)
def test_a_hostile_value_in_any_change_field_is_quarantined_or_the_page_refused(field, text):
    bad = change(record_id="bad")
    if field.startswith("record."):
        bad["record"][field.removeprefix("record.")] = HOLE
    else:
        bad[field] = HOLE
    data = {"items": [change(record_id="good"), bad], "next_cursor": "n", "has_more": True}
    page = read("record-changes", splice(answer(data), text), parse_changes_page)
    check_page(page, "record_id", good="good")
    if not isinstance(page, ProtocolError):
        highest_sequence(page.changes)  # what the tail does next with a page


@HOSTILE
@given(
    st.sampled_from([*game(), "unknown_field", "provider.code", "localizations.0.name"]),
    hostile_texts(),
)
def test_a_hostile_value_in_any_game_field_is_quarantined_or_the_page_refused(field, text):
    bad = game(game_id="bad")
    if field == "provider.code":
        bad["provider"]["code"] = HOLE
    elif field == "localizations.0.name":
        bad["localizations"][0]["name"] = HOLE
    else:
        bad[field] = HOLE
    data = {"items": [game(game_id="good"), bad], "next_cursor": None, "has_more": False}
    page = read("games", splice(answer(data), text), parse_games_page)
    check_page(page, "game_id", good="good")


@pytest.mark.parametrize(
    ("endpoint", "parse"),
    [
        ("records", parse_records_page),
        ("record-changes", parse_changes_page),
        ("games", parse_games_page),
    ],
    ids=["records", "record-changes", "games"],
)
@HOSTILE
@given(data=json_values(), text=hostile_texts())
def test_any_json_as_a_page_or_as_its_items_is_read_or_refused(endpoint, parse, data, text):
    read(endpoint, orjson.dumps(answer(data)), parse)
    read(endpoint, splice(answer({"items": [HOLE], "has_more": False}), text), parse)
    read(endpoint, splice(answer(HOLE), text), parse)
    read(endpoint, text.encode(), parse)
    if endpoint == "records":
        usual_records_page(text.encode())


@HOSTILE
@given(st.sampled_from(["currencies", "limits", "wallet_mode", "x"]), hostile_texts())
def test_hostile_capabilities_are_read_or_refused_with_a_reason(member, text):
    data = {"limits": {"record_requests": 2, "record_seconds": 1}, member: HOLE}
    try:
        reply = decode_reply("capabilities", 200, HEADERS, splice(answer(data), text))
        parse_capabilities(reply.data)
    except (ProtocolError, InvalidRecordError):
        pass


# -- each class of hostile value, and what becomes of it -----------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (
            "9999-12-31T23:30:00-01:00",
            "created_at: '9999-12-31T23:30:00-01:00' is outside the years 0001-9999 once in UTC",
        ),
        (
            "0001-01-01T00:10:00+01:00",
            "created_at: '0001-01-01T00:10:00+01:00' is outside the years 0001-9999 once in UTC",
        ),
        ("0000-01-01T00:00:00Z", "created_at: '0000-01-01T00:00:00Z' is not a valid time"),
    ],
    ids=["past-9999", "before-0001", "year-0"],
)
def test_a_time_whose_offset_leaves_the_calendar_is_quarantined(value, reason):
    items = [record(record_id="good"), record(record_id="bad", created_at=value)]
    page = read("records", orjson.dumps(answer(records_page(items))), parse_records_page)
    assert [r.record_id for r in page.records] == ["good"]
    (rejected,) = page.rejected
    assert rejected.reason.startswith(reason)
    assert rejected.record_id == "bad"


def test_the_calendars_edges_themselves_are_records_like_any_other():
    items = [record(record_id=f"r{i}", updated_at=t) for i, t in enumerate(EXTREME_TIMES[2:4])]
    page = read("records", orjson.dumps(answer(records_page(items))), parse_records_page)
    assert len(page.records) == 2
    assert not page.rejected


@pytest.mark.parametrize(
    ("field", "text", "reason"),
    [
        ("revision", "1e400", "revision: expected a non-negative integer"),
        ("bet_amount", "-1e400", "bet_amount: expected a decimal string, got OutOfRangeNumber"),
        ("revision", "9" * 5000, "revision: expected a non-negative integer"),
        ("revision", str(2**64), "revision: expected a non-negative integer"),
        ("status", "9" * 310, "status: expected a non-empty string"),
        ("net_amount", "1.5e3", "net_amount: expected a decimal string, got float"),
        ("created_at", "[" * 300 + "]" * 300, "created_at: expected an RFC3339 string, got list"),
    ],
    ids=[
        "exponent-revision",
        "exponent-amount",
        "huge-int",
        "past-64-bits",
        "wide-int",
        "float",
        "deep",
    ],
)
def test_numbers_no_float_holds_quarantine_their_record_not_the_page(field, text, reason):
    items = [record(record_id="good"), record(record_id="bad", **{field: HOLE})]
    raw = splice(answer(records_page(items)), text)
    assert usual_records_page(raw) is None
    page = read("records", raw, parse_records_page)
    assert [r.record_id for r in page.records] == ["good"]
    (rejected,) = page.rejected
    assert rejected.reason == reason
    assert kept(rejected.raw)["record_id"] == "bad"


def test_a_number_beyond_a_float_is_kept_in_the_quarantine_as_sent():
    items = [record(record_id="bad", revision=HOLE)]
    page = read("records", splice(answer(records_page(items)), "1e400"), parse_records_page)
    assert b'"revision":1e400' in page.rejected[0].raw


@pytest.mark.parametrize(
    "text",
    ["1e400", "9" * 5000, "[" * 300 + "]" * 300],
    ids=["exponent", "huge-int", "deep"],
)
def test_hostile_values_in_unknown_fields_are_ignored_on_both_paths(text):
    raw = splice(answer(records_page([record(future=HOLE)])), text)
    full = read("records", raw, parse_records_page)
    assert [r.record_id for r in full.records] == ["rec-1"]
    assert not full.rejected
    fast = usual_records_page(raw)
    assert fast is None or fast == full


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("NaN", "NaN is not a JSON value"),
        ("-Infinity", "-Infinity is not a JSON value"),
        ("[" * 1100 + "]" * 1100, "nested too deeply to be read"),
        ('"\\ud800"', "a string holds an unpaired surrogate"),
        ("9" * 5000 + ', "x": NaN', "NaN is not a JSON value"),
    ],
    ids=["nan", "infinity", "deeper-than-1024", "unpaired-surrogate", "huge-int-and-nan"],
)
def test_what_is_not_json_refuses_the_page_with_a_protocol_error(text, detail):
    raw = splice(answer(records_page([record(status=HOLE)])), text)
    assert usual_records_page(raw) is None
    refused = read("records", raw, parse_records_page)
    assert isinstance(refused, ProtocolError)
    assert isinstance(refused, RetryableError)  # retried within the policy, then raised
    assert f"body is not valid JSON ({len(raw)} bytes): {detail}" in str(refused)


def test_a_cursor_longer_than_the_spec_allows_refuses_the_page():
    raw = orjson.dumps(answer(records_page([record()], next_cursor="c" * 4097)))
    assert usual_records_page(raw) is None
    refused = read("records", raw, parse_records_page)
    assert isinstance(refused, ProtocolError)
    assert "next_cursor has 4097 characters, more than 4096" in str(refused)


def test_a_rejected_item_nested_deeper_than_orjson_writes_is_still_kept_as_json():
    items = [record(record_id="bad", status=None, future=HOLE)]
    page = read(
        "records", splice(answer(records_page(items)), "[" * 600 + "]" * 600), parse_records_page
    )
    (rejected,) = page.rejected
    assert kept(rejected.raw)["record_id"] == "bad"


def test_sequences_beyond_int_digits_are_ordered_without_int():
    def at(sequence):
        return RecordChange(sequence, "r", 1, None, None)  # type: ignore[arg-type]

    huge = "9" * 5000
    assert highest_sequence([at("12"), at(huge), at("3")]) == huge
    assert highest_sequence([at("10"), at("9")]) == "10"
