"""The simulator's settings: one frozen object, checked once, every problem reported at once.

``SimConfig`` says what the platform looks like (merchant, history, limits, retention);
``FaultRates`` says how badly it behaves.  Faults are kept apart because tests change them at
run time (``Simulator.set_faults``) to let a sync converge after a storm.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from recordsync.core.errors import ConfigurationError

DEMO_MERCHANT_ID = "demo-merchant"
# A fixed, public, 43-character demo secret (spec: Authentication, a 43-character string).
# It protects nothing: the simulator only ever listens on the machine it runs on.
DEMO_SECRET = "sim-demo-secret-0123456789-abcdefghijklmnop"  # noqa: S105
DEFAULT_SEED = 1

SPEC_MAX_PAGE_SIZE = 1000  # spec: Conventions, Pagination (1-1000)


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Probabilities (0..1) of each injected fault on records and record-changes requests.

    ``latency_ms`` / ``latency_jitter_ms`` add ``latency_ms + uniform(0, jitter)`` to a fraction
    ``latency`` of requests (all of them by default, once a latency is set).
    ``clock_skew_seconds`` offsets the simulator's clock from real time, to provoke
    REQUEST_EXPIRED (spec: Limits, clock skew 300 s).
    """

    projection_lag: float = 0.0  # 503, retryable
    rate_limited: float = 0.0  # injected 429 with Retry-After (not a violation)
    server_error: float = 0.0  # 500
    connection_reset: float = 0.0  # the socket is closed with RST, no response
    duplicates: float = 0.0  # a changes page also carries older changes again
    extra_fields: float = 0.0  # unknown fields in envelope, data, items and records
    malformed: float = 0.0  # invalid JSON, truncated body or wrong content type
    bad_records: float = 0.0  # one item of the page has a malformed amount or lacks a field
    latency: float = 1.0
    latency_ms: float = 0.0
    latency_jitter_ms: float = 0.0
    clock_skew_seconds: float = 0.0

    def problems(self) -> list[str]:
        found = []
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in {"latency_ms", "latency_jitter_ms"}:
                if value < 0:
                    found.append(f"faults.{item.name} must be >= 0, got {value}")
            elif item.name != "clock_skew_seconds" and not 0.0 <= value <= 1.0:
                found.append(f"faults.{item.name} must be a rate in [0, 1], got {value}")
        return found

    def check(self) -> FaultRates:
        problems = self.problems()
        if problems:
            raise ConfigurationError("invalid fault rates: " + "; ".join(problems))
        return self


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything the simulator needs; defaults make a demo quick (3 days x 2000 rounds)."""

    merchant_id: str = DEMO_MERCHANT_ID
    secret: str = field(default=DEMO_SECRET, repr=False)
    # Accepted as well during an announced key rotation (spec: Authentication, Key rotation).
    previous_secret: str | None = field(default=None, repr=False)
    seed: int = DEFAULT_SEED
    history_days: float = 3.0
    rounds_per_day: int = 2000
    live_rate: float = 0.0  # live events per second while ``start_live()`` runs
    record_requests: int = 2
    record_seconds: int = 1
    max_page_size: int = SPEC_MAX_PAGE_SIZE
    max_body_bytes: int = 1024 * 1024
    cursor_ttl_seconds: float = 86400.0
    retention_seconds: float = 90 * 86400.0
    wallet_mode: str = "TRANSFER"
    faults: FaultRates = FaultRates()

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigurationError("invalid simulator configuration: " + "; ".join(problems))

    def problems(self) -> list[str]:
        checks = (
            (bool(self.merchant_id), "merchant_id must not be empty"),
            (bool(self.secret), "secret must not be empty"),
            (self.history_days >= 0, f"history_days must be >= 0, got {self.history_days}"),
            (self.rounds_per_day >= 0, f"rounds_per_day must be >= 0, got {self.rounds_per_day}"),
            (self.live_rate >= 0, f"live_rate must be >= 0, got {self.live_rate}"),
            (
                self.record_requests >= 1 and self.record_seconds >= 1,
                "record_requests and record_seconds must both be >= 1",
            ),
            (
                1 <= self.max_page_size <= SPEC_MAX_PAGE_SIZE,
                f"max_page_size must be in 1..1000, got {self.max_page_size}",
            ),
            (self.max_body_bytes >= 1, "max_body_bytes must be >= 1"),
            (
                self.cursor_ttl_seconds > 0 and self.retention_seconds > 0,
                "cursor_ttl_seconds and retention_seconds must be > 0",
            ),
            (
                self.wallet_mode in {"TRANSFER", "SEAMLESS"},
                f"wallet_mode must be TRANSFER or SEAMLESS, got {self.wallet_mode!r}",
            ),
        )
        return [message for ok, message in checks if not ok] + self.faults.problems()
