"""Hostile values in a signed round-end notification: a 200 for a notification the
warehouse can store, a 400 naming the rule broken for anything else; never a 500 (an
exception out of ``handle``), which the platform would retry for ever."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.parsing_samples import HOLE, hostile_texts, splice
from support.round_event_requests import MERCHANT, PATH, SECRET, event_body, signed_headers

from recordsync.core.round_events import RoundEventReceipt
from recordsync.core.secret import Secret
from recordsync.service.ports.round_events.receiver import RoundEventReceiver, asgi_app
from recordsync.service.ports.round_events.signature import Request

NOW = 1_795_000_000.0
FIELDS = [*event_body(), "parent_round_id", "unknown_member"]


def stored(event):
    """The warehouse's view: every text must be storable (UTF-8, no NUL)."""
    for value in (event.event_id, event.round_id, event.external_player_id, event.currency):
        value.encode("utf-8")
        assert "\x00" not in value
    assert event.occurred_at.tzinfo is UTC
    return RoundEventReceipt(accepted_at=datetime.now(UTC), duplicate=False)


def receiver() -> RoundEventReceiver:
    return RoundEventReceiver(
        secrets=lambda merchant: (Secret(SECRET),) if merchant == MERCHANT else None,
        store=stored,
        wake=lambda _event: None,
        clock=lambda: NOW,
        request_ids=lambda: "req-1",
    )


def post(body: bytes):
    headers = signed_headers(body, now=NOW, idempotency_key="ev-1")
    request = Request("POST", PATH.encode(), {k.lower(): [v] for k, v in headers.items()}, body)
    reply = receiver().handle(request)
    return reply.status, orjson.loads(reply.body)


def hostile_body(field, text):
    document = event_body("ev-1")
    document[field] = HOLE
    return splice(document, text)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.sampled_from(FIELDS), hostile_texts())
def test_a_hostile_value_in_any_member_is_accepted_or_refused_with_400(field, text):
    status, answer = post(hostile_body(field, text))
    assert status in {200, 400}
    if status == 400:
        assert answer["error"]["code"] == "VALIDATION_FAILED"


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"[ -~]{0,60}", fullmatch=True))
def test_any_body_at_all_is_accepted_or_refused_with_400(text):
    assert post(text.encode())[0] in {200, 400}


@pytest.mark.parametrize(
    ("field", "text", "message"),
    [
        (
            "occurred_at",
            '"9999-12-31T23:30:00-01:00"',
            (
                "occurred_at: required, an RFC 3339 time (occurred_at: "
                "'9999-12-31T23:30:00-01:00' is outside the years 0001-9999 once in UTC)"
            ),
        ),
        (
            "occurred_at",
            '"0001-01-01T00:10:00+01:00"',
            (
                "occurred_at: required, an RFC 3339 time (occurred_at: "
                "'0001-01-01T00:10:00+01:00' is outside the years 0001-9999 once in UTC)"
            ),
        ),
        ("unknown_member", "NaN", "the body must be a UTF-8 JSON object"),
        ("unknown_member", "-Infinity", "the body must be a UTF-8 JSON object"),
        (
            "unknown_member",
            "[" * 200_000 + "]" * 200_000,
            "the body nests too deeply to be a round-end notification",
        ),
        ("round_id", '"\\ud800"', "round_id: contains an unpaired surrogate (\\ud800-\\udfff)"),
        ("currency", '"US\\u0000D"', "currency: contains a NUL character"),
        ("type", "1e400", "type: required, a non-empty string"),
        ("round_id", "9" * 5000, "round_id: required, a non-empty string"),
    ],
    ids=[
        "past-9999",
        "before-0001",
        "nan",
        "infinity",
        "deep",
        "unpaired-surrogate",
        "nul",
        "exponent",
        "huge-int",
    ],
)
def test_hostile_values_are_refused_with_400_and_the_rule(field, text, message):
    assert post(hostile_body(field, text)) == (
        400,
        {
            "error": {"code": "VALIDATION_FAILED", "message": message, "retryable": False},
            "request_id": "req-1",
        },
    )


@pytest.mark.parametrize(
    "text",
    ["1e400", "9" * 5000, "[" * 500 + "]" * 500, '"\\ud83d\\ude00"'],
    ids=["exponent", "huge-int", "nested", "surrogate-pair"],
)
def test_legal_json_in_an_unknown_member_is_ignored(text):
    status, answer = post(hostile_body("unknown_member", text))
    assert status == 200
    assert answer["data"]["event_id"] == "ev-1"


def test_the_calendars_edges_themselves_are_accepted():
    body = json.dumps(event_body("ev-1", occurred_at="9999-12-31T23:59:59.999999Z")).encode()
    assert post(body)[0] == 200


@pytest.mark.parametrize(
    "declared", ["\u00b2", "9" * 5000, "1" + "0" * 30], ids=["superscript-two", "5000-digits", "30"]
)
def test_a_hostile_content_length_is_refused_not_an_error(declared):
    """A Content-Length that str.isdigit() takes and int() does not ("²", past 4,300 digits)
    made the app raise (a 500) had a server passed it on: refused, or read as sent."""
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": PATH,
        "raw_path": PATH.encode(),
        "query_string": b"",
        "headers": [(b"content-length", declared.encode("latin-1"))],
    }
    asyncio.run(asgi_app(receiver())(scope, receive, send))
    assert sent[0]["status"] in {400, 401, 413}
