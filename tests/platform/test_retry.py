"""Retry policy: capped exponential backoff with full jitter; the class decides (spec: Errors)."""

import random

import pytest

from recordsync.core.errors import (
    AuthenticationError,
    ClockSkewError,
    CursorExpiredError,
    ProjectionLagError,
    ProtocolError,
    RateLimitedError,
    RequestRejectedError,
    ServerError,
    TransportError,
    UnexpectedRedirectError,
)
from recordsync.platform.retry import RetryPolicy, retry_reason

E = "records"

RETRYABLE = [
    (TransportError("t", endpoint=E), "transport_error"),
    (ServerError("s", endpoint=E, status=500), "server_error"),
    (ProjectionLagError("p", endpoint=E, status=503), "projection_lag"),
    (ProtocolError("p", endpoint=E), "protocol_error"),
]

FATAL = [
    AuthenticationError("a", endpoint=E, status=401),
    ClockSkewError("c", endpoint=E, status=401),
    RequestRejectedError("r", endpoint=E, status=400),
    UnexpectedRedirectError("u", endpoint=E, status=302),
    CursorExpiredError("x", endpoint=E, status=410),
    ValueError("not ours"),
]


@pytest.mark.parametrize(("error", "reason"), RETRYABLE, ids=[reason for _, reason in RETRYABLE])
def test_retryable_errors_are_retried_with_jittered_backoff(error, reason):
    decision = RetryPolicy().decide(error, 1, random.Random(1))
    assert decision.retry
    assert decision.reason == reason
    assert 0 <= decision.delay <= 0.5
    assert decision.pause == 0


@pytest.mark.parametrize("error", FATAL, ids=[type(e).__name__ for e in FATAL])
def test_other_errors_are_never_retried(error):
    decision = RetryPolicy().decide(error, 1, random.Random(1))
    assert not decision.retry
    assert decision.delay == 0


def test_the_last_attempt_is_not_retried():
    policy = RetryPolicy(max_attempts=3)
    error = ServerError("s", endpoint=E)
    assert [policy.decide(error, n, random.Random()).retry for n in (1, 2, 3, 4)] == [
        True,
        True,
        False,
        False,
    ]


def test_rate_limit_pauses_the_budget_instead_of_sleeping_alone():
    error = RateLimitedError("slow down", endpoint=E, retry_after=7.0)
    decision = RetryPolicy().decide(error, 1, random.Random(1))
    assert (decision.retry, decision.reason, decision.delay, decision.pause) == (
        True,
        "rate_limited",
        0.0,
        7.0,
    )


def test_rate_limit_on_the_last_attempt_still_asks_for_the_pause():
    error = RateLimitedError("slow down", endpoint=E, retry_after=3.0)
    decision = RetryPolicy(max_attempts=1).decide(error, 1, random.Random(1))
    assert not decision.retry
    assert decision.pause == 3.0


class RecordingRandom(random.Random):
    def __init__(self):
        super().__init__(0)
        self.ceilings = []

    def uniform(self, a, b):
        self.ceilings.append((a, b))
        return b


def test_backoff_is_full_jitter_over_a_capped_exponential():
    rng = RecordingRandom()
    policy = RetryPolicy(max_attempts=10, base_delay=0.5, max_delay=5.0)
    delays = [policy.decide(ServerError("s", endpoint=E), n, rng).delay for n in range(1, 10)]
    assert rng.ceilings == [(0, c) for c in (0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0]


def test_backoff_jitter_spreads_over_the_whole_range():
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0)
    rng = random.Random(42)
    samples = [policy.backoff(3, rng) for _ in range(2000)]
    assert min(samples) < 0.5
    assert max(samples) > 7.5
    assert all(0 <= s <= 8.0 for s in samples)


def test_huge_attempt_numbers_stay_capped():
    assert RetryPolicy(max_delay=2.0).backoff(10_000, random.Random(0)) <= 2.0


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"base_delay": -1}, {"max_delay": float("nan")}],
    ids=["zero-attempts", "negative-base", "nan-cap"],
)
def test_invalid_policies_are_refused(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_reason_of_a_non_platform_error():
    assert retry_reason(KeyError("x")) == "not_retryable"
