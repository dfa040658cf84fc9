"""The signed platform client over httpx.MockTransport (spec: Authentication, Records, Errors)."""

import hashlib
import hmac
import itertools
import json
import random
import time
from datetime import UTC, datetime, timedelta

import certifi
import httpx
import pytest
from structlog.testing import capture_logs

from recordsync.core.errors import (
    AuthenticationError,
    ClockSkewError,
    ConfigurationError,
    LeaseUnconfirmedError,
    PlatformUnreachableError,
    ProjectionLagError,
    ProtocolError,
    RateLimitedError,
    RequestRejectedError,
    ResponseTooLargeError,
    RetryableError,
    ServerError,
    ShutdownRequestedError,
    TransportError,
    UnexpectedRedirectError,
)
from recordsync.core.models import DEFAULT_LIMITS
from recordsync.core.secret import Secret
from recordsync.core.waiting import Deferred, no_waiting
from recordsync.platform.budget import Priority, RateBudget
from recordsync.platform.client import PlatformClient, check_sent_verbatim
from recordsync.platform.retry import RetryPolicy

SECRET = "S3cr3t-value-that-must-never-leak-0123456789"
MERCHANT = "merchant-7"
WALL_START = 1_767_225_600
FROM = datetime(2026, 1, 1, tzinfo=UTC)
TO = FROM + timedelta(hours=1)


def envelope(data, request_id="req-1", status=200, headers=None):
    return httpx.Response(
        status, json={"data": data, "request_id": request_id}, headers=headers or {}
    )


def failure(status, code, message="diagnostic", request_id="req-e", headers=None):
    error = {"code": code, "message": message, "retryable": status >= 500, "details": {}}
    return httpx.Response(
        status, json={"error": error, "request_id": request_id}, headers=headers or {}
    )


RECORDS_PAGE = {
    "items": [],
    "next_cursor": None,
    "has_more": False,
    "snapshot_watermark": "0",
    "projection_as_of": "2026-01-02T00:00:00.000Z",
}
CHANGES_PAGE = {"items": [], "next_cursor": "c-next", "has_more": False}
CAPABILITIES = {
    "wallet_mode": "TRANSFER",
    "currencies": [{"code": "USD", "decimal_scale": 2}],
    "limits": {"record_requests": 5, "record_seconds": 2, "max_page_size": 500},
}


class Platform:
    """A scripted platform: answers in order (the last one repeats) and records every request."""

    def __init__(self, fake_time, *answers):
        self.fake_time = fake_time
        self.answers = list(answers)
        self.requests = []
        self.received_at = []

    def __call__(self, request):
        self.requests.append(request)
        self.received_at.append(self.fake_time())
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer


def make_client(fake_time, platform, *, budget=None, **kwargs):
    wall = itertools.count(WALL_START)  # a fresh second on every read: timestamps differ
    kwargs.setdefault("retry", RetryPolicy())
    return PlatformClient(
        base_url=kwargs.pop("base_url", "https://platform.example"),
        merchant_id=MERCHANT,
        secret=kwargs.pop("secret", Secret(SECRET)),
        budget=budget or RateBudget(2, 1.0, clock=fake_time, sleep=fake_time.sleep),
        transport=httpx.MockTransport(platform),
        clock=kwargs.pop("clock", lambda: next(wall)),
        sleep=kwargs.pop("sleep", fake_time.sleep),
        rng=random.Random(7),
        **kwargs,
    )


def expected_signature(request, secret=SECRET):
    target = request.url.raw_path.decode("ascii")
    message = f"{request.headers['X-Timestamp']}\nGET\n{target}\n\n\n".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


# -- signing and the request itself ------------------------------------------------------------


def test_records_first_sends_a_signed_get_with_the_exact_target(fake_time):
    platform = Platform(fake_time, envelope(RECORDS_PAGE, request_id="req-42"))
    with make_client(fake_time, platform) as client:
        page = client.records_first(FROM, TO, limit=250)
    (request,) = platform.requests
    assert request.method == "GET"
    assert request.url.raw_path == (
        b"/v1/records?created_from=2026-01-01T00%3A00%3A00.000Z"
        b"&created_to=2026-01-01T01%3A00%3A00.000Z&limit=250"
    )
    assert request.headers["X-Merchant-Id"] == MERCHANT
    assert request.headers["X-Timestamp"] == str(WALL_START)
    assert request.headers["X-Signature"] == expected_signature(request)
    assert page.request_id == "req-42"
    assert page.snapshot_watermark == "0"


