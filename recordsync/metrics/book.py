"""The book: what each merchant reported that its gauges show, kept until a scrape reads it.

Gauges are computed at scrape time from what was reported (``recordsync.metrics.scrape``),
never kept in ``Gauge`` objects: values that depend on "now" (tail freshness, the snapshot's
remaining time) keep growing while nothing happens, which is exactly when someone needs to
see them; and forgetting a merchant handed to another replica removes every gauge of it at
once, so a stale copy here never looks like a stalled sync.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol


class BudgetView(Protocol):
    """What the metrics read from ``recordsync.platform.budget.RateBudget``."""

    @property
    def requests(self) -> int: ...

    @property
    def seconds(self) -> float: ...

    @property
    def waited_seconds_total(self) -> float: ...

    @property
    def waiting(self) -> int: ...


@dataclass(slots=True)
class JobProgress:
    total: int
    done: int
    planned_at: float  # clock when the windows were planned (or resumed) in this process
    done_at_plan: int


@dataclass(slots=True)
class MerchantState:
    """What one merchant's gauges show, as reported in this process (None: nothing yet)."""

    jobs: dict[str, JobProgress] = field(default_factory=dict)
    last_commit_at: float | None = None
    projection_as_of: float | None = None
    tail_has_more: bool | None = None
    tail_wait: float | None = None
    tail_last_sequence: float | None = None
    drift_rows_behind: int | None = None
    drift_interval: float | None = None  # seconds; None: no drift check scheduled here
    drift_ran_at: float | None = None  # last run ended, or the check was scheduled
    catalogue_available: bool | None = None
    budget: BudgetView | None = None
    unknown_fields: set[str] = field(default_factory=set)  # the names labelled so far

    def copy(self) -> MerchantState:
        return replace(
            self,
            jobs={kind: replace(job) for kind, job in self.jobs.items()},
            unknown_fields=set(self.unknown_fields),
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The book as one scrape reads it: copies, taken at ``now``."""

    merchants: dict[str, MerchantState]
    leases: dict[str, bool]
    replicas_live: int | None
    paused: dict[str, bool]
    now: float


class Book:
    """The reported values the gauges read at scrape time, behind one lock.

    Observers report from the tail and snapshot worker threads of every merchant; scrapes
    read from the health server's threads.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._merchants: dict[str, MerchantState] = {}
        self._leases: dict[str, bool] = {}
        self._replicas_live: int | None = None
        self._paused: dict[str, bool] = {}
        self.lease_confirmed: Callable[[str], bool] | None = None

    @contextmanager
    def editing(self, merchant_id: str) -> Iterator[MerchantState]:
        """The merchant's state, created when absent, locked while the block runs."""
        with self._lock:
            yield self._merchants.setdefault(merchant_id, MerchantState())

    def last_commit_at(self, merchant_id: str) -> float | None:
        with self._lock:
            state = self._merchants.get(merchant_id)
            return None if state is None else state.last_commit_at

    def set_lease_held(self, merchant_id: str, *, held: bool) -> None:
        with self._lock:
            self._leases[merchant_id] = held
            if held:
                # A merchant held here shows its last commit (0: none yet) from now on, so
                # a holder stuck before its first page is seen by the stall alert.
                self._merchants.setdefault(merchant_id, MerchantState())

    def set_replicas_live(self, count: int) -> None:
        with self._lock:
            self._replicas_live = count

    def set_paused(self, merchant_id: str, *, paused: bool) -> None:
        with self._lock:
            self._paused[merchant_id] = paused

    def forget(self, merchant_id: str) -> None:
        with self._lock:
            self._merchants.pop(merchant_id, None)
            self._leases[merchant_id] = False

    def snapshot(self) -> Snapshot:
        confirmed = self.lease_confirmed
        with self._lock:
            leases = dict(self._leases)
            merchants = {mid: state.copy() for mid, state in self._merchants.items()}
        if confirmed is not None:  # asked outside the lock: it takes the fleet session's
            leases = {mid: held and confirmed(mid) for mid, held in leases.items()}
        with self._lock:
            return Snapshot(
                merchants=merchants,
                leases=leases,
                replicas_live=self._replicas_live,
                paused=dict(self._paused),
                now=self.clock(),
            )
