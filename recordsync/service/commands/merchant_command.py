"""One command's parts for one merchant, opened once: its client, the warehouse, the engines
of its sync (``runtime.merchant_engines``) and, once the command hands work over, one fleet
session.

``backfill``, ``merchant resync``, ``verify`` and ``merchant reset`` hold the merchant's lease
or hand the work to its holder (``hand_over``) and, held here, run one fenced job engine
(``engine``), built by the same function as the holder's (``MerchantEngines.job_engine``);
the demo and the in-process tests run the merchant's tail (``tail``).  The client signs with
the merchant's secret read once, which is all a one-shot command needs.
"""

from __future__ import annotations

import gc
import os
import secrets as random_tokens
from collections.abc import Callable
from functools import cached_property
from types import TracebackType
from typing import Self

from recordsync import PROCESS_STARTED
from recordsync.core.errors import ConfigurationError
from recordsync.core.settings import Settings
from recordsync.core.stopping import Stopper
from recordsync.platform.client import ClientObserver, PlatformClient
from recordsync.service.commands.handover import (
    FOLLOW_EVERY,
    WATCH_EVERY,
    Handover,
    refuse_if_paused,
)
from recordsync.service.commands.holder_versions import ask_if_holder_takes
from recordsync.service.runtime import (
    MerchantEngines,
    Purpose,
    merchant_client,
    merchant_engines,
)
from recordsync.service.secrets import SecretKeeper
from recordsync.sync.engine import SyncEngine
from recordsync.sync.events import SyncObserver
from recordsync.sync.resilience import StepRunner
from recordsync.warehouse import FleetSession, HolderRequest, MerchantStore, RequestKind, Warehouse


