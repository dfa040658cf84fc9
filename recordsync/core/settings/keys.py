"""Every setting, declared once: the ``Settings`` fields are the key table.

Each field of ``Settings`` read by the generic reader is one line, ``key: type =
setting(KIND, default=...)``: its key (in the file as written, in the environment upper-cased
after ``RECORDSYNC_``), its type, how its text is read and what its error line asks for (the
kind, from ``validators``), and its default.  The reader, the dataclass defaults and the
error lines all come from that line, so a setting cannot be read one way and defaulted
another; a test holds the README's table of settings to it.  The merchants, whose keys
depend on one another, and the warehouse URL, checked and never quoted back, are read apart
(``loading``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Final, TypeVar

from recordsync.core.errors import ConfigurationError
from recordsync.core.secret import SecretSource
from recordsync.core.settings.validators import (
    BOOLEAN,
    CONNECTIONS,
    COUNT,
    DAYS_OR_EVER,
    LEASE,
    LOG_FORMAT,
    LOG_LEVEL,
    PORT,
    PORT_OR_OFF,
    POSITIVE,
    SECONDS,
    SECONDS_OR_NONE,
    SECONDS_OR_OFF,
    TEXT,
    WAIT,
    Kind,
)

PREFIX = "RECORDSYNC_"
DEFAULT_DATABASE_URL = "sqlite:///recordsync.db"
DEFAULT_HTTP_PORT = 9108
DEFAULT_SECRET_OVERLAP = 86400.0  # seconds a rotated-out secret is still accepted
DEFAULT_EVENTS_HOST = "0.0.0.0"  # noqa: S104 - like /metrics: the ingress reaches the pod
DEFAULT_EVENT_GRACE = 600.0  # seconds an announced round may take to reach the warehouse
# The keys of one merchant: single-merchant variables, or the keys of a [[merchants]] entry.
MERCHANT_KEYS: Final = (
    "merchant_id",
    "secret",
    "secret_file",
    "previous_secret",
    "previous_secret_file",
    "base_url",
    "history_from",
)

T = TypeVar("T")
D = TypeVar("D")


# The adaptive tail's defaults (the rules: ``sync.tail_pace``).
# The ceiling of an idle tail while a snapshot runs, without notifications: the freshness a
# backfill may cost when the stream is quiet (a change after a quiet spell waits at most this
# long), against 0.1 of the default budget kept by the tail at most.
DEFAULT_POLL_CEILING: Final = 10.0
# With notifications, the idle tail's safety poll: what no notification announces (a later
# revision of an ended round; a notification the platform gave up on) arrives within it.
# 10 s costs an idle merchant 0.1 request a second, a twentieth of the default budget.
DEFAULT_SAFETY_POLL: Final = 10.0
# With notifications, during a snapshot, the tail reads at most once every this many seconds,
# polls and wake-ups alike: at the default limit of 2 requests a second the snapshot keeps
# 0.95 of the budget, and a round's end reaches the warehouse within it and a round trip.
# 5 s (0.9 of the budget) was tried first and measured 0.902 of the requests and 0.840 of
# the ceiling for a whole process (``bench/budget_share.py``): on the edge of 0.9 and under
# 0.85, because a daemon's start (about 4 s) and its budget's margin cost the rest.
DEFAULT_SNAPSHOT_TAIL_INTERVAL: Final = 10.0

# The fleet (``fleet.member``, ``warehouse.lease``; docs/operations.md, "Several replicas").
# Every replica looks at the fleet once a tick: heartbeat, what it lost, the fair share.
DEFAULT_FLEET_TICK: Final = 2.0
# Seconds a silent replica (paused, cut off) keeps its merchants' locks before the database
# ends its sessions and frees them; every bound on a write session follows from it
# (``warehouse.timeouts``).
DEFAULT_LEASE_SECONDS: Final = 10
# A replica whose heartbeat is this many ticks old no longer counts as live; its lock
# connection, which hears from it only at each tick while it holds nothing, must outlast the
# same silence, so the lease is at least this many ticks (``loading``).
STALE_TICKS: Final = 3

_KIND: Final = "kind"


def variable(key: str) -> str:
    """The environment variable of ``key``: the operator's name for it in every error line."""
    return PREFIX + key.upper()


def setting(kind: Kind[T], *, default: D) -> T | D:
    """A ``Settings`` field read by ``kind``, ``default`` when the key is not given.

    Typed as its value, so that mypy holds the kind's result, the default and the field's
    type to one another; at run time the dataclass field carrying the kind.
    """
    declared: T | D = field(default=default, metadata={_KIND: kind})
    return declared


