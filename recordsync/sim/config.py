"""The simulator's settings: one frozen object, checked once, every problem reported at once.

``SimConfig`` says what the platform looks like (merchants, history, limits, retention);
``MerchantProfile`` describes one more merchant served beside the first (its own id, secret,
history, live traffic, rate limit and faults); ``FaultRates`` says how badly the platform
behaves towards a merchant, and ``Refusal`` how it refuses one of the optional endpoints.
Faults are kept apart because tests change them at run time (``Simulator.set_faults``) to let
a sync converge after a storm.

The first merchant is described by ``SimConfig``'s own fields, as it always was, so a
single-merchant configuration reads exactly as before; ``SimConfig.merchants`` adds the others
and ``SimConfig.with_merchants(n)`` derives ``n`` of them for demos and tests.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field, fields, replace

from recordsync.core.errors import ConfigurationError
from recordsync.sim.added_fields import AddedField

DEMO_MERCHANT_ID = "demo-merchant"
# A fixed, public, 43-character demo secret (spec: Authentication, a 43-character string).
# It protects nothing: the simulator only ever listens on the machine it runs on.
DEMO_SECRET = "sim-demo-secret-0123456789-abcdefghijklmnop"  # noqa: S105
DEFAULT_SEED = 1
# One merchant's defaults, shared by SimConfig (the first merchant) and MerchantProfile.
DEFAULT_HISTORY_DAYS = 3.0
DEFAULT_ROUNDS_PER_DAY = 2000
DEFAULT_RECORD_REQUESTS = 2  # spec: Limits, the shared record rate limit
DEFAULT_RECORD_SECONDS = 1

SPEC_MAX_PAGE_SIZE = 1000  # spec: Conventions, Pagination (1-1000)

# The endpoints a sync can live without: the limits have the spec's defaults until
# capabilities answer, and the catalogue only names what records identify.
OPTIONAL_ENDPOINTS = ("capabilities", "games")


def _events_url_problems(name: str, url: str | None) -> list[str]:
    """A merchant URL is an origin (spec: "an HTTPS origin only"; http is allowed for loopback)."""
    if url is None:
        return []
    scheme, _, rest = url.partition("://")
    if scheme not in {"http", "https"} or not rest or "?" in url or "#" in url:
        return [f"{name} must be an http(s) URL with no query or fragment, got {url!r}"]
    return []


def derived_secret(seed: int, merchant_id: str) -> str:
    """A 43-character secret (spec: Authentication) that the seed and the id always give again.

    For derived demo merchants only: anyone who knows the seed can compute it, so it protects
    nothing, which is why the CLI may print it.  43 characters is exactly the unpadded
    base64url of a SHA-256 digest.
    """
    digest = hashlib.sha256(f"recordsync-sim:{seed}:{merchant_id}:secret".encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Probabilities (0..1) of each injected fault on records and record-changes requests.

    ``latency_ms`` / ``latency_jitter_ms`` add ``latency_ms + uniform(0, jitter)`` to a fraction
    ``latency`` of requests (all of them by default, once a latency is set).
    ``records_latency_ms`` adds that much to every ``records`` request alone: a slow snapshot
    and a slow drift check beside a change stream that answers at once.
    ``clock_skew_seconds`` offsets the simulator's clock from real time, to provoke
    REQUEST_EXPIRED (spec: Limits, clock skew 300 s).
    """

    projection_lag: float = 0.0  # 503, retryable
    rate_limited: float = 0.0  # injected 429 with Retry-After (not a violation)
    server_error: float = 0.0  # 500
    connection_reset: float = 0.0  # the socket is closed with RST, no response
    duplicates: float = 0.0  # a changes page also carries older changes again
    extra_fields: float = 0.0  # unknown members around the records: envelope, data, change items
    malformed: float = 0.0  # invalid JSON, truncated body or wrong content type
    bad_records: float = 0.0  # one item of the page has a malformed amount or lacks a field
    latency: float = 1.0
    latency_ms: float = 0.0
    latency_jitter_ms: float = 0.0
    records_latency_ms: float = 0.0
    clock_skew_seconds: float = 0.0

    def problems(self) -> list[str]:
        found = []
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in {"latency_ms", "latency_jitter_ms", "records_latency_ms"}:
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
class Refusal:
    """How the platform refuses an optional endpoint to one merchant: an error answer, a
    stall before answering, or a stall and then the error.

    A platform that has not granted the catalogue (spec: Scopes, ``catalog:read``) answers
    403, an older one without it 404; one in trouble answers 500 or slowly.  Refused
    requests are not counted in any rate limit: the platform turned them away first.
    """

    status: int | None = None
    stall_seconds: float = 0.0

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigurationError("invalid refusal: " + "; ".join(problems))

    def problems(self) -> list[str]:
        found = []
        if self.status is None and self.stall_seconds <= 0:
            found.append("a refusal needs an error status, a stall, or both")
        if self.status is not None and not 400 <= self.status <= 599:  # noqa: PLR2004
            found.append(f"the status must be a 4xx or 5xx, got {self.status}")
        if not 0 <= self.stall_seconds < float("inf"):
            found.append(f"the stall must be >= 0 seconds, got {self.stall_seconds}")
        return found

    @classmethod
    def parse(cls, text: str) -> Refusal:
        """``404``, ``stall:10`` or ``stall:10,500`` (stall 10 s, then answer 500)."""
        status: int | None = None
        stall = 0.0
        try:
            for part in text.split(","):
                kind, _, value = part.strip().partition(":")
                if kind == "stall":
                    stall = float(value)
                else:
                    status = int(kind)
        except ValueError:
            raise ConfigurationError(
                f"a refusal is a status (404), a stall (stall:10) or both (stall:10,500), "
                f"got {text!r}"
            ) from None
        return cls(status=status, stall_seconds=stall)


