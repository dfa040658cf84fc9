"""Records pages read straight from the answer's bytes (``usual_records_page``, msgspec).

The fast path may only decline (None): whatever it returns must be exactly what the orjson
path (``decode_reply`` + ``parse_records_page``) makes of the same bytes, so an answer's
outcome, accepted records, quarantined items and their reasons, never depends on the path.
"""

import orjson
import pytest
from hypothesis import given, settings
from support.parsing_samples import record, records_page, tricky_overrides

from recordsync.core.errors import PlatformError
from recordsync.core.money import all_money
from recordsync.platform.envelope import decode_reply, is_json_success
from recordsync.platform.parsing import parse_records_page, usual_records_page

HEADERS = {"content-type": "application/json"}
# Forms the typed decode alone would take (msgspec reads these as a Decimal or a datetime).
MORE_TRICKY = [
    615,
    "1,2",
    "1_000",
    " 1",
    "NaN",
    "10.",
    ".5",
    "2026-01-01 00:00:00.000Z",
    "2026-01-01T00:00:00.0000001Z",
    "2026-01-01T00:00:00.000+00:00",
    "2026-01-01T00:00:00.000",
    "2026-01-01T00:00:00.1234Z",
    # the record time's length and punctuation, but not its digits
    "2026-01-01T00:00:00. 12Z",
    "2026-01-01T00:00:00.-12Z",
    "+026-01-01T00:00:00.000Z",
    "2026-01-01T00:00:0Z.000Z",
    "2026-01-01T0:000:00.000Z",
    "2026-02-30T00:00:00.000Z",
]


def body(items, *, request_id="req-1", **page):
    return orjson.dumps({"data": records_page(items, **page), "request_id": request_id})


def orjson_path(raw: bytes):
    try:
        reply = decode_reply("records", 200, HEADERS, raw)
        return parse_records_page(reply.data, request_id=reply.request_id)
    except PlatformError as exc:
        return f"{type(exc).__name__}: {exc}"


@settings(max_examples=300, deadline=None)
@given(tricky_overrides(MORE_TRICKY, max_size=3))
def test_the_bytes_path_returns_exactly_the_orjson_paths_page_or_declines(overrides):
    raw = body([record(record_id="good"), record(**overrides)])
    fast = usual_records_page(raw)
    full = orjson_path(raw)
    if fast is not None:
        assert fast == full
        assert not fast.rejected
        for mine, theirs in zip(fast.records, full.records, strict=True):
            for name in ("bet_amount", "refund_amount", "payout_amount", "net_amount"):
                assert str(getattr(mine, name)) == str(getattr(theirs, name))  # "10.00" stays
            assert mine.created_at.tzinfo is theirs.created_at.tzinfo


def test_a_page_in_the_usual_form_is_read_from_the_bytes():
    items = [
        record(),
        record(record_id="rec-2", settled_at=None, status="OPEN"),
        record(record_id="rec-3", parent_round_id="round-0", bet_amount="-0.0001"),
    ]
    raw = body(items)
    fast = usual_records_page(raw)
    assert fast is not None
    assert fast == orjson_path(raw)
    assert fast.request_id == "req-1"
    assert fast.next_cursor == "c-2"


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        orjson.dumps({"data": None, "request_id": "r"}),
        body([record()], request_id=""),
        orjson.dumps({"data": records_page([record()]), "request_id": "r", "error": {"code": "X"}}),
        body([record()], has_more=True, next_cursor=None),
        body([record()], next_cursor=""),
        body([record()], projection_as_of="soon"),
        body([record(), "not an object"]),
        body([{k: v for k, v in record().items() if k != "parent_round_id"}]),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "null-data",
        "empty-request-id",
        "error-member",
        "more-without-cursor",
        "empty-cursor",
        "bad-projection-time",
        "item-not-an-object",
        "missing-optional-member",
    ],
)
def test_anything_unusual_is_left_to_the_orjson_path(raw):
    assert usual_records_page(raw) is None
    orjson_path(raw)  # which decides, raising or quarantining with its precise reason


def test_a_bad_item_on_a_page_is_still_quarantined_with_its_reason():
    raw = body([record(record_id="good"), record(record_id="bad", refund_amount="1e2")])
    assert usual_records_page(raw) is None
    page = orjson_path(raw)
    assert [r.record_id for r in page.records] == ["good"]
    assert page.rejected[0].reason.startswith("refund_amount")


def test_only_a_plain_200_json_answer_is_read_directly():
    assert is_json_success(200, {"Content-Type": "application/json; charset=utf-8"})
    assert not is_json_success(201, HEADERS)
    assert not is_json_success(200, {"content-type": "text/html"})
    assert not is_json_success(200, {})


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], True),
        (["0", "-0", "10.50", "-1.2345"], True),
        (["1,2"], False),
        (["1", "1e2"], False),
        (["01"], False),
        (["1."], False),
        ([""], False),
    ],
)
def test_all_money_checks_every_value(values, expected):
    assert all_money(values) is expected
