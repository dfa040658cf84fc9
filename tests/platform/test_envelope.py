"""What an answer means (spec: Errors, Envelope): status and error.code, never the message."""

from contextlib import nullcontext

import orjson
import pytest

from recordsync.core.errors import (
    AuthenticationError,
    ClockSkewError,
    CursorExpiredError,
    PlatformError,
    ProjectionLagError,
    ProtocolError,
    RateLimitedError,
    RequestRejectedError,
    RetryableError,
    ServerError,
    UnexpectedRedirectError,
)
from recordsync.platform.envelope import (
    CLOCK_SKEW_MESSAGE,
    DEFAULT_RETRY_AFTER,
    MAX_RETRY_AFTER,
    decode,
    decode_reply,
    parse_retry_after,
)

JSON = {"Content-Type": "application/json"}
NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def body(**members):
    return orjson.dumps(members)


def failure(code="SOMETHING", message="diagnostic", *, request_id="req-1", **extra):
    error = {"code": code, "message": message, "retryable": False, "details": {}}
    error.update(extra)
    return body(error=error, request_id=request_id)


OK = body(data={"x": 1}, request_id="req-1")

CASES = [
    # -- success ----------------------------------------------------------------------------
    ("200-data", 200, JSON, OK, None),
    ("201-data", 201, JSON, OK, None),
    ("charset-utf8", 200, {"Content-Type": "application/json; charset=utf-8"}, OK, None),
    ("charset-quoted-upper", 200, {"content-type": 'Application/JSON;Charset="UTF-8"'}, OK, None),
    (
        "unknown-fields-ignored",
        200,
        JSON,
        body(data={"x": 1}, request_id="req-1", trace={"a": 1}),
        None,
    ),
    (
        "null-error-counts-as-absent",
        200,
        JSON,
        body(data={"x": 1}, error=None, request_id="r"),
        None,
    ),
    # -- envelope violations ------------------------------------------------------------------
    ("invalid-json", 200, JSON, b'{"data": {', ProtocolError),
    ("truncated-utf8", 200, JSON, b'{"data":"\xc3', ProtocolError),
    ("not-an-object", 200, JSON, b"[1, 2]", ProtocolError),
    ("both-members", 200, JSON, body(data={}, error={"code": "X"}, request_id="r"), ProtocolError),
    ("neither-member", 200, JSON, body(request_id="r"), ProtocolError),
    ("null-data", 200, JSON, body(data=None, request_id="r"), ProtocolError),
    ("2xx-carrying-error", 200, JSON, failure(), ProtocolError),
    ("missing-request-id", 200, JSON, body(data={}), ProtocolError),
    ("request-id-not-string", 200, JSON, body(data={}, request_id=7), ProtocolError),
    ("no-content-type", 200, {}, OK, ProtocolError),
    ("html-content-type", 200, {"Content-Type": "text/html"}, OK, ProtocolError),
    ("json-suffix-type", 200, {"Content-Type": "application/problem+json"}, OK, ProtocolError),
    (
        "latin1-charset",
        200,
        {"Content-Type": "application/json; charset=iso-8859-1"},
        OK,
        ProtocolError,
    ),
    ("error-code-missing", 400, JSON, body(error={"message": "m"}, request_id="r"), ProtocolError),
    ("error-code-not-string", 400, JSON, failure(code=5), ProtocolError),
    ("error-message-not-string", 400, JSON, failure(message=["m"]), ProtocolError),
    ("error-retryable-not-bool", 400, JSON, failure(retryable="no"), ProtocolError),
    ("error-details-not-object", 400, JSON, failure(details="x"), ProtocolError),
    ("error-not-object", 400, JSON, body(error="bad", request_id="r"), ProtocolError),
    ("4xx-with-data", 400, JSON, OK, ProtocolError),
    ("4xx-html", 404, {"Content-Type": "text/html"}, b"<h1>nope</h1>", ProtocolError),
    # -- statuses and codes -------------------------------------------------------------------
    ("302-redirect", 302, {"Location": "https://elsewhere/"}, b"", UnexpectedRedirectError),
    ("307-redirect-with-envelope", 307, JSON, failure(), UnexpectedRedirectError),
    ("304-not-modified", 304, {}, b"", UnexpectedRedirectError),
    ("401-request-expired", 401, JSON, failure("REQUEST_EXPIRED"), ClockSkewError),
    ("401-auth-failed", 401, JSON, failure("AUTHENTICATION_FAILED"), AuthenticationError),
    ("401-other-code", 401, JSON, failure("WHATEVER"), AuthenticationError),
    ("410-cursor-expired", 410, JSON, failure("CURSOR_EXPIRED"), CursorExpiredError),
    ("410-other-code", 410, JSON, failure("GONE"), RequestRejectedError),
    ("400-validation", 400, JSON, failure("VALIDATION_FAILED"), RequestRejectedError),
    ("404-not-found", 404, JSON, failure("RESOURCE_NOT_FOUND"), RequestRejectedError),
    ("422-retryable-flag-ignored", 422, JSON, failure(retryable=True), RequestRejectedError),
    ("429-envelope", 429, JSON, failure("RATE_LIMITED"), RateLimitedError),
    ("429-from-a-proxy", 429, {"Content-Type": "text/plain"}, b"slow down", RateLimitedError),
    ("503-projection-lag", 503, JSON, failure("PROJECTION_LAG"), ProjectionLagError),
    ("503-no-body", 503, {}, b"", ProjectionLagError),
    ("500-server", 500, JSON, failure("INTERNAL"), ServerError),
    ("502-proxy-html", 502, {"Content-Type": "text/html"}, b"<h1>bad gateway</h1>", ServerError),
]