def test_base_url_path_prefix_is_part_of_the_signed_target(fake_time):
    platform = Platform(fake_time, envelope(CHANGES_PAGE))
    with make_client(fake_time, platform, base_url="https://platform.example/api/v9/") as client:
        client.changes(cursor="a b+c/d:e", limit=10)
    (request,) = platform.requests
    assert request.url.raw_path == b"/api/v9/v1/record-changes?cursor=a%20b%2Bc%2Fd%3Ae&limit=10"
    assert request.headers["X-Signature"] == expected_signature(request)


@pytest.mark.parametrize(
    ("kwargs", "query"),
    [
        ({"cursor": "abc"}, b"cursor=abc&limit=1000"),
        (
            {"since": FROM + timedelta(microseconds=1500), "limit": 5},
            b"since=2026-01-01T00%3A00%3A00.001Z&limit=5",
        ),
        ({"from_now": True, "limit": 1}, b"from_now=true&limit=1"),
    ],
    ids=["cursor", "since", "from-now"],
)
def test_changes_sends_exactly_one_start(fake_time, kwargs, query):
    platform = Platform(fake_time, envelope(CHANGES_PAGE))
    with make_client(fake_time, platform) as client:
        page = client.changes(**kwargs)
    assert platform.requests[0].url.raw_path == b"/v1/record-changes?" + query
    assert page.next_cursor == "c-next"


def test_records_next_sends_only_cursor_and_limit(fake_time):
    platform = Platform(fake_time, envelope(RECORDS_PAGE))
    with make_client(fake_time, platform) as client:
        client.records_next("cur/sor+1", limit=3)
    assert platform.requests[0].url.raw_path == b"/v1/records?cursor=cur%2Fsor%2B1&limit=3"


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.changes(),
        lambda c: c.changes(cursor="x", from_now=True),
        lambda c: c.changes(cursor="x", since=FROM),
        lambda c: c.changes(since=datetime(2026, 1, 1)),  # noqa: DTZ001 - naive on purpose
        lambda c: c.changes(cursor="x", limit=0),
        lambda c: c.changes(cursor="x", limit=1001),
        lambda c: c.changes(cursor=""),
        lambda c: c.changes(cursor="x" * 4097),
        lambda c: c.records_first(FROM, FROM, limit=10),
        lambda c: c.records_first(TO, FROM, limit=10),
        lambda c: c.records_first(FROM, FROM + timedelta(hours=24, milliseconds=1), limit=10),
        lambda c: c.records_first(FROM, TO + timedelta(microseconds=1), limit=10),
        lambda c: c.records_first(FROM.replace(tzinfo=None), TO, limit=10),
    ],
    ids=[
        "no-start",
        "cursor-and-from-now",
        "cursor-and-since",
        "naive-since",
        "limit-zero",
        "limit-too-big",
        "empty-cursor",
        "cursor-too-long",
        "empty-window",
        "reversed-window",
        "window-over-24h",
        "sub-millisecond-end",
        "naive-start",
    ],
)
def test_invalid_calls_are_refused_before_sending(fake_time, call):
    platform = Platform(fake_time, envelope(CHANGES_PAGE))
    with make_client(fake_time, platform) as client, pytest.raises(ValueError):
        call(client)
    assert platform.requests == []


def test_a_full_24_hour_window_is_allowed(fake_time):
    platform = Platform(fake_time, envelope(RECORDS_PAGE))
    with make_client(fake_time, platform) as client:
        client.records_first(FROM, FROM + timedelta(hours=24), limit=1000)
    assert len(platform.requests) == 1


@pytest.mark.parametrize(
    ("sent", "signed"),
    [
        (b"/with%20space/v1/records", "/with space/v1/records"),
        (b"/v1/records?a=%7E", "/v1/records?a=~"),
        (b"/b/v1/records", "/a/../b/v1/records"),
    ],
    ids=["percent-encoded", "re-encoded-query", "dot-segments"],
)
def test_a_target_httpx_would_rewrite_is_never_sent(sent, signed):
    with pytest.raises(ConfigurationError, match="verbatim"):
        check_sent_verbatim(sent, signed, endpoint="records")


@pytest.mark.parametrize(
    "base_url",
    ["https://platform.example/with space", "https://platform.example/a/../b/%7e"],
    ids=["space", "dots-and-escapes"],
)
def test_the_target_on_the_wire_is_the_one_signed(fake_time, base_url):
    platform = Platform(fake_time, envelope(CHANGES_PAGE))
    with make_client(fake_time, platform, base_url=base_url) as client:
        client.changes(cursor="a b/c", limit=5)
    (request,) = platform.requests
    assert request.headers["X-Signature"] == expected_signature(request)


