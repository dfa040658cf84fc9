"""Page and record parsing (spec: Record, Record change, Records endpoints, Versioning 3)."""

from datetime import UTC, datetime
from decimal import Decimal

import orjson
import pytest
from hypothesis import given, settings
from support.parsing_samples import record, records_page, tricky_overrides

from recordsync.core.errors import InvalidRecordError, ProtocolError
from recordsync.core.models import Record
from recordsync.platform import parsing
from recordsync.platform.parsing import (
    parse_capabilities,
    parse_change,
    parse_changes_page,
    parse_record,
    parse_records_page,
)


def change(sequence="1", **record_overrides):
    inner = record(**record_overrides)
    return {
        "sequence": sequence,
        "record_id": inner["record_id"],
        "revision": inner["revision"],
        "changed_at": "2026-01-01T00:00:06.000Z",
        "record": inner,
    }


def test_parse_record_happy_path_keeps_every_value_exact():
    parsed = parse_record(record(parent_round_id="round-0"))
    assert parsed.record_id == "rec-1"
    assert parsed.revision == 3
    assert parsed.parent_round_id == "round-0"
    assert parsed.bet_amount == Decimal("10.00")
    assert str(parsed.net_amount) == "15.50"
    assert parsed.created_at == datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)
    assert parsed.settled_at == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert parsed.status_known


def test_open_record_has_no_settled_at():
    parsed = parse_record(record(status="OPEN", settled_at=None))
    assert parsed.settled_at is None


def test_unknown_status_is_kept_and_flagged():
    parsed = parse_record(record(status="PARTIALLY_VOID"))
    assert parsed.status == "PARTIALLY_VOID"
    assert not parsed.status_known


def test_unknown_fields_are_ignored():
    parsed = parse_record(record(new_field={"x": 1}, another=[1, 2]))
    assert parsed == parse_record(record())


def test_offset_times_in_records_are_converted_to_utc():
    parsed = parse_record(record(updated_at="2026-01-01T05:30:05+05:30"))
    assert parsed.updated_at == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)


BAD_FIELDS = [
    ("record_id", None, "record_id"),
    ("record_id", "", "record_id"),
    ("revision", "3", "revision"),
    ("revision", -1, "revision"),
    ("revision", True, "revision"),
    ("revision", 3.0, "revision"),
    ("player_id", 7, "player_id"),
    ("game_id", None, "game_id"),
    ("currency", ["USD"], "currency"),
    ("round_id", None, "round_id"),
    ("parent_round_id", 5, "parent_round_id"),
    ("bet_amount", 10.0, "bet_amount"),
    ("refund_amount", "1e2", "refund_amount"),
    ("payout_amount", "1.23456", "payout_amount"),
    ("net_amount", None, "net_amount"),
    ("status", "", "status"),
    ("status", None, "status"),
    ("created_at", "yesterday", "created_at"),
    ("created_at", None, "created_at"),
    ("settled_at", "2026-01-01", "settled_at"),
    ("updated_at", 1767225600, "updated_at"),
]


@pytest.mark.parametrize(
    ("name", "value", "reason_prefix"),
    BAD_FIELDS,
    ids=[f"{name}={value!r}" for name, value, _ in BAD_FIELDS],
)
def test_each_bad_field_rejects_only_its_item_and_the_page_goes_on(name, value, reason_prefix):
    bad = record(record_id="bad")
    bad[name] = value
    items = [record(record_id="good-0"), bad, record(record_id="good-2")]
    page = parse_records_page(records_page(items), request_id="req-1")
    assert [r.record_id for r in page.records] == ["good-0", "good-2"]
    (rejected,) = page.rejected
    assert rejected.position == 1
    assert rejected.reason.startswith(reason_prefix)
    assert orjson.loads(rejected.raw)[name] == value
    expected_id = items[1]["record_id"] if isinstance(items[1]["record_id"], str) else None
    assert rejected.record_id == expected_id


@pytest.mark.parametrize(
    "item",
    [None, "a string", 17, [record()]],
    ids=["null", "string", "number", "list"],
)
def test_items_that_are_not_objects_are_rejected_not_fatal(item):
    page = parse_records_page(records_page([item, record()]))
    assert len(page.records) == 1
    assert page.rejected[0].position == 0
    assert page.rejected[0].record_id is None


def test_impossible_date_in_record_format_is_rejected_not_a_crash():
    page = parse_records_page(records_page([record(created_at="2026-02-30T00:00:00.000Z")]))
    assert page.rejected[0].reason.startswith("created_at")


def test_records_page_fields_are_read():
    page = parse_records_page(records_page([record()]), request_id="req-9")
    assert page.next_cursor == "c-2"
    assert page.has_more is True
    assert page.snapshot_watermark == "42"
    assert page.projection_as_of == datetime(2026, 1, 2, 0, 0, 0, 1, tzinfo=UTC)
    assert page.request_id == "req-9"


def test_last_records_page_has_null_cursor():
    page = parse_records_page(records_page([], next_cursor=None, has_more=False))
    assert page.next_cursor is None
    assert not page.has_more


RECORDS_SHAPE_ERRORS = [
    ("not-an-object", ["items"]),
    ("items-not-a-list", records_page({"a": 1})),
    ("items-missing", {k: v for k, v in records_page([]).items() if k != "items"}),
    ("has-more-not-bool", records_page([], has_more="true")),
    ("more-without-cursor", records_page([], next_cursor=None, has_more=True)),
    ("empty-cursor", records_page([], next_cursor="")),
    ("watermark-missing", {k: v for k, v in records_page([]).items() if k != "snapshot_watermark"}),
    ("watermark-not-string", records_page([], snapshot_watermark=42)),
    ("bad-projection-time", records_page([], projection_as_of="soon")),
]


