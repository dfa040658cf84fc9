"""When and how long to wait before sending the same request again.  Pure: no I/O, no clock.

What may be retried is decided by the exception class alone (``recordsync.core.errors``):
``RetryableError`` and its subclasses (timeouts, resets, 5xx, the projection-lag 503, 429,
malformed answers).  Everything else is raised at once.  The platform's ``error.retryable``
is not consulted: the spec says it "only says the transport may be retried" (Errors), which is
what the class already encodes, and branching on one source keeps the behaviour predictable.

Backoff is capped exponential with *full* jitter, ``uniform(0, min(cap, base * 2**n))`` for the
n-th retry (n from 0): several threads or processes that failed together spread out instead
of hitting the platform again in lockstep.

A 429 is different: the limit is shared by every caller of the merchant, so its Retry-After
pauses the whole rate budget (``RetryDecision.pause``) rather than only this caller, and no
extra jitter is added; the budget already spaces the callers out when the pause ends.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

from recordsync.core.errors import (
    ProjectionLagError,
    ProtocolError,
    RateLimitedError,
    RetryableError,
    ServerError,
    TransportError,
)

# Beyond this exponent the cap has long been reached; it keeps 2**n a small number.
_MAX_EXPONENT: Final = 62

# Retry reasons for logs and metrics, most specific class first.
_REASONS: Final[tuple[tuple[type[RetryableError], str], ...]] = (
    (RateLimitedError, "rate_limited"),
    (ProjectionLagError, "projection_lag"),
    (ServerError, "server_error"),
    (ProtocolError, "protocol_error"),
    (TransportError, "transport_error"),
)


def retry_reason(error: BaseException) -> str:
    """A stable label for why a request failed (log field and metric label)."""
    for cls, reason in _REASONS:
        if isinstance(error, cls):
            return reason
    return "retryable" if isinstance(error, RetryableError) else "not_retryable"


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    reason: str
    delay: float = 0.0  # this caller sleeps that long before its next attempt
    pause: float = 0.0  # the shared budget pauses that long (every caller waits)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_attempts`` counts every attempt, the first one included."""

    max_attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if not self.base_delay >= 0 or not self.max_delay >= 0:
            raise ValueError("base_delay and max_delay must be >= 0")

    def backoff(self, retry: int, rng: random.Random) -> float:
        """Full-jitter delay before the ``retry``-th retry (0 for the first)."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** min(max(retry, 0), _MAX_EXPONENT))
        return rng.uniform(0, ceiling)

    def decide(self, error: BaseException, attempt: int, rng: random.Random) -> RetryDecision:
        """What to do after attempt number ``attempt`` (1-based) failed with ``error``.

        A 429 always asks for the budget pause, even when no retry is left: the other
        callers must hold back whatever this caller does next.
        """
        reason = retry_reason(error)
        pause = error.retry_after if isinstance(error, RateLimitedError) else 0.0
        if not isinstance(error, RetryableError) or attempt >= self.max_attempts:
            return RetryDecision(retry=False, reason=reason, pause=pause)
        if isinstance(error, RateLimitedError):
            return RetryDecision(retry=True, reason=reason, pause=pause)
        return RetryDecision(retry=True, reason=reason, delay=self.backoff(attempt - 1, rng))