@pytest.mark.parametrize(
    "base_url",
    [
        "ftp://platform.example",
        "platform.example",
        "https://platform.example/?a=1",
        "https://u:p@h/",
    ],
    ids=["ftp", "relative", "query", "credentials"],
)
def test_invalid_base_urls_are_configuration_errors(base_url):
    with pytest.raises(ConfigurationError):
        PlatformClient(base_url=base_url, merchant_id=MERCHANT, secret=Secret(SECRET))


def test_merchant_id_must_be_a_safe_header_value():
    with pytest.raises(ConfigurationError):
        PlatformClient(base_url="https://h", merchant_id="m\r\nX: y", secret=Secret(SECRET))


def test_ca_bundle_path_is_accepted_and_a_missing_one_is_a_configuration_error():
    PlatformClient(
        base_url="https://h", merchant_id=MERCHANT, secret=Secret(SECRET), verify=certifi.where()
    ).close()
    with pytest.raises(ConfigurationError, match="CA bundle"):
        PlatformClient(
            base_url="https://h", merchant_id=MERCHANT, secret=Secret(SECRET), verify="/nope.pem"
        )


def test_close_is_safe_twice(fake_time):
    platform = Platform(fake_time, envelope(CHANGES_PAGE))
    client = make_client(fake_time, platform)
    client.changes(cursor="c", limit=1)
    client.close()
    client.close()
    assert client.closed
    assert len(platform.requests) == 1


# -- retries -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first",
    [
        httpx.ReadTimeout("read timed out"),
        httpx.ConnectTimeout("connect timed out"),
        httpx.ConnectError("refused"),
        httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
        failure(500, "INTERNAL"),
        failure(502, "BAD_GATEWAY"),
        failure(503, "PROJECTION_LAG"),
        failure(429, "RATE_LIMITED", headers={"Retry-After": "2"}),
        httpx.Response(
            200, content=b'{"data": {"items": [', headers={"Content-Type": "application/json"}
        ),
        envelope({"items": "not a list", "next_cursor": "n", "has_more": False}),
    ],
    ids=[
        "read-timeout",
        "connect-timeout",
        "connection-refused",
        "truncated-body",
        "500",
        "502",
        "503",
        "429",
        "invalid-json",
        "malformed-page",
    ],
)
def test_retryable_failures_are_retried_with_a_fresh_signature(fake_time, first):
    platform = Platform(fake_time, first, envelope(CHANGES_PAGE))
    with make_client(fake_time, platform) as client:
        page = client.changes(cursor="c-1", limit=10)
    assert page.next_cursor == "c-next"
    one, two = platform.requests
    assert one.url.raw_path == two.url.raw_path == b"/v1/record-changes?cursor=c-1&limit=10"
    assert one.headers["X-Timestamp"] != two.headers["X-Timestamp"]
    assert one.headers["X-Signature"] != two.headers["X-Signature"]
    for request in (one, two):
        assert request.headers["X-Signature"] == expected_signature(request)
        assert request.headers["X-Merchant-Id"] == MERCHANT


@pytest.mark.parametrize(
    "first",
    [
        httpx.ReadTimeout("read timed out"),
        failure(500, "INTERNAL"),
        failure(503, "PROJECTION_LAG"),
        failure(429, "RATE_LIMITED", headers={"Retry-After": "2"}),
    ],
    ids=["read-timeout", "500", "503", "429"],
)
def test_a_caller_that_must_not_wait_gets_the_failure_at_once_not_a_retry(fake_time, first):
    """A job on a shared pool (core.waiting): its step runner retries later, with the thread
    given back, so the client neither sleeps a backoff nor sends again."""
    platform = Platform(fake_time, first, envelope(CHANGES_PAGE))
    own_sleeps = []
    with (
        make_client(fake_time, platform, sleep=own_sleeps.append) as client,
        no_waiting(),
        pytest.raises(RetryableError),
    ):
        client.changes(cursor="c-1", limit=10)
    assert len(platform.requests) == 1
    assert own_sleeps == []


class RotatingSecret:
    """A ``SecretProvider`` whose secret rotates after the first ask; counts the asks."""

    def __init__(self, *values):
        self.values = values
        self.asked = 0

    def current(self):
        value = self.values[min(self.asked, len(self.values) - 1)]
        self.asked += 1
        return Secret(value)