class MerchantCommand:
    """The parts of one command on one merchant (``merchant_id``; the only merchant when
    None), opened on entry, closed on exit; ``stopper`` stops everything it runs.

    ``name`` names the command in its fleet session (``{name}-{pid}-{token}``, as the holder
    sees who asked); ``migrate`` False: the schema is checked, never upgraded (the control
    commands: during a rolling upgrade only ``recordsync migrate`` may move it under the
    older replicas)."""

    # Opened on entry (``__enter__``).
    client: PlatformClient
    warehouse: Warehouse
    engines: MerchantEngines

    def __init__(
        self,
        settings: Settings,
        merchant_id: str | None,
        stopper: Stopper,
        *,
        name: str = "command",
        observer: SyncObserver | None = None,
        client_observer: ClientObserver | None = None,
        stop_when_caught_up: bool = False,
        migrate: bool = True,
    ) -> None:
        merchant = settings.merchant(merchant_id)
        if merchant.base_url is None or merchant.secret is None:
            raise ConfigurationError("the platform settings were not loaded for this command")
        self.settings = settings
        self._merchant = merchant
        self.merchant_id = merchant.merchant_id
        self.stopper = stopper
        self.observer = observer
        self.me = f"{name}-{os.getpid()}-{random_tokens.token_hex(2)}"
        self._client_observer = client_observer
        self._stop_when_caught_up = stop_when_caught_up
        self._migrate = migrate
        self._session: FleetSession | None = None

    def __enter__(self) -> Self:
        settings, merchant, stopper = self.settings, self._merchant, self.stopper
        assert merchant.secret is not None
        secrets = SecretKeeper({self.merchant_id: merchant.secret}, overlap=settings.secret_overlap)
        self.client = merchant_client(
            settings,
            merchant,
            secrets=secrets,
            stopper=stopper,
            observer=self._client_observer,
            cold_since=_cold_since(),
            # The command gives up on a platform it cannot reach after this long; so does its
            # request, instead of finishing its own retries first.
            unreachable_after=settings.unreachable_timeout,
        )
        try:
            self.warehouse = Warehouse.connect(
                settings.database_url,
                keep_revisions=settings.keep_revisions,
                lease_seconds=settings.lease_seconds,
            )
        except BaseException:
            self.client.close()
            raise
        try:
            # A warehouse that is down at start-up is waited for, like one that goes down later.
            StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=False).run(
                self.warehouse.migrate if self._migrate else self.warehouse.check_schema,
                what="migrate" if self._migrate else "check the schema",
            )
            self.engines = merchant_engines(
                settings,
                merchant,
                self.client,
                Purpose.COMMAND,
                stop_when_caught_up=self._stop_when_caught_up,
            )
        except BaseException:
            self._close()
            raise
        _settle_heap()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._close()

    def _close(self) -> None:
        try:
            if self._session is not None:
                self._session.close()
        finally:
            self.client.close()
            self.warehouse.close()

    @property
    def session(self) -> FleetSession:
        """The command's one fleet session, opened at the first hand-over."""
        if self._session is None:
            self._session = self.warehouse.fleet_session(self.me)
        return self._session

    def hand_over(
        self,
        kind: RequestKind,
        *,
        ask: Callable[[], int],
        what: str,
        handed_over: Callable[[int], None] = lambda _request_id: None,
        progress: Callable[[HolderRequest], None] = lambda _request: None,
    ) -> Handover:
        """The work of ``kind`` on this merchant, held here or handed to its holder
        (``Handover``) on the command's session: ``ask`` (insert the request; its id) is
        called only once the holder is known to take ``kind``, and a paused merchant is
        refused before every attempt at the lease (``what`` names the command there)."""
        session, merchant_id, controls = self.session, self.merchant_id, self.warehouse.controls
        return Handover(
            kind,
            merchant_id,
            lease=session,
            requests=self.warehouse.requests,
            stopper=self.stopper,
            ask=lambda: ask_if_holder_takes(session, merchant_id, kind, ask),
            handed_over=handed_over,
            progress=progress,
            before_taking=lambda: refuse_if_paused(controls.paused, merchant_id, what=what),
            # The fleet's own timing (RECORDSYNC_FLEET_TICK, RECORDSYNC_LEASE_SECONDS): which
            # replica is live, when a follower is alone long enough to take the lease back,
            # a watch that sees a daemon join within its first tick, and a follower that looks
            # at its request twice as often as the holder looks for requests.
            stale_after=self.settings.heartbeat_stale_after,
            take_back_after=self.settings.lease_seconds + self.settings.fleet_tick,
            watch_every=min(WATCH_EVERY, self.settings.fleet_tick / 2),
            follow_every=min(FOLLOW_EVERY, self.settings.fleet_tick / 2),
        )

    def holding(self, epoch: int) -> MerchantStore:
        """The merchant's store fenced by ``epoch``, the lease this command took; from now on
        the client sends only while the session confirms that lease (its keeper renews it for
        the whole run)."""
        session, merchant_id = self.session, self.merchant_id
        self.client.hold_under(lambda: session.confirmed(merchant_id))
        return self.warehouse.fenced(merchant_id, epoch)

    def engine(self, epoch: int, stopper: Stopper) -> SyncEngine:
        """One job's engine under the lease this command holds at ``epoch`` (``holding``),
        stopped by ``stopper``: the holder's job engine, built the same way."""
        self.holding(epoch)
        return self.engines.job_engine(
            self.warehouse, epoch, stopper=stopper, observer=self.observer
        )

    @cached_property
    def tail(self) -> SyncEngine:
        """The merchant's sync in this process, on the unfenced store: a sync that holds no
        lease (the demo, the in-process tests)."""
        store = self.warehouse.for_merchant(self.merchant_id)
        return self.engines.tail(store, stopper=self.stopper, observer=self.observer)


_HEAP_SETTLED: list[bool] = [False]
_BUDGET_MADE: list[bool] = [False]


def _cold_since() -> float | None:
    """Where the record budget's cold start counts from: the process's start for its first
    app, so the pause overlaps the imports, migrations and capabilities instead of
    following them (about 0.5 s of every ``recordsync backfill``, bench/README.md 1b); any
    later app of the same process from its own creation, since an earlier one may have
    just sent requests for the same merchant."""
    if _BUDGET_MADE[0]:
        return None
    _BUDGET_MADE[0] = True
    return PROCESS_STARTED


def _settle_heap() -> None:
    """Once per process, when the parts are built: what start-up made is moved out of the
    collector's way (``gc.freeze``).

    A sync allocates every record's objects (a Record, its Decimals and datetimes) and keeps
    them until its page commits, long enough for the collector to promote them and run full
    collections, each of which walked the ~100 000 objects of the imported libraries again:
    0.61 s of the collector's 1.38 s over a 400 000-record PostgreSQL ingest, 0.15 s frozen
    (bench/README.md).  Frozen objects are only ever freed by reference counting,
    which is how module-level state lives anyway.
    """
    if _HEAP_SETTLED[0]:
        return
    _HEAP_SETTLED[0] = True
    gc.collect()
    gc.freeze()