@pytest.mark.parametrize(
    "data", [d for _, d in RECORDS_SHAPE_ERRORS], ids=[i for i, _ in RECORDS_SHAPE_ERRORS]
)
def test_records_page_shape_errors_raise_protocol_error(data):
    with pytest.raises(ProtocolError) as caught:
        parse_records_page(data, request_id="req-7")
    assert caught.value.endpoint == "records"
    assert caught.value.request_id == "req-7"
    assert "req-7" in str(caught.value)


def test_change_page_parses_and_keeps_huge_sequences_as_strings():
    huge = "9" * 60
    data = {
        "items": [change(sequence=huge), change(sequence="0", record_id="rec-2")],
        "next_cursor": "n-1",
        "has_more": False,
        "projection_as_of": None,
    }
    page = parse_changes_page(data)
    assert [c.sequence for c in page.changes] == [huge, "0"]
    assert page.changes[0].record.record_id == "rec-1"
    assert page.next_cursor == "n-1"
    assert page.projection_as_of is None


@pytest.mark.parametrize(
    ("mutate", "reason_prefix"),
    [
        (lambda c: c.update(sequence=12), "sequence"),
        (lambda c: c.update(sequence="012"), "sequence"),
        (lambda c: c.update(sequence="-1"), "sequence"),
        (lambda c: c.update(sequence="1.5"), "sequence"),
        (lambda c: c.update(revision=99), "change:"),
        (lambda c: c.update(record_id="other"), "change:"),
        (lambda c: c["record"].update(bet_amount=1), "bet_amount"),
        (lambda c: c.update(record=None), "record:"),
        (lambda c: c.update(changed_at="later"), "changed_at"),
    ],
    ids=[
        "sequence-number",
        "sequence-leading-zero",
        "sequence-negative",
        "sequence-fraction",
        "revision-disagrees",
        "record-id-disagrees",
        "embedded-record-invalid",
        "record-missing",
        "bad-changed-at",
    ],
)
def test_bad_changes_are_rejected_and_the_page_goes_on(mutate, reason_prefix):
    bad = change(sequence="2")
    mutate(bad)
    data = {
        "items": [change(sequence="1"), bad, change(sequence="3")],
        "next_cursor": "n",
        "has_more": True,
    }
    page = parse_changes_page(data)
    assert [c.sequence for c in page.changes] == ["1", "3"]
    assert page.rejected[0].position == 1
    assert page.rejected[0].reason.startswith(reason_prefix)


@pytest.mark.parametrize(
    "data",
    [
        {"items": [], "next_cursor": None, "has_more": False},
        {"items": [], "has_more": False},
        {"items": [], "next_cursor": "n"},
        {"items": None, "next_cursor": "n", "has_more": False},
    ],
    ids=["null-cursor", "missing-cursor", "missing-has-more", "items-null"],
)
def test_changes_page_shape_errors_raise_protocol_error(data):
    with pytest.raises(ProtocolError) as caught:
        parse_changes_page(data)
    assert caught.value.endpoint == "record-changes"


def test_parse_change_directly():
    parsed = parse_change(change(sequence="77"))
    assert parsed.sequence == "77"
    assert parsed.revision == parsed.record.revision == 3


def test_capabilities_limits_and_unknown_fields():
    caps = parse_capabilities(
        {
            "wallet_mode": "TRANSFER",
            "currencies": [{"code": "USD", "decimal_scale": 2}, {"bogus": True}],
            "operations": [{"kind": "X", "supported": True}],
            "limits": {"record_requests": 5, "record_seconds": 2, "max_page_size": 5000},
            "future": 1,
        }
    )
    assert caps.wallet_mode == "TRANSFER"
    assert [c.code for c in caps.currencies] == ["USD"]
    assert (caps.limits.record_requests, caps.limits.record_seconds) == (5, 2)
    assert caps.limits.max_page_size == 1000


# -- the hot path (_usual_record) decides exactly as the full checks do ------------------------


def _outcome(parse, raw):
    try:
        return parse(raw)
    except InvalidRecordError as exc:
        return f"rejected: {exc.reason}"


@settings(max_examples=500, deadline=None)
@given(tricky_overrides())
def test_the_hot_path_accepts_and_builds_exactly_what_the_full_checks_do(overrides):
    raw = record(**overrides)
    full = _outcome(parsing._checked_record, raw)
    assert _outcome(parse_record, raw) == full
    usual = parsing._usual_record(raw)
    assert usual is None or usual == full
    page = parse_records_page(records_page([raw]))
    if isinstance(full, str):
        assert page.rejected[0].reason == full.removeprefix("rejected: ")
    else:
        assert page.records == [full]


@pytest.mark.parametrize(
    "overrides",
    [{}, {"settled_at": None, "status": "OPEN"}, {"parent_round_id": "round-0"}],
    ids=["settled", "open", "child-round"],
)
def test_records_in_the_platforms_usual_form_take_the_hot_path(overrides):
    raw = record(**overrides)
    usual = parsing._usual_record(raw)
    assert usual is not None
    assert usual == parsing._checked_record(raw)
    for name in Record.__struct_fields__:
        assert getattr(usual, name) == getattr(parsing._checked_record(raw), name)