def test_a_provider_is_asked_at_every_attempt_so_a_retry_signs_with_the_rotated_secret(
    fake_time,
):
    rotated = "R" * 43
    secrets = RotatingSecret(SECRET, rotated)
    platform = Platform(fake_time, failure(503, "SERVICE_UNAVAILABLE"), envelope(CHANGES_PAGE))
    with make_client(fake_time, platform, secret=secrets) as client:
        client.changes(cursor="c-1", limit=10)
    one, two = platform.requests
    assert one.headers["X-Signature"] == expected_signature(one)
    assert two.headers["X-Signature"] == expected_signature(two, secret=rotated)
    assert secrets.asked == 2


def test_each_attempt_takes_its_own_budget_slot(fake_time):
    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    platform = Platform(fake_time, failure(500, "X"), failure(500, "X"), envelope(CHANGES_PAGE))
    with make_client(fake_time, platform, budget=budget) as client:
        client.changes(cursor="c", limit=1)
    first, second, third = platform.received_at
    assert second - first >= 1.0
    assert third - second >= 1.0


def test_gives_up_after_max_attempts_and_raises_the_last_error(fake_time):
    platform = Platform(fake_time, failure(500, "FIRST"), failure(503, "LAST"))
    with (
        make_client(fake_time, platform, retry=RetryPolicy(max_attempts=4)) as client,
        pytest.raises(ProjectionLagError) as caught,
    ):
        client.changes(cursor="c", limit=1)
    assert caught.value.code == "LAST"
    assert len(platform.requests) == 4


def test_backoff_sleeps_use_full_jitter_under_the_cap(fake_time):
    platform = Platform(fake_time, failure(500, "X"))
    budget = RateBudget(1000, 1.0, clock=fake_time, sleep=lambda s: None)  # never waits
    policy = RetryPolicy(max_attempts=6, base_delay=0.5, max_delay=3.0)
    with (
        make_client(fake_time, platform, budget=budget, retry=policy) as client,
        pytest.raises(ServerError),
    ):
        client.changes(cursor="c", limit=1)
    ceilings = [0.5, 1.0, 2.0, 3.0, 3.0]
    assert len(fake_time.sleeps) == len(ceilings)
    for slept, ceiling in zip(fake_time.sleeps, ceilings, strict=True):
        assert 0 <= slept <= ceiling


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (failure(400, "VALIDATION_FAILED"), RequestRejectedError),
        (failure(404, "RESOURCE_NOT_FOUND"), RequestRejectedError),
        (failure(401, "AUTHENTICATION_FAILED"), AuthenticationError),
        (failure(401, "REQUEST_EXPIRED"), ClockSkewError),
        (
            httpx.Response(302, headers={"Location": "https://evil.example/v1/records"}),
            UnexpectedRedirectError,
        ),
        (httpx.Response(301, headers={"Location": "/v1/records"}), UnexpectedRedirectError),
    ],
    ids=["400", "404", "401-auth", "401-expired", "302-elsewhere", "301-same-host"],
)
def test_4xx_and_redirects_are_neither_retried_nor_followed(fake_time, answer, error):
    platform = Platform(fake_time, answer, envelope(CHANGES_PAGE))
    with make_client(fake_time, platform) as client, pytest.raises(error):
        client.changes(cursor="c", limit=1)
    assert len(platform.requests) == 1
    assert fake_time.sleeps == []


def test_request_expired_tells_the_operator_to_check_the_clock(fake_time):
    platform = Platform(fake_time, failure(401, "REQUEST_EXPIRED", "X-Timestamp out of window"))
    with make_client(fake_time, platform) as client, pytest.raises(ClockSkewError) as caught:
        client.records_next("c", limit=1)
    text = str(caught.value)
    assert "clock" in text
    assert "300 s" in text
    assert "NTP" in text


def test_transport_errors_are_translated_with_their_cause(fake_time):
    platform = Platform(fake_time, httpx.ConnectError("refused"))
    with (
        make_client(fake_time, platform, retry=RetryPolicy(max_attempts=1)) as client,
        pytest.raises(TransportError) as caught,
    ):
        client.changes(cursor="c", limit=1)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert caught.value.status is None


def test_a_command_bounded_by_unreachable_after_stops_retrying_when_the_time_is_up(fake_time):
    """No way to the platform for ``unreachable_after``: the request's retries stop there (they
    would go on to the policy's sixth attempt, about 15 s), and a capabilities read that finds
    no way ends the command at once, naming the cause."""
    platform = Platform(fake_time, httpx.ConnectError("refused"))
    started = fake_time()
    with make_client(fake_time, platform, unreachable_after=2.0, monotonic=fake_time) as client:
        with pytest.raises(TransportError):
            client.changes(cursor="c", limit=1)
        assert 2.0 <= fake_time() - started < 2.5
        tried = len(platform.requests)
        with pytest.raises(PlatformUnreachableError) as caught:
            client.apply_capabilities()
    assert len(platform.requests) == tried + 1  # the time was up: one look, no retries
    assert "could not be reached for 2 s" in str(caught.value)
    assert "RECORDSYNC_UNREACHABLE_TIMEOUT" in str(caught.value)