@pytest.mark.parametrize(
    ("status", "headers", "raw", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_envelope_table(status, headers, raw, expected):
    context = nullcontext() if expected is None else pytest.raises(expected)
    with context as caught:
        data = decode("records", status, headers, raw, now=lambda: NOW)
    if expected is None:
        assert data == {"x": 1}
    else:
        error = caught.value
        assert type(error) is expected
        assert error.endpoint == "records"
        assert "records" in str(error)
        if status >= 300:
            assert error.status == status


def test_errors_carry_code_status_and_request_id():
    with pytest.raises(CursorExpiredError) as caught:
        decode("record-changes", 410, JSON, failure("CURSOR_EXPIRED", request_id="req-77"))
    error = caught.value
    assert (error.code, error.status, error.request_id) == ("CURSOR_EXPIRED", 410, "req-77")
    assert "request_id=req-77" in str(error)
    assert "endpoint=record-changes" in str(error)


def test_protocol_errors_name_the_endpoint_and_the_request_id_when_present():
    with pytest.raises(ProtocolError) as caught:
        decode("records", 200, JSON, failure(request_id="req-5"))
    assert "endpoint=records" in str(caught.value)
    assert "request_id=req-5" in str(caught.value)
    with pytest.raises(ProtocolError) as caught:
        decode("records", 200, JSON, b"not json")
    assert "endpoint=records" in str(caught.value)
    assert caught.value.request_id is None


def test_request_expired_says_the_clock_is_off_and_to_check_ntp():
    with pytest.raises(ClockSkewError) as caught:
        decode("records", 401, JSON, failure("REQUEST_EXPIRED", "timestamp too old"))
    text = str(caught.value)
    assert CLOCK_SKEW_MESSAGE in text
    assert "300 s" in text
    assert "NTP" in text


def test_the_message_never_decides_the_class():
    expired = failure("AUTHENTICATION_FAILED", "REQUEST_EXPIRED CURSOR_EXPIRED")
    with pytest.raises(AuthenticationError):
        decode("records", 401, JSON, expired)


def test_server_message_is_kept_for_diagnosis_but_clipped():
    with pytest.raises(RequestRejectedError) as caught:
        decode("records", 400, JSON, failure("VALIDATION_FAILED", "limit: " + "x" * 1000))
    assert "limit: xxx" in str(caught.value)
    assert len(str(caught.value)) < 500


def test_decode_reply_keeps_the_request_id():
    reply = decode_reply("records", 200, JSON, OK)
    assert (reply.data, reply.request_id) == ({"x": 1}, "req-1")


def test_every_error_class_is_a_platform_error_and_retryability_follows_the_class():
    for status, code, retryable in [
        (429, "X", True),
        (500, "X", True),
        (503, "X", True),
        (400, "X", False),
        (401, "REQUEST_EXPIRED", False),
    ]:
        with pytest.raises(PlatformError) as caught:
            decode("records", status, JSON, failure(code))
        assert isinstance(caught.value, RetryableError) is retryable


RETRY_AFTER = [
    ({"Retry-After": "7"}, 7.0, "delta-seconds"),
    ({"retry-after": " 0 "}, 0.0, "zero-lowercase-header"),
    ({"Retry-After": "Thu, 01 Jan 2026 00:00:30 GMT"}, 30.0, "http-date-against-now"),
    (
        {"Retry-After": "Thu, 01 Jan 2026 00:00:30 GMT", "Date": "Thu, 01 Jan 2026 00:00:25 GMT"},
        5.0,
        "http-date-against-server-date",
    ),
    ({"Retry-After": "Wed, 31 Dec 2025 23:00:00 GMT"}, 0.0, "date-in-the-past"),
    ({}, DEFAULT_RETRY_AFTER, "absent"),
    ({"Retry-After": "soon"}, DEFAULT_RETRY_AFTER, "garbage"),
    ({"Retry-After": "-5"}, DEFAULT_RETRY_AFTER, "negative"),
    ({"Retry-After": "\u0665"}, DEFAULT_RETRY_AFTER, "non-ascii-digit"),
    ({"Retry-After": "99999999999"}, MAX_RETRY_AFTER, "capped"),
]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [(h, e) for h, e, _ in RETRY_AFTER],
    ids=[i for *_, i in RETRY_AFTER],
)
def test_retry_after(headers, expected):
    assert parse_retry_after(headers, now=lambda: NOW) == pytest.approx(expected)


def test_rate_limited_error_carries_retry_after():
    with pytest.raises(RateLimitedError) as caught:
        decode("records", 429, {**JSON, "Retry-After": "3"}, failure("RATE_LIMITED"))
    assert caught.value.retry_after == 3.0
    assert caught.value.code == "RATE_LIMITED"
