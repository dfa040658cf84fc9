"""The pure checks of a round-end notification, in the spec's order, without a socket."""

from __future__ import annotations

import json

import pytest
from support.round_event_requests import MERCHANT, PATH, SECRET, event_body, signed_headers

from recordsync.core.secret import Secret
from recordsync.service.ports.round_events.signature import Refusal, Request, parse_event, verify

NOW = 1_795_000_000.0
BODY = json.dumps(event_body("ev-1")).encode()
TARGET = PATH.encode()


def request(headers, body=BODY, target=TARGET):
    return Request("POST", target, {k.lower(): [v] for k, v in headers.items()}, body)


def secrets(merchant_id):
    return (Secret(SECRET),) if merchant_id == MERCHANT else None


def refusal(call):
    with pytest.raises(Refusal) as caught:
        call()
    return caught.value.status, caught.value.code


def test_a_signed_request_names_its_merchant_and_event():
    good = request(signed_headers(BODY, now=NOW))
    assert verify(good, secrets=secrets, now=NOW) == MERCHANT
    event = parse_event(good, MERCHANT)
    assert (event.event_id, event.round_id, event.merchant_id) == ("ev-1", "round-ev-1", MERCHANT)


def test_the_merchant_is_checked_before_the_timestamp_and_the_timestamp_before_the_signature():
    stale_stranger = signed_headers(BODY, now=NOW - 1000, merchant_id="stranger", secret="x")
    stale_bad_signature = signed_headers(BODY, now=NOW - 1000, secret="x")
    assert refusal(lambda: verify(request(stale_stranger), secrets=secrets, now=NOW)) == (
        401,
        "AUTHENTICATION_FAILED",
    )
    assert refusal(lambda: verify(request(stale_bad_signature), secrets=secrets, now=NOW)) == (
        401,
        "REQUEST_EXPIRED",
    )


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("X-Timestamp", "179500000"),  # nine digits
        ("X-Timestamp", "1795000000.0"),
        ("X-Signature", "A" * 64),  # upper case
        ("X-Signature", "ab"),
    ],
    ids=["short timestamp", "fractional timestamp", "upper-case signature", "short signature"],
)
def test_malformed_headers_are_refused(header, value):
    headers = signed_headers(BODY, now=NOW)
    headers[header] = value
    code = "REQUEST_EXPIRED" if header == "X-Timestamp" else "AUTHENTICATION_FAILED"
    assert refusal(lambda: verify(request(headers), secrets=secrets, now=NOW)) == (401, code)


def test_a_header_sent_twice_is_not_guessed_at():
    headers = {k.lower(): [v] for k, v in signed_headers(BODY, now=NOW).items()}
    headers["x-signature"] = headers["x-signature"] * 2
    twice = Request("POST", PATH.encode(), headers, BODY)
    assert refusal(lambda: verify(twice, secrets=secrets, now=NOW)) == (
        401,
        "AUTHENTICATION_FAILED",
    )


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"\xef\xbb\xbf" + BODY, {}),
        (BODY, {"Content-Type": "text/plain"}),
        (BODY, {"Content-Encoding": "gzip"}),
        (json.dumps(event_body("ev-1", parent_round_id=7)).encode(), {}),
        (json.dumps(event_body("ev-1", round_id="r" * 256)).encode(), {}),
        (json.dumps(event_body("ev 1")).encode(), {"Idempotency-Key": "ev 1"}),
    ],
    ids=["BOM", "not JSON content", "compressed", "parent not a string", "too long", "bad id"],
)
def test_bodies_outside_the_rules_are_validation_failures(body, headers):
    all_headers = {**signed_headers(body, now=NOW), **headers}
    assert refusal(lambda: parse_event(request(all_headers, body), MERCHANT)) == (
        400,
        "VALIDATION_FAILED",
    )