def test_an_answer_restarts_the_count_of_unreachable_after(fake_time):
    """Unreachable, then an answer, then unreachable again: the bound counts from the last
    answer, not from the first failure."""
    platform = Platform(
        fake_time,
        httpx.ConnectError("refused"),
        envelope(CHANGES_PAGE),
        httpx.ConnectError("refused"),
    )
    with make_client(fake_time, platform, unreachable_after=2.0, monotonic=fake_time) as client:
        client.changes(cursor="c", limit=1)  # one refusal, then the answer
        fake_time.sleep(10.0)
        started = fake_time()
        with pytest.raises(TransportError):
            client.changes(cursor="c", limit=1)
    assert fake_time() - started >= 2.0


def test_truncated_body_is_a_protocol_error(fake_time):
    platform = Platform(fake_time, httpx.RemoteProtocolError("incomplete body"))
    with (
        make_client(fake_time, platform, retry=RetryPolicy(max_attempts=1)) as client,
        pytest.raises(ProtocolError),
    ):
        client.changes(cursor="c", limit=1)


def test_shutdown_during_backoff_propagates(fake_time):
    def sleep(seconds):
        raise ShutdownRequestedError("stop")

    platform = Platform(fake_time, failure(500, "X"))
    with (
        make_client(fake_time, platform, sleep=sleep) as client,
        pytest.raises(ShutdownRequestedError),
    ):
        client.changes(cursor="c", limit=1)
    assert len(platform.requests) == 1


# -- 429 and the shared budget ------------------------------------------------------------------


def test_429_pauses_the_budget_for_every_caller(fake_time):
    budget = RateBudget(10, 1.0, clock=fake_time, sleep=fake_time.sleep)
    platform = Platform(
        fake_time,
        failure(429, "RATE_LIMITED", headers={"Retry-After": "7"}),
        envelope(RECORDS_PAGE),
    )
    own_sleeps = []  # the clients' own backoff sleeps: a 429 must not use them
    no_retry = RetryPolicy(max_attempts=1)
    with (
        make_client(
            fake_time, platform, budget=budget, retry=no_retry, sleep=own_sleeps.append
        ) as tail,
        make_client(fake_time, platform, budget=budget, sleep=own_sleeps.append) as snapshot,
    ):
        with pytest.raises(RateLimitedError):
            tail.changes(cursor="c", limit=1)
        snapshot.records_next("s", limit=1)
        other = budget.acquire(Priority.BACKGROUND)
    paused_at = platform.received_at[0]
    assert platform.received_at[1] >= paused_at + 7
    assert other.acquired_at >= paused_at + 7
    assert own_sleeps == []


def test_a_paused_budget_defers_a_caller_that_must_not_wait_for_the_rest_of_the_pause(
    fake_time,
):
    budget = RateBudget(10, 1.0, clock=fake_time, sleep=fake_time.sleep)
    platform = Platform(
        fake_time, failure(429, "RATE_LIMITED", headers={"Retry-After": "7"}), envelope({})
    )
    with make_client(fake_time, platform, budget=budget) as client, no_waiting():
        with pytest.raises(RateLimitedError):
            client.changes(cursor="c", limit=1)
        fake_time.advance(2)
        with pytest.raises(Deferred) as deferred:
            client.changes(cursor="c", limit=1)
    assert deferred.value.seconds == pytest.approx(5.0)
    assert len(platform.requests) == 1
    assert budget.waiting == 0  # nothing left in the queue


def test_429_retry_waits_retry_after_through_the_budget(fake_time):
    budget = RateBudget(10, 1.0, clock=fake_time, sleep=fake_time.sleep)
    platform = Platform(
        fake_time,
        failure(429, "RATE_LIMITED", headers={"Retry-After": "3"}),
        envelope(CHANGES_PAGE),
    )
    own_sleeps = []
    with make_client(fake_time, platform, budget=budget, sleep=own_sleeps.append) as client:
        client.changes(cursor="c", limit=1)
    assert platform.received_at[1] - platform.received_at[0] == pytest.approx(3.0)
    assert budget.waited_seconds_total == pytest.approx(3.0)
    assert own_sleeps == []


