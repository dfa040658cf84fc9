"""Plain values the warehouse hands back: what a commit wrote, quarantine, status, BI rows,
backfill requests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum

from recordsync.core.state import Phase, SyncState


@dataclass(frozen=True, slots=True)
class WriteResult:
    """One committed page: rows sent to the upsert after collapsing, items quarantined."""

    records: int
    quarantined: int


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    """An item that failed validation, kept exactly as received with the reason."""

    id: int
    merchant_id: str
    source: str  # "tail", "rebuild" or "backfill:<from>/<to>"
    position: str  # "<cursor or start that fetched the page>#<index in the page>"
    record_id: str | None
    reason: str
    raw_json: str
    quarantined_at: datetime


@dataclass(frozen=True, slots=True)
class JobStatus:
    job: str
    windows_done: int
    windows_total: int
    records: int  # records committed from the job's windows so far

    @property
    def done(self) -> bool:
        return self.windows_done == self.windows_total


@dataclass(frozen=True, slots=True)
class WarehouseStatus:
    merchant_id: str
    state: SyncState | None
    jobs: tuple[JobStatus, ...]  # ordered by job name
    records: int  # rows in ``records`` for the merchant, counted up to a cap
    quarantined: int
    records_exact: bool = True  # False: the merchant holds more than ``records`` rows

    def job(self, name: str) -> JobStatus | None:
        return next((job for job in self.jobs if job.job == name), None)


@dataclass(frozen=True, slots=True)
class DailySummary:
    """One row of ``daily_game_summary`` or ``daily_player_summary`` (docs/bi.md).

    ``subject`` is the game_id or the player_id, as the view groups.  An amount is None only on
    SQLite, for a group holding an amount beyond +-922337203685477.5807, whose sum SQLite cannot
    compute exactly (see ``types``).
    """

    day: date  # UTC day of created_at
    merchant_id: str
    subject: str
    currency: str
    rounds: int
    rounds_open: int
    rounds_settled: int
    rounds_void: int
    bet_amount: Decimal | None
    payout_amount: Decimal | None
    refund_amount: Decimal | None
    net_amount: Decimal | None  # the players' net: sum of net_amount
    ggr_amount: Decimal | None  # the operator's gross gaming revenue: bet - payout - refund


@dataclass(frozen=True, slots=True)
class Freshness:
    """One row of ``sync_freshness``: how current the merchant's data is.

    The ages are whole seconds by the database's clock, for display only; they are None until
    the tail has committed a page carrying projection_as_of (after a (re)build, for instance).
    """

    merchant_id: str
    phase: Phase
    anchor_at: datetime
    last_projection_as_of: datetime | None
    last_commit_at: datetime | None
    staleness_seconds: int | None
    seconds_since_commit: int | None


class RequestState(StrEnum):
    """Where a request handed to a merchant's holder stands (``sync_requests.state``)."""

    PENDING = "pending"  # asked for; no holder has started it yet
    RUNNING = "running"  # a holder runs it (a new holder takes it up after a takeover)
    DONE = "done"
    FAILED = "failed"  # ``error`` says why (an expiry too: not started within its limit)
    # Its command was interrupted and the kind does not carry on (``requests.book.cancel``).
    # A holder of a version before it lists only pending and running rows, so ignores it.
    CANCELLED = "cancelled"


class RequestKind(StrEnum):
    """What a request asks of the holder (``sync_requests.kind``)."""

    BACKFILL = "backfill"  # ``recordsync backfill``: resumed from its job's windows
    VERIFY = "verify"  # ``recordsync verify``: run again from the start; findings in result
    RESYNC = "resync"  # ``recordsync merchant resync``: its own job's windows (its key)
    RESET = "reset"  # ``recordsync merchant reset``: re-anchor, rebuild; result the new plan


@dataclass(frozen=True, slots=True)
class HolderRequest:
    """Work on ``[created_from, created_to)`` handed to the merchant's holder by a command, so
    that the merchant's rate budget is spent by one process; the command follows the row
    until it is finished.  Times are the database's.

    ``key`` names the work where asking twice should follow the first request (a backfill's
    job, whose windows keep its progress); ``repair`` is verify's ``--repair``; ``result`` is
    what the holder hands back (verify's findings, the JSON of ``verify --format json``).
    """

    id: int
    merchant_id: str
    kind: RequestKind
    created_from: datetime
    created_to: datetime
    key: str | None
    repair: bool
    state: RequestState
    requested_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    holder: str | None  # the replica that started it last
    error: str | None  # why it failed
    result: str | None
    # The last look of the command following it (None: asked by an earlier version, which
    # does not say): ``requests.book.FOLLOWED_WITHIN``.
    followed_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state in {RequestState.DONE, RequestState.FAILED, RequestState.CANCELLED}


@dataclass(frozen=True, slots=True)
class Pause:
    """A merchant an operator paused: since when (the database's clock), by whom, why."""

    since: datetime
    by: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class CatalogueResult:
    """What one committed catalogue pass changed (``catalogue.commit_pass``)."""

    listed: int  # games the pass listed
    added: int  # of those, first seen now
    changed: int  # of those, found different from the stored row
    unlisted: int  # stored games the pass no longer listed (rows kept, marked not seen since)
    # Games the columns cannot hold (``catalogue.game_unstorable``): left out, kept as stored.
    unstorable: int = 0
    first_unstorable: str | None = None  # "game_id: reason" of the first, for the log


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether the platform serves an optional endpoint to a merchant, as last recorded
    (``availability``); ``status``/``code`` are the last refusal's, None when none or when no
    answer came."""

    endpoint: str
    available: bool
    status: int | None
    code: str | None
    since: datetime
    checked_at: datetime
    next_check_at: datetime | None


@dataclass(frozen=True, slots=True)
class GameName:
    """How BI names a game: ``games`` row fields a report shows beside the game_id."""

    game_id: str
    name: str
    provider_code: str | None
    provider_name: str | None
    category: str | None
    listed: bool


@dataclass(frozen=True, slots=True)
class ReplicaVersion:
    """What a replica said of itself; ``version`` None: a replica of a version before 0014's,
    which reads no pause and takes only the kinds of its own time."""

    version: str | None
    request_kinds: frozenset[str]

    @property
    def obeys_pause(self) -> bool:
        return self.version is not None

    def takes(self, kind: RequestKind) -> bool:
        return kind.value in self.request_kinds


@dataclass(frozen=True, slots=True)
class DriftCheckRun:
    """When a merchant's drift check last ran and since when it has been deferred (None:
    never, or not now), with the database's clock at the read, for ages."""

    last_run_at: datetime | None
    deferred_since: datetime | None
    read_at: datetime
