"""How the simulator reads a receiver's reply: strictly, as the spec says the platform does.

Pure: ``read_reply`` on bytes, no sockets (the loopback tests are in test_sim_events.py).
"""

from __future__ import annotations

import gzip
from typing import Any

import orjson
import pytest

from recordsync.sim.events import RETRY_SCHEDULE_SECONDS, retry_delay
from recordsync.sim.replies import Reply, is_json_content_type, read_reply, retry_after_seconds

EVENT = "evt-1"
JSON_TYPE = {"content-type": "application/json"}
ACCEPTED_AT = "2026-01-02T03:04:05.123456Z"


def acceptance(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "data": {"event_id": EVENT, "accepted_at": ACCEPTED_AT},
        "request_id": "req-1",
    }
    for name, value in changes.items():
        if name.startswith("data_"):
            key = name.removeprefix("data_")
            if value is None:
                del document["data"][key]
            else:
                document["data"][key] = value
        elif value is None:
            del document[name]
        else:
            document[name] = value
    return document


def reply(document: Any = None, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    body = document if isinstance(document, bytes) else orjson.dumps(document or acceptance())
    return Reply(status, JSON_TYPE if headers is None else headers, body)


def test_a_clean_acceptance_is_accepted_with_no_deviation():
    verdict = read_reply(reply(), EVENT)
    assert verdict.accepted
    assert verdict.deviations == ()
    assert verdict.accepted_at == ACCEPTED_AT


@pytest.mark.parametrize(
    ("given", "deviations"),
    [
        (reply(acceptance(extra=1)), ("extra_member",)),
        (reply(acceptance(data_extra=1)), ("extra_member",)),
        (reply(acceptance(extra=1, data_extra=1)), ("extra_member",)),
        (reply(acceptance(request_id=None)), ("missing_member",)),
        (reply(acceptance(data_accepted_at=None)), ("missing_member",)),
        (reply(acceptance(data_event_id=None)), ("missing_member",)),
        (reply(acceptance(data=None)), ("missing_member",)),
        (reply(acceptance(data=[])), ("missing_member",)),
        (reply(acceptance(data_event_id="evt-2")), ("wrong_event_id",)),
        (reply(acceptance(data_accepted_at="yesterday")), ("bad_accepted_at",)),
        (reply(acceptance(data_accepted_at=17)), ("bad_accepted_at",)),
        (reply(acceptance(request_id="")), ("bad_request_id",)),
        (reply(acceptance(request_id=5)), ("bad_request_id",)),
        (reply(headers={"content-type": "text/plain"}), ("content_type",)),
        (reply(headers={}), ("content_type",)),
        (reply(headers={"content-type": "application/json; charset=latin-1"}), ("content_type",)),
        (
            reply(
                gzip.compress(orjson.dumps(acceptance())),
                headers={**JSON_TYPE, "content-encoding": "gzip"},
            ),
            ("compressed",),
        ),
        (reply(b"not json"), ("not_json",)),
        (reply(b"[1, 2]"), ("not_json",)),
        (reply(b"\xef\xbb\xbf" + orjson.dumps(acceptance())), ("not_json",)),
        (reply(b'{"data": {}, "data": {}, "request_id": "r"}'), ("not_json",)),
        (reply(status=201), ("status",)),
        (reply(status=204), ("status",)),
        (reply(b"", status=302, headers={"location": "https://elsewhere"}), ("redirect",)),
        (reply(b"oops", status=500, headers={"content-type": "text/plain"}), ("error_envelope",)),
        (reply(acceptance(), status=503), ("error_envelope",)),
    ],
    ids=[
        "extra-top-member",
        "extra-data-member",
        "extra-members-counted-once",
        "no-request-id",
        "no-accepted-at",
        "no-event-id",
        "no-data",
        "data-not-object",
        "wrong-event-id",
        "accepted-at-not-rfc3339",
        "accepted-at-not-string",
        "empty-request-id",
        "request-id-not-string",
        "text-plain",
        "no-content-type",
        "other-charset",
        "gzip",
        "not-json",
        "json-array",
        "bom",
        "repeated-member",
        "201",
        "204",
        "redirect",
        "500-not-envelope",
        "503-with-data",
    ],
)
def test_a_deviant_reply_is_not_an_acceptance_and_names_its_deviation(given, deviations):
    verdict = read_reply(given, EVENT)
    assert not verdict.accepted
    assert verdict.deviations == deviations


@pytest.mark.parametrize(
    "error",
    [
        {"code": "DEPENDENCY_UNAVAILABLE", "message": "m", "retryable": True},
        {"code": "AUTHENTICATION_FAILED", "message": "m", "retryable": False, "details": {}},
    ],
    ids=["plain", "with-details"],
)
@pytest.mark.parametrize("status", [401, 503])
def test_a_refusal_in_the_spec_envelope_is_no_deviation(error, status):
    verdict = read_reply(reply({"error": error, "request_id": "r"}, status=status), EVENT)
    assert (verdict.accepted, verdict.deviations) == (False, ())


def test_a_refusal_with_an_unlisted_member_breaks_the_envelope():
    error = {"code": "X", "message": "m", "retryable": True, "hint": "no"}
    verdict = read_reply(reply({"error": error, "request_id": "r"}, status=401), EVENT)
    assert verdict.deviations == ("error_envelope",)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("application/json", True),
        ("Application/JSON; charset=UTF-8", True),
        ("application/json;charset=utf-8", True),
        ("application/problem+json", False),
        ("application/json; charset=utf-8; x=1", False),
        (None, False),
    ],
    ids=str,
)
def test_the_content_type_must_be_json(value, expected):
    assert is_json_content_type(value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", 7.0),
        (" 0 ", 0.0),
        ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),
        ("soon", None),
        ("-1", None),
        (None, None),
    ],
    ids=str,
)
def test_retry_after_is_seconds_or_an_http_date(value, expected):
    now = 1445412480.0  # 2015-10-21T07:28:00Z
    assert retry_after_seconds(value, now=now) == expected


def test_the_retry_delays_follow_the_spec_then_hourly_and_honour_retry_after():
    delays = [retry_delay(retry) for retry in range(1, 10)]
    assert delays == [1, 5, 30, 120, 600, 1800, 3600, 3600, 3600]
    assert RETRY_SCHEDULE_SECONDS[-1] == 3600
    assert retry_delay(1, time_scale=0.01) == pytest.approx(0.01)
    assert retry_delay(1, retry_after=20) == 20  # never sooner than asked
    assert retry_delay(3, retry_after=2) == 30  # nor sooner than the schedule
    assert retry_delay(2, time_scale=0.5, retry_after=8) == 4