def test_capabilities_are_outside_the_record_budget(fake_time):
    budget = RateBudget(1, 60.0, clock=fake_time, sleep=fake_time.sleep)
    platform = Platform(fake_time, envelope(CAPABILITIES))
    with make_client(fake_time, platform, budget=budget) as client:
        for _ in range(3):
            client.capabilities()
        slot = budget.acquire()
    assert slot.acquired_at == fake_time()
    assert fake_time.sleeps == []


def test_the_capabilities_round_trip_stands_in_until_a_record_request_is_answered(fake_time):
    """Before any page, the capabilities call's round trip is the pace's estimate, so a short
    job starts as wide as its latency needs (sync.snapshot.starting_chains); the
    first records answer then replaces it as it is, never averaged with it."""

    def slow_capabilities(request):
        time.sleep(0.02)  # the network's latency, real time as the client measures it
        return envelope(CAPABILITIES)

    def slow_records(request):
        time.sleep(0.1)  # the network's and the page's own
        return envelope(RECORDS_PAGE)

    platform = Platform(fake_time, slow_capabilities, slow_records)
    with make_client(fake_time, platform) as client:
        assert client.pace().round_trip is None
        client.capabilities()
        estimate = client.pace().round_trip
        client.records_first(created_from=FROM, created_to=TO, limit=10)
        round_trip = client.pace().round_trip
    assert estimate is not None
    assert 0.02 <= estimate < 0.1
    # Averaged, it would be under 0.02 + (0.1 - 0.02) / 4 = 0.04.
    assert round_trip is not None
    assert round_trip >= 0.1


class SlowBody(httpx.SyncByteStream):
    """A body whose reading takes ``seconds`` of the fake clock, after the head came in."""

    def __init__(self, fake_time, body: bytes, seconds: float) -> None:
        self.fake_time, self.body, self.seconds = fake_time, body, seconds

    def __iter__(self):
        self.fake_time.advance(self.seconds)
        yield self.body


def test_the_budget_counts_a_request_from_its_answers_head_not_its_body(fake_time):
    """The head of an answer proves the request arrived; reading a large page's body
    afterwards must not push the next request back (at 0 ms latency that is the spacing)."""
    body = json.dumps({"data": RECORDS_PAGE, "request_id": "req-1"}).encode()

    def slow_body(request):
        return httpx.Response(
            200,
            headers={"Content-Type": "application/json"},
            stream=SlowBody(fake_time, body, 0.2),
        )

    budget = RateBudget(1, 1.0, margin=0.5, clock=fake_time, sleep=fake_time.sleep)
    platform = Platform(fake_time, slow_body)
    with make_client(fake_time, platform, budget=budget) as client:
        client.records_first(created_from=FROM, created_to=TO, limit=10)
        client.records_first(created_from=FROM, created_to=TO, limit=10)
    # Answered (its head) at once, its body read 0.2 s later: the next one a second after
    # the head, not after the body (1.2 s), nor after the margin (1.5 s).
    assert platform.received_at[1] - platform.received_at[0] == pytest.approx(1.0)


def test_429_on_capabilities_makes_only_that_caller_wait(fake_time):
    budget = RateBudget(1, 1.0, clock=fake_time, sleep=fake_time.sleep)
    platform = Platform(
        fake_time,
        failure(429, "RATE_LIMITED", headers={"Retry-After": "4"}),
        envelope(CAPABILITIES),
    )
    with make_client(fake_time, platform, budget=budget) as client:
        client.capabilities()
    assert fake_time.sleeps == [4.0]
    assert budget.acquire().acquired_at == fake_time()


# -- capabilities -------------------------------------------------------------------------------


def test_apply_capabilities_resizes_the_budget(fake_time):
    budget = RateBudget(2, 1.0, clock=fake_time, sleep=fake_time.sleep)
    platform = Platform(fake_time, envelope(CAPABILITIES))
    with make_client(fake_time, platform, budget=budget) as client:
        limits = client.apply_capabilities()
    assert (limits.record_requests, limits.record_seconds, limits.max_page_size) == (5, 2, 500)
    assert (budget.requests, budget.seconds) == (5, 2.0)
    assert platform.requests[0].url.raw_path == b"/v1/capabilities"
    assert platform.requests[0].headers["X-Signature"] == expected_signature(platform.requests[0])