Refusals = tuple[tuple[str, Refusal], ...]  # (endpoint, how), one per endpoint refused


def _refusal_problems(refusals: Refusals) -> list[str]:
    endpoints = [endpoint for endpoint, _ in refusals]
    return [
        f"only the optional endpoints {', '.join(OPTIONAL_ENDPOINTS)} can be refused, "
        f"not {endpoint!r}"
        for endpoint in endpoints
        if endpoint not in OPTIONAL_ENDPOINTS
    ] + [
        f"{endpoint!r} is refused twice"
        for endpoint in sorted(set(endpoints))
        if endpoints.count(endpoint) > 1
    ]


def with_refusal(refusals: Refusals, endpoint: str, refusal: Refusal | None) -> Refusals:
    """``refusals`` with ``endpoint`` refused as told (None: served again)."""
    kept = tuple(item for item in refusals if item[0] != endpoint)
    return kept if refusal is None else (*kept, (endpoint, refusal))


@dataclass(frozen=True, slots=True)
class MerchantProfile:
    """One more merchant in the same simulator, with everything that is its own.

    The platform keeps a secret, a history, a rate-limit window and cursors per merchant
    (spec: Authentication, Limits); page size, body size, cursor validity, retention and the
    wallet mode stay platform-wide in ``SimConfig``.
    """

    merchant_id: str
    secret: str = field(repr=False)
    # Accepted as well during an announced key rotation (spec: Authentication, Key rotation).
    previous_secret: str | None = field(default=None, repr=False)
    seed: int = DEFAULT_SEED
    history_days: float = DEFAULT_HISTORY_DAYS
    rounds_per_day: int = DEFAULT_ROUNDS_PER_DAY
    live_rate: float = 0.0  # live events per second while ``start_live()`` runs
    record_requests: int = DEFAULT_RECORD_REQUESTS
    record_seconds: int = DEFAULT_RECORD_SECONDS
    faults: FaultRates = FaultRates()
    # This merchant's URL for round-end notifications; None: ``SimConfig.events_url``.
    events_url: str | None = None
    refusals: Refusals = ()
    # Members the platform adds to this merchant's records (``added_fields``).
    added_fields: tuple[AddedField, ...] = ()

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigurationError("invalid merchant profile: " + "; ".join(problems))

    def problems(self) -> list[str]:
        return _merchant_problems(self) + _events_url_problems("events_url", self.events_url)