@dataclass(frozen=True, slots=True)
class MerchantSettings:
    """One merchant this deployment syncs, with the defaults already applied.

    ``secret`` and ``base_url`` are None only when the command needs no platform (``status``,
    ``report``): those commands may run where the secrets are not mounted.
    ``previous_secret`` is the secret of before a rotation still inside its overlap, named by
    the operator so that a replica started during the overlap verifies callbacks signed with
    it (spec: Authentication, Key rotation); requests are always signed with ``secret``.
    """

    merchant_id: str
    secret: SecretSource | None = field(default=None, repr=False)
    base_url: str | None = None
    history_from: datetime | None = None
    previous_secret: SecretSource | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Settings:
    merchants: tuple[MerchantSettings, ...] = ()  # read apart: the merchant keys above
    database_url: str = DEFAULT_DATABASE_URL  # read apart: checked, never quoted back
    http_port: int = setting(PORT, default=DEFAULT_HTTP_PORT)
    poll_interval: float = setting(SECONDS, default=1.0)
    # The adaptive tail (``sync.tail_pace``): an idle tail's longest wait while a
    # snapshot runs, its safety poll when notifications are received, and with notifications
    # the least time between its reads during a snapshot.
    poll_ceiling: float = setting(WAIT, default=DEFAULT_POLL_CEILING)
    safety_poll: float = setting(WAIT, default=DEFAULT_SAFETY_POLL)
    snapshot_tail_interval: float = setting(WAIT, default=DEFAULT_SNAPSHOT_TAIL_INTERVAL)
    page_size: int = setting(COUNT, default=1000)
    snapshot_concurrency: int = setting(COUNT, default=4)
    http_timeout: float = setting(SECONDS, default=30.0)
    # One-shot commands (backfill, verify): how long a platform that cannot be reached is
    # tried again before the command ends naming the cause; the daemon keeps trying.
    unreachable_timeout: float = setting(SECONDS, default=60.0)
    drift_check_interval: float = setting(SECONDS_OR_OFF, default=3600.0)  # 0: no drift check
    catalogue_interval: float = setting(SECONDS_OR_OFF, default=3600.0)  # game catalogue passes
    # /readyz: a commit within this many poll intervals.
    ready_multiple: float = setting(POSITIVE, default=30.0)
    # Append every revision seen to record_revisions.
    keep_revisions: bool = setting(BOOLEAN, default=True)
    # Days a superseded revision stays in record_revisions; 0 keeps every revision.
    revision_retention: float = setting(DAYS_OR_EVER, default=0.0)
    # The fleet: seconds between two looks of a replica (``fleet.member``), and the lease,
    # whole seconds a silent holder keeps its locks (at least ``STALE_TICKS`` ticks).
    fleet_tick: float = setting(WAIT, default=DEFAULT_FLEET_TICK)
    lease_seconds: int = setting(LEASE, default=DEFAULT_LEASE_SECONDS)
    # Warehouse connections per process; 0: sized from what it runs.
    db_pool_size: int = setting(CONNECTIONS, default=0)
    # Seconds added to the budget's window against arrival jitter.
    rate_margin: float = setting(SECONDS_OR_NONE, default=0.05)
    secret_overlap: float = setting(SECONDS_OR_NONE, default=DEFAULT_SECRET_OVERLAP)
    # Round-end notifications: their own port (0: off), apart from /metrics.
    events_port: int = setting(PORT_OR_OFF, default=0)
    events_host: str = setting(TEXT, default=DEFAULT_EVENTS_HOST)
    event_grace: float = setting(SECONDS, default=DEFAULT_EVENT_GRACE)
    tls_verify: bool = setting(BOOLEAN, default=True)
    ca_bundle: str | None = setting(TEXT, default=None)
    log_level: str = setting(LOG_LEVEL, default="info")
    # "json", "console", or None: decide by whether stdout is a TTY.
    log_format: str | None = setting(LOG_FORMAT, default=None)
    warnings: tuple[str, ...] = ()

    def merchant(self, merchant_id: str | None = None) -> MerchantSettings:
        """The only merchant, or the one named; otherwise an error naming the choices."""
        configured = ", ".join(merchant.merchant_id for merchant in self.merchants)
        if merchant_id is None:
            if len(self.merchants) == 1:
                return self.merchants[0]
            if not self.merchants:
                raise ConfigurationError(
                    "no merchant is configured: set RECORDSYNC_MERCHANT_ID or add "
                    "[[merchants]] to the --config file"
                )
            raise ConfigurationError(
                f"several merchants are configured ({configured}): name one with --merchant"
            )
        for merchant in self.merchants:
            if merchant.merchant_id == merchant_id:
                return merchant
        raise ConfigurationError(
            f"merchant {merchant_id!r} is not configured; configured: {configured or 'none'}"
        )

    @property
    def verify(self) -> bool | str:
        """What httpx's ``verify`` takes: a CA bundle path wins over the boolean."""
        return self.ca_bundle or self.tls_verify

    @property
    def idle_commit_interval(self) -> float:
        """Seconds an idle tail may go without committing (``SyncOptions``): ten polls, and at
        most a third of the readiness limit, so that readiness never sees an idle tail as
        stuck."""
        return min(10 * self.poll_interval, self.ready_multiple * self.poll_interval / 3)

    @property
    def longest_tail_wait(self) -> float:
        """The longest an idle tail waits between two reads (``sync.tail_pace``)."""
        waits = [self.poll_interval, self.poll_ceiling, self.snapshot_tail_interval]
        if self.events_port:
            waits.append(self.safety_poll)
        return max(waits)

    @property
    def heartbeat_stale_after(self) -> float:
        """Seconds after which a replica's heartbeat is too old for it to count as live (by
        the database's clock): ``STALE_TICKS`` ticks, the same for the daemons and for the
        commands that look for them."""
        return STALE_TICKS * self.fleet_tick

    @property
    def readiness_multiple(self) -> float:
        """``ready_multiple``, raised when the adaptive tail may wait longer: an idle tail
        commits at its first read after ``idle_commit_interval``, so two commits may be that
        and its longest wait apart; readiness allows twice that, so that a tail stretched to
        its ceiling is never taken for a stuck one."""
        needed = 2 * (self.idle_commit_interval + self.longest_tail_wait) / self.poll_interval
        return max(self.ready_multiple, needed)


# The key table, as the reader walks it: each generically read setting's kind and default.
SETTING_KINDS: Final[Mapping[str, Kind[Any]]] = {
    item.name: item.metadata[_KIND] for item in fields(Settings) if _KIND in item.metadata
}
DEFAULTS: Final[Mapping[str, Any]] = {item.name: item.default for item in fields(Settings)}