@pytest.mark.parametrize(
    "answer",
    [
        failure(500, "INTERNAL"),
        failure(404, "RESOURCE_NOT_FOUND"),
        envelope({"limits": {"record_requests": 0, "record_seconds": 1}}),
        httpx.ConnectError("refused"),
    ],
    ids=["server-error", "not-found", "bad-limits", "unreachable"],
)
def test_apply_capabilities_falls_back_to_the_default_and_warns(fake_time, answer):
    budget = RateBudget(9, 9.0, clock=fake_time, sleep=fake_time.sleep)
    platform = Platform(fake_time, answer)
    with (
        make_client(
            fake_time, platform, budget=budget, retry=RetryPolicy(max_attempts=2)
        ) as client,
        capture_logs() as logs,
    ):
        limits = client.apply_capabilities()
    assert limits == DEFAULT_LIMITS
    assert (budget.requests, budget.seconds) == (2, 1.0)
    (warning,) = [e for e in logs if e["event"] == "capabilities_unavailable"]
    assert warning["log_level"] == "warning"
    assert warning["record_requests"] == 2


def test_apply_capabilities_keeps_the_last_known_limits_on_a_later_failure(fake_time):
    budget = RateBudget(2, 1.0, clock=fake_time, sleep=fake_time.sleep)
    platform = Platform(fake_time, envelope(CAPABILITIES), failure(500, "X"))
    with make_client(
        fake_time, platform, budget=budget, retry=RetryPolicy(max_attempts=1)
    ) as client:
        client.apply_capabilities()
        limits = client.apply_capabilities()
    assert limits.record_requests == 5
    assert (budget.requests, budget.seconds) == (5, 2.0)


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (failure(401, "AUTHENTICATION_FAILED"), AuthenticationError),
        (failure(401, "REQUEST_EXPIRED"), ClockSkewError),
    ],
    ids=["wrong-secret", "clock-skew"],
)
def test_apply_capabilities_lets_credential_and_clock_errors_through(fake_time, answer, error):
    with make_client(fake_time, Platform(fake_time, answer)) as client, pytest.raises(error):
        client.apply_capabilities()


# -- observability and secrecy ------------------------------------------------------------------


class RecordingObserver:
    def __init__(self):
        self.events = []

    def on_response(self, endpoint, status, code, seconds, request_id):
        self.events.append(("response", endpoint, status, code, request_id))

    def on_retry(self, endpoint, reason, delay):
        self.events.append(("retry", endpoint, reason))

    def on_rate_limited(self, endpoint, retry_after):
        self.events.append(("rate_limited", endpoint, retry_after))


def test_observer_sees_every_attempt_retry_and_rate_limit(fake_time):
    observer = RecordingObserver()
    platform = Platform(
        fake_time,
        httpx.ReadTimeout("slow"),
        failure(429, "RATE_LIMITED", request_id="r-429", headers={"Retry-After": "1"}),
        envelope(CHANGES_PAGE, request_id="r-ok"),
    )
    with make_client(fake_time, platform, observer=observer) as client:
        client.changes(cursor="c", limit=1)
    assert observer.events == [
        ("response", "record-changes", None, None, None),
        ("retry", "record-changes", "transport_error"),
        ("response", "record-changes", 429, "RATE_LIMITED", "r-429"),
        ("rate_limited", "record-changes", 1.0),
        ("retry", "record-changes", "rate_limited"),
        ("response", "record-changes", 200, None, "r-ok"),
    ]


def test_retry_events_are_logged_with_fields(fake_time):
    platform = Platform(fake_time, failure(503, "LAG", request_id="r-503"), envelope(CHANGES_PAGE))
    with make_client(fake_time, platform) as client, capture_logs() as logs:
        client.changes(cursor="c", limit=1)
    (retry,) = [e for e in logs if e["event"] == "platform_retry"]
    assert retry["endpoint"] == "record-changes"
    assert retry["reason"] == "projection_lag"
    assert retry["attempt"] == 1
    assert retry["request_id"] == "r-503"
    assert retry["delay"] >= 0


def test_the_secret_and_signatures_never_leak(fake_time):
    signatures = []
    answers = [
        httpx.ConnectError(f"refused {SECRET}"),
        httpx.ReadTimeout(f"timeout {SECRET}"),
        httpx.RemoteProtocolError(f"bad {SECRET}"),
        failure(429, "RATE_LIMITED"),
        failure(500, "INTERNAL"),
        failure(401, "REQUEST_EXPIRED"),
        failure(401, "AUTHENTICATION_FAILED"),
        httpx.Response(302, headers={"Location": "https://x/"}),
        httpx.Response(200, content=b"garbage", headers={"Content-Type": "text/html"}),
    ]
    texts = []
    with capture_logs() as logs:
        for answer in answers:
            platform = Platform(fake_time, answer)
            with make_client(fake_time, platform, retry=RetryPolicy(max_attempts=2)) as client:
                texts.append(repr(client))
                texts.append(str(client))
                with pytest.raises(Exception) as caught:
                    client.changes(cursor="c", limit=1)
                texts.extend([str(caught.value), repr(caught.value)])
                signatures.extend(r.headers["X-Signature"] for r in platform.requests)
        with make_client(fake_time, Platform(fake_time, failure(500, "X"))) as client:
            client.apply_capabilities()
    log_text = repr(logs)
    assert logs, "the failures above must have been logged"
    assert SECRET not in log_text
    for text in texts:
        assert SECRET not in text
    for signature in signatures:
        assert signature not in log_text
        for text in texts:
            assert signature not in text


