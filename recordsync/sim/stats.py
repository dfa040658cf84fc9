"""What the simulator saw: counts tests assert on (the client must never cause a violation).

Kept per merchant (each merchant has its own ``StatsRecorder``) and added up for the totals.
``EventStats`` counts the other direction: the round-end notifications the simulator sent
to the merchant and what the merchant's receiver answered (``SimStats.events``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

NO_RESPONSE: Final = 0  # the status recorded for a connection reset on purpose

# Fault kinds, as counted in ``SimStats.faults_injected``.
PROJECTION_LAG: Final = "projection_lag"
RATE_LIMITED: Final = "rate_limited"
SERVER_ERROR: Final = "server_error"
CONNECTION_RESET: Final = "connection_reset"
LATENCY: Final = "latency"
DUPLICATES: Final = "duplicates"
EXTRA_FIELDS: Final = "extra_fields"
MALFORMED: Final = "malformed"
BAD_RECORDS: Final = "bad_records"
REFUSED: Final = "refused"  # an optional endpoint refused to the merchant (``Refusal``)
FAULT_KINDS: Final = (
    PROJECTION_LAG,
    RATE_LIMITED,
    SERVER_ERROR,
    CONNECTION_RESET,
    LATENCY,
    DUPLICATES,
    EXTRA_FIELDS,
    MALFORMED,
    BAD_RECORDS,
    REFUSED,
)


def _empty() -> Mapping[str, int]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class EventStats:
    """Round-end notifications of one merchant (or all), a frozen snapshot.

    ``announced``: events queued for delivery; ``sent``: attempts made (first tries and
    retries); ``retried``: attempts after an event's first; ``delivered``: events the
    receiver accepted cleanly; ``given_up``: events abandoned after the last retry;
    ``dropped``: round ends never queued because the queue was full.  ``replies`` counts
    attempts by HTTP status, ``failures`` attempts that got no reply ("timeout",
    "connection"), ``deviations`` replies by each way they depart from the spec (the kinds
    are ``recordsync.sim.replies.DEVIATION_KINDS``; a reply can count under several).
    """

    announced: int = 0
    sent: int = 0
    retried: int = 0
    delivered: int = 0
    given_up: int = 0
    dropped: int = 0
    replies: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    failures: Mapping[str, int] = field(default_factory=_empty)
    deviations: Mapping[str, int] = field(default_factory=_empty)

    @property
    def pending(self) -> int:
        """Events queued, in flight or waiting for a retry."""
        return self.announced - self.delivered - self.given_up

    def deviation(self, kind: str) -> int:
        return self.deviations.get(kind, 0)

    @property
    def total_deviations(self) -> int:
        return sum(self.deviations.values())

    @classmethod
    def combined(cls, parts: Iterable[EventStats]) -> EventStats:
        counts: Counter[str] = Counter()
        replies: Counter[int] = Counter()
        failures: Counter[str] = Counter()
        deviations: Counter[str] = Counter()
        for part in parts:
            for name in _EVENT_COUNTS:
                counts[name] += getattr(part, name)
            replies.update(part.replies)
            failures.update(part.failures)
            deviations.update(part.deviations)
        return cls(
            **{name: counts[name] for name in _EVENT_COUNTS},
            replies=MappingProxyType(dict(replies)),
            failures=MappingProxyType(dict(failures)),
            deviations=MappingProxyType(dict(deviations)),
        )


_EVENT_COUNTS: Final = ("announced", "sent", "retried", "delivered", "given_up", "dropped")


class EventStatsRecorder:
    """One merchant's ``EventStats`` as they happen (the sender's threads write, tests read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._replies: Counter[int] = Counter()
        self._failures: Counter[str] = Counter()
        self._deviations: Counter[str] = Counter()

    def count(self, name: str) -> None:
        assert name in _EVENT_COUNTS, name
        with self._lock:
            self._counts[name] += 1

    def reply(self, status: int, deviations: Iterable[str]) -> None:
        with self._lock:
            self._replies[status] += 1
            self._deviations.update(deviations)

    def failure(self, kind: str) -> None:
        with self._lock:
            self._failures[kind] += 1

    def snapshot(self) -> EventStats:
        with self._lock:
            return EventStats(
                **{name: self._counts[name] for name in _EVENT_COUNTS},
                replies=MappingProxyType(dict(self._replies)),
                failures=MappingProxyType(dict(self._failures)),
                deviations=MappingProxyType(dict(self._deviations)),
            )


@dataclass(frozen=True, slots=True)
class SimStats:
    """A frozen snapshot.  ``requests`` is keyed by (endpoint, HTTP status)."""

    requests: Mapping[tuple[str, int], int] = field(default_factory=lambda: MappingProxyType({}))
    auth_failures: int = 0
    rate_limit_violations: int = 0
    faults_injected: Mapping[str, int] = field(default_factory=_empty)
    max_requests_in_window: int = 0
    events: EventStats = EventStats()
    # Requests over the query limit (the catalogue's own, apart from the record limit).
    query_limit_violations: int = 0

    def count(self, endpoint: str, status: int | None = None) -> int:
        return sum(
            number
            for (name, code), number in self.requests.items()
            if name == endpoint and (status is None or code == status)
        )

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def faults(self, kind: str) -> int:
        return self.faults_injected.get(kind, 0)

    @classmethod
    def combined(cls, parts: Iterable[SimStats]) -> SimStats:
        """The sum of several snapshots (the simulator's totals over its merchants).

        Every merchant has its own rate-limit window, so the busiest window is the largest
        of theirs, not a sum.
        """
        requests: Counter[tuple[str, int]] = Counter()
        faults: Counter[str] = Counter()
        auth_failures = violations = max_in_window = query_violations = 0
        parts = list(parts)
        for part in parts:
            query_violations += part.query_limit_violations
            requests.update(part.requests)
            faults.update(part.faults_injected)
            auth_failures += part.auth_failures
            violations += part.rate_limit_violations
            max_in_window = max(max_in_window, part.max_requests_in_window)
        return cls(
            requests=MappingProxyType(dict(requests)),
            auth_failures=auth_failures,
            rate_limit_violations=violations,
            faults_injected=MappingProxyType(dict(faults)),
            max_requests_in_window=max_in_window,
            events=EventStats.combined(part.events for part in parts),
            query_limit_violations=query_violations,
        )


class StatsRecorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, int]] = Counter()
        self._faults: Counter[str] = Counter()
        self._auth_failures = 0
        self._violations = 0
        self._query_violations = 0

    def request(self, endpoint: str, status: int) -> None:
        with self._lock:
            self._requests[endpoint, status] += 1

    def auth_failure(self) -> None:
        with self._lock:
            self._auth_failures += 1

    def violation(self) -> None:
        with self._lock:
            self._violations += 1

    def query_violation(self) -> None:
        with self._lock:
            self._query_violations += 1

    def fault(self, kind: str) -> None:
        with self._lock:
            self._faults[kind] += 1

    def snapshot(self, max_requests_in_window: int, events: EventStats | None = None) -> SimStats:
        with self._lock:
            return SimStats(
                requests=MappingProxyType(dict(self._requests)),
                auth_failures=self._auth_failures,
                rate_limit_violations=self._violations,
                faults_injected=MappingProxyType(dict(self._faults)),
                max_requests_in_window=max_requests_in_window,
                events=EventStats() if events is None else events,
                query_limit_violations=self._query_violations,
            )