def _merchant_problems(merchant: MerchantProfile | SimConfig) -> list[str]:
    """What is wrong with one merchant's settings (never showing its secret)."""
    checks = (
        (bool(merchant.merchant_id), "merchant_id must not be empty"),
        (bool(merchant.secret), "secret must not be empty"),
        (merchant.history_days >= 0, f"history_days must be >= 0, got {merchant.history_days}"),
        (
            merchant.rounds_per_day >= 0,
            f"rounds_per_day must be >= 0, got {merchant.rounds_per_day}",
        ),
        (merchant.live_rate >= 0, f"live_rate must be >= 0, got {merchant.live_rate}"),
        (
            merchant.record_requests >= 1 and merchant.record_seconds >= 1,
            "record_requests and record_seconds must both be >= 1",
        ),
    )
    return (
        [message for ok, message in checks if not ok]
        + merchant.faults.problems()
        + _refusal_problems(merchant.refusals)
        + [problem for added in merchant.added_fields for problem in added.problems()]
    )


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything the simulator needs; defaults make a demo quick (3 days x 2000 rounds).

    The fields from ``merchant_id`` to ``faults`` describe the first (default) merchant;
    ``merchants`` are served beside it, on the same port.
    """

    merchant_id: str = DEMO_MERCHANT_ID
    secret: str = field(default=DEMO_SECRET, repr=False)
    # Accepted as well during an announced key rotation (spec: Authentication, Key rotation).
    previous_secret: str | None = field(default=None, repr=False)
    seed: int = DEFAULT_SEED
    history_days: float = DEFAULT_HISTORY_DAYS
    rounds_per_day: int = DEFAULT_ROUNDS_PER_DAY
    live_rate: float = 0.0  # live events per second while ``start_live()`` runs
    record_requests: int = DEFAULT_RECORD_REQUESTS
    record_seconds: int = DEFAULT_RECORD_SECONDS
    max_page_size: int = SPEC_MAX_PAGE_SIZE
    max_body_bytes: int = 1024 * 1024
    cursor_ttl_seconds: float = 86400.0
    # capabilities.limits.query_requests per query_seconds: the catalogue's own rate limit.
    query_requests: int = 10
    query_seconds: int = 1
    retention_seconds: float = 90 * 86400.0
    wallet_mode: str = "TRANSFER"
    faults: FaultRates = FaultRates()
    refusals: Refusals = ()  # the first merchant's refused optional endpoints
    added_fields: tuple[AddedField, ...] = ()  # members added to the first merchant's records
    merchants: tuple[MerchantProfile, ...] = ()
    # Round-end notifications (spec: Events, Round end).  ``events_url`` is the merchant URL:
    # every live round that ends is POSTed to ``{events_url}/v1/round-events``, for every
    # merchant (X-Merchant-Id tells them apart) unless its profile names a URL of its own;
    # None sends nothing.  Retries follow the spec's schedule times ``events_time_scale``.
    events_url: str | None = None
    events_time_scale: float = 1.0
    events_timeout_seconds: float = 10.0  # per attempt; a slower reply is a timeout
    events_max_retries: int = 10  # the spec shows no stopping rule; then it gives up
    events_queue_size: int = 10_000  # events waiting or in flight; beyond it they are dropped
    events_workers: int = 2

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigurationError("invalid simulator configuration: " + "; ".join(problems))

    def problems(self) -> list[str]:
        checks = (
            (
                1 <= self.max_page_size <= SPEC_MAX_PAGE_SIZE,
                f"max_page_size must be in 1..1000, got {self.max_page_size}",
            ),
            (self.max_body_bytes >= 1, "max_body_bytes must be >= 1"),
            (
                self.query_requests >= 1 and self.query_seconds >= 1,
                "query_requests and query_seconds must both be >= 1",
            ),
            (
                self.cursor_ttl_seconds > 0 and self.retention_seconds > 0,
                "cursor_ttl_seconds and retention_seconds must be > 0",
            ),
            (
                self.wallet_mode in {"TRANSFER", "SEAMLESS"},
                f"wallet_mode must be TRANSFER or SEAMLESS, got {self.wallet_mode!r}",
            ),
            (
                self.events_time_scale > 0 and self.events_timeout_seconds > 0,
                "events_time_scale and events_timeout_seconds must be > 0",
            ),
            (
                self.events_max_retries >= 0,
                f"events_max_retries must be >= 0, got {self.events_max_retries}",
            ),
            (
                self.events_queue_size >= 1 and self.events_workers >= 1,
                "events_queue_size and events_workers must both be >= 1",
            ),
        )
        ids = [self.merchant_id, *(merchant.merchant_id for merchant in self.merchants)]
        repeated = sorted({merchant_id for merchant_id in ids if ids.count(merchant_id) > 1})
        return (
            _merchant_problems(self)
            + _events_url_problems("events_url", self.events_url)
            + [message for ok, message in checks if not ok]
            + [f"merchant ids must be unique, {merchant_id!r} repeats" for merchant_id in repeated]
        )

    def events_url_of(self, profile: MerchantProfile) -> str | None:
        """Where a merchant's round-end notifications go: its own URL, else ``events_url``."""
        return profile.events_url if profile.events_url is not None else self.events_url

    @property
    def profiles(self) -> tuple[MerchantProfile, ...]:
        """Every merchant served, the first (default) one first."""
        first = MerchantProfile(
            merchant_id=self.merchant_id,
            secret=self.secret,
            previous_secret=self.previous_secret,
            seed=self.seed,
            history_days=self.history_days,
            rounds_per_day=self.rounds_per_day,
            live_rate=self.live_rate,
            record_requests=self.record_requests,
            record_seconds=self.record_seconds,
            faults=self.faults,
            refusals=self.refusals,
            added_fields=self.added_fields,
        )
        return (first, *self.merchants)

    def refusing(
        self, endpoint: str, refusal: Refusal | None, *, merchant_id: str | None = None
    ) -> SimConfig:
        """This configuration with ``endpoint`` refused (None: served) to one merchant, or
        to every merchant when ``merchant_id`` is None."""
        ids = {profile.merchant_id for profile in self.profiles}
        if merchant_id is not None and merchant_id not in ids:
            raise ConfigurationError(f"no merchant {merchant_id!r} to refuse {endpoint!r} to")

        def chosen(candidate: str) -> bool:
            return merchant_id is None or candidate == merchant_id

        return replace(
            self,
            refusals=with_refusal(self.refusals, endpoint, refusal)
            if chosen(self.merchant_id)
            else self.refusals,
            merchants=tuple(
                replace(profile, refusals=with_refusal(profile.refusals, endpoint, refusal))
                if chosen(profile.merchant_id)
                else profile
                for profile in self.merchants
            ),
        )

    def with_merchants(self, count: int) -> SimConfig:
        """This configuration's merchant ``count`` times over, for demos and tests.

        Merchant ``n`` (1..count) is ``{merchant_id}-{n}`` with the seed ``seed + n - 1`` (so
        each has a history of its own, and merchant 1 the history of ``seed``) and the secret
        ``derived_secret(seed, its id)``; history, live rate, rate limit and faults are copied.
        Any ``merchants`` already set are replaced.
        """
        if count < 1:
            raise ConfigurationError(f"the number of merchants must be >= 1, got {count}")
        template = self.profiles[0]
        derived = []
        for number in range(1, count + 1):
            merchant_id = f"{self.merchant_id}-{number}"
            derived.append(
                replace(
                    template,
                    merchant_id=merchant_id,
                    secret=derived_secret(self.seed, merchant_id),
                    previous_secret=None,
                    seed=self.seed + number - 1,
                )
            )
        first, *others = derived
        return replace(
            self,
            merchant_id=first.merchant_id,
            secret=first.secret,
            previous_secret=None,
            seed=first.seed,
            merchants=tuple(others),
        )