# -- the lease (self-fencing reads) ----------------------------------------------------


def test_nothing_is_sent_for_a_merchant_whose_lease_is_not_confirmed(fake_time):
    platform = Platform(fake_time, envelope(CHANGES_PAGE))
    with make_client(fake_time, platform) as client:
        client.hold_under(lambda: False)
        with pytest.raises(LeaseUnconfirmedError, match=MERCHANT):
            client.changes(cursor="c-1", limit=10)
        assert platform.requests == []
        client.hold_under(lambda: True)
        client.changes(cursor="c-1", limit=10)
    assert len(platform.requests) == 1


def test_a_lease_lost_while_waiting_for_the_budget_sends_nothing_and_gives_the_slot_back(
    fake_time,
):
    budget = RateBudget(1, 1.0, margin=0.0, clock=fake_time, sleep=fake_time.sleep)
    budget.acquire().stamp()  # the window is spent: the next caller waits a second
    confirmed = iter([True, False])  # before the wait, and after it
    platform = Platform(fake_time, envelope(CHANGES_PAGE))
    with make_client(fake_time, platform, budget=budget) as client:
        client.hold_under(lambda: next(confirmed))
        with pytest.raises(LeaseUnconfirmedError):
            client.changes(cursor="c-1", limit=10)
    assert platform.requests == []
    assert budget.acquire().acquired_at == pytest.approx(fake_time())  # the place came back


# -- the largest answer read ----------------------------------------------------------


class CountedStream(httpx.SyncByteStream):
    """An answer body of ``chunks`` chunks of ``size`` bytes, counting what was read of it."""

    def __init__(self, chunks, size=1024):
        self.chunks, self.size, self.read = chunks, size, 0

    def __iter__(self):
        for _ in range(self.chunks):
            self.read += 1
            yield b" " * self.size


def test_a_body_beyond_the_limit_is_refused_while_it_streams_in(fake_time):
    stream = CountedStream(chunks=10_000)  # 10 MiB, never declared
    platform = Platform(fake_time, lambda _r: httpx.Response(200, stream=stream))
    client = make_client(
        fake_time, platform, retry=RetryPolicy(max_attempts=1), max_response_bytes=64 * 1024
    )
    with client, pytest.raises(ResponseTooLargeError) as caught:
        client.changes(cursor="c")
    assert stream.read == 65  # stopped at the chunk that passed 64 KiB: the rest never read
    assert (caught.value.limit, caught.value.size) == (65536, 66560)
    assert str(caught.value) == (
        "answer refused: its body passed the 65536 bytes read at most (66560 bytes received "
        "when it was stopped) (endpoint=record-changes)"
    )
    assert isinstance(caught.value, ProtocolError)  # retried within the policy's attempts


def test_a_declared_length_beyond_the_limit_is_refused_before_the_body(fake_time):
    stream = CountedStream(chunks=100)
    platform = Platform(
        fake_time,
        lambda _r: httpx.Response(200, headers={"Content-Length": "102400"}, stream=stream),
    )
    client = make_client(
        fake_time, platform, retry=RetryPolicy(max_attempts=3), max_response_bytes=1000
    )
    with client, pytest.raises(ResponseTooLargeError) as caught:
        client.records_first(FROM, TO, limit=10)
    assert stream.read == 0
    assert len(platform.requests) == 3  # a bounded retry, then the error
    assert caught.value.size == 102400
    assert "its Content-Length is 102400 bytes, more than the 1000 bytes" in str(caught.value)


def test_a_page_within_the_limit_is_read_whole(fake_time):
    platform = Platform(fake_time, envelope(CHANGES_PAGE))
    limit = len(json.dumps({"data": CHANGES_PAGE, "request_id": "req-1"}).encode())
    with make_client(fake_time, platform, max_response_bytes=limit) as client:
        assert client.changes(cursor="c").next_cursor == "c-next"
