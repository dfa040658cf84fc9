"""The simulator: history, live traffic, faults and the HTTP server, started and stopped as one.

It serves every merchant of its configuration on one port, each with its own secrets, history,
rate limit, faults and statistics (``merchant``).  The methods that inspect or steer one
merchant take ``merchant_id``; None is the first (default) merchant, so a single-merchant
simulator is used exactly as before.

The wall clock is injected (``clock``, Unix seconds as a float) and is the simulator's "now"
for the data, timestamps and cursors; ``monotonic`` times the rate limit and the live
generator; ``sleep`` is the added latency.  Tests drive all three without monkeypatching.

With ``SimConfig.events_url`` (or a merchant's own) it also plays the platform's other
direction: every live round that ends is announced to the merchant by a signed
``POST /v1/round-events`` (``events``), sent by worker threads that ``start`` starts and
``stop`` stops; ``stats(merchant_id).events`` counts how the deliveries went.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import httpx

from recordsync.core.errors import ConfigurationError
from recordsync.core.secret import Secret
from recordsync.sim.api import SimulatedApi
from recordsync.sim.config import OPTIONAL_ENDPOINTS, FaultRates, Refusal, SimConfig
from recordsync.sim.cursors import CursorCodec
from recordsync.sim.events import Announcement, EventSender
from recordsync.sim.games import GameCatalogue
from recordsync.sim.merchant import SimulatedMerchant
from recordsync.sim.server import HttpServer
from recordsync.sim.stats import SimStats
from recordsync.sim.store import Store

_LIVE_TICK_SECONDS = 0.05


class Simulator:
    """A faithful, fast fake of the platform's record side, served over real HTTP."""

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        events_transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config = config = config if config is not None else SimConfig()
        self._monotonic = monotonic
        self._sender: EventSender | None = None
        if any(config.events_url_of(profile) is not None for profile in config.profiles):
            self._sender = EventSender(
                time_scale=config.events_time_scale,
                timeout_seconds=config.events_timeout_seconds,
                max_retries=config.events_max_retries,
                queue_size=config.events_queue_size,
                workers=config.events_workers,
                transport=events_transport,
                monotonic=monotonic,
            )
        merchants = [
            SimulatedMerchant(
                profile,
                clock=clock,
                events_url=config.events_url_of(profile),
                sender=self._sender,
                query_limit=(config.query_requests, config.query_seconds),
            )
            for profile in config.profiles
        ]
        self._merchants: Mapping[str, SimulatedMerchant] = {
            merchant.merchant_id: merchant for merchant in merchants
        }
        self._default = merchants[0]
        self.store = self._default.store  # the default merchant's, as before several were served
        self.api = SimulatedApi(
            config,
            merchants,
            codec=CursorCodec(secrets.token_bytes(32)),
            monotonic=monotonic,
            sleep=sleep,
        )
        self._server: HttpServer | None = None
        self._live_thread: threading.Thread | None = None
        self._live_stop = threading.Event()
        self._lifecycle = threading.Lock()

    def __repr__(self) -> str:
        where = self.base_url if self._server is not None else "not started"
        if len(self._merchants) == 1:
            return f"Simulator(merchant_id={self.config.merchant_id!r}, {where})"
        return f"Simulator(merchant_ids={self.merchant_ids!r}, {where})"

    # --- merchants -------------------------------------------------------------------------

    @property
    def merchant_ids(self) -> tuple[str, ...]:
        """Every merchant served, the first (default) one first."""
        return tuple(self._merchants)

    def _merchant(self, merchant_id: str | None) -> SimulatedMerchant:
        if merchant_id is None:
            return self._default
        try:
            return self._merchants[merchant_id]
        except KeyError:
            raise KeyError(f"this simulator serves no merchant {merchant_id!r}") from None

    def store_of(self, merchant_id: str | None = None) -> Store:
        """A merchant's records and change log (``store`` is the default merchant's)."""
        return self._merchant(merchant_id).store

    def games(self, merchant_id: str | None = None) -> GameCatalogue:
        """A merchant's game catalogue: its truth, and ``retire``/``set_status``/``rename``."""
        return self._merchant(merchant_id).games

    def rotate_secret(self, merchant_id: str, new_secret: str) -> None:
        """Accept ``new_secret`` as well as the merchant's current secret from now on.

        The platform's side of a key rotation (spec: Authentication, Key rotation): during the
        overlap both secrets authenticate; ``retire_secret`` ends it.  Rotating again during
        an overlap drops the oldest secret: two are accepted at most.
        """
        if not new_secret:
            raise ConfigurationError("the new secret must not be empty")
        self._merchant(merchant_id).authenticator.rotate(Secret(new_secret))

    def retire_secret(self, merchant_id: str) -> None:
        """End a rotation: only the newest secret of the merchant authenticates from now on."""
        self._merchant(merchant_id).authenticator.retire()

    # --- serving ---------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> Simulator:
        """Serve in background threads; port 0 picks a free port (see ``base_url``)."""
        with self._lifecycle:
            if self._server is not None:
                raise RuntimeError("the simulator is already serving")
            server = HttpServer(self.api, host, port)
            server.start()
            self._server = server
        if self._sender is not None:
            self._sender.start()
        return self

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("the simulator is not serving; call start() first")
        return self._server.address

    @property
    def base_url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def stop(self) -> None:
        """Stop live traffic, the event sender and the server; safe to call twice."""
        self.stop_live()
        if self._sender is not None:
            self._sender.stop()
        with self._lifecycle:
            server, self._server = self._server, None
        if server is not None:
            server.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- live traffic ----------------------------------------------------------------------

    def now(self, merchant_id: str | None = None) -> datetime:
        """The simulator's clock (the injected clock plus the merchant's clock skew), in UTC."""
        return datetime.fromtimestamp(self._merchant(merchant_id).now(), UTC)

    def now_ms(self, merchant_id: str | None = None) -> int:
        return self._merchant(merchant_id).now_ms()

    def step(self, events: int = 1, *, merchant_id: str | None = None) -> None:
        """``events`` live events of a merchant at its now, synchronously (deterministic)."""
        self._merchant(merchant_id).step(events)

    def start_live(self) -> None:
        """Every merchant's ``live_rate`` events per second, in one background thread."""
        with self._lifecycle:
            if self._live_thread is not None or not any(
                merchant.profile.live_rate > 0 for merchant in self._merchants.values()
            ):
                return
            self._live_stop.clear()
            thread = threading.Thread(
                target=self._run_live, name="recordsync-sim-live", daemon=True
            )
            self._live_thread = thread
        thread.start()

    def stop_live(self) -> None:
        with self._lifecycle:
            thread, self._live_thread = self._live_thread, None
        if thread is not None:
            self._live_stop.set()
            thread.join()

    def _run_live(self) -> None:
        """One thread for all merchants: each accrues events at its own rate."""
        live = [merchant for merchant in self._merchants.values() if merchant.profile.live_rate > 0]
        due = dict.fromkeys(live, 0.0)
        last = self._monotonic()
        while not self._live_stop.wait(_LIVE_TICK_SECONDS):
            now = self._monotonic()
            elapsed, last = now - last, now
            for merchant in live:
                due[merchant] += elapsed * merchant.profile.live_rate
                events = int(due[merchant])
                if events:
                    due[merchant] -= events
                    merchant.step(events)

    # --- inspection and control ------------------------------------------------------------

    def truth(self, merchant_id: str | None = None) -> dict[str, dict[str, Any]]:
        """record_id -> the merchant's record at its highest revision, as the API prints it."""
        return self._merchant(merchant_id).store.truth()

    def truth_text(self, merchant_id: str | None = None) -> dict[str, str]:
        """record_id -> the merchant's record at its highest revision, as the JSON text sent."""
        return self._merchant(merchant_id).store.truth_text()

    def stats(self, merchant_id: str | None = None) -> SimStats:
        """One merchant's statistics; None: the simulator's totals.

        The totals are every merchant's plus the requests no merchant can be credited with
        (unknown merchant ids and paths).  With one merchant they are what ``stats()``
        always reported, and a test asserting "no violations, no failures" on them covers
        every merchant at once.
        """
        if merchant_id is not None:
            return self._snapshot(self._merchant(merchant_id))
        return SimStats.combined(
            [
                self.api.stats.snapshot(0),
                *(self._snapshot(merchant) for merchant in self._merchants.values()),
            ]
        )

    @staticmethod
    def _snapshot(merchant: SimulatedMerchant) -> SimStats:
        return merchant.stats.snapshot(
            merchant.window.max_in_window, merchant.event_stats.snapshot()
        )

    # --- round-end notifications -----------------------------------------------------------

    def announced(self, merchant_id: str | None = None) -> tuple[Announcement, ...]:
        """Every round-end notification of a merchant so far, oldest first, with its outcome."""
        channel = self._merchant(merchant_id).channel
        return () if channel is None else channel.announcements()

    def wait_events(self, timeout: float = 10.0) -> bool:
        """Wait until no notification is queued, in flight or waiting for a retry.

        True when that happened within ``timeout`` seconds (each event delivered or given up).
        """
        return self._sender is None or self._sender.wait_idle(timeout)

    def announce_hidden_round(self, merchant_id: str | None = None) -> str:
        """Announce the end of a round that records and record-changes do not show; its id.

        A test hook for the receiver's cross-check ("a round the platform announced that never
        reached the warehouse"); ``reveal_round`` lets it arrive later.
        """
        return self._merchant(merchant_id).announce_hidden_round()

    def reveal_round(self, round_id: str, merchant_id: str | None = None) -> None:
        """A hidden round appears: created and settled now, in record-changes and records."""
        self._merchant(merchant_id).reveal_round(round_id)

    def set_faults(self, faults: FaultRates, *, merchant_id: str | None = None) -> None:
        """Change a merchant's fault rates (and clock skew) while serving."""
        self._merchant(merchant_id).injector.rates = faults

    def refuse(
        self, endpoint: str, refusal: Refusal | None, *, merchant_id: str | None = None
    ) -> None:
        """Refuse an optional endpoint (``OPTIONAL_ENDPOINTS``) to a merchant from now on, as
        ``refusal`` says; None serves it again."""
        if endpoint not in OPTIONAL_ENDPOINTS:
            raise ValueError(f"only {', '.join(OPTIONAL_ENDPOINTS)} can be refused")
        refusals = self._merchant(merchant_id).refusals
        if refusal is None:
            refusals.pop(endpoint, None)
        else:
            refusals[endpoint] = refusal

    def expire_cursors(self, merchant_id: str | None = None) -> None:
        """Every cursor issued to the merchant so far answers 410 CURSOR_EXPIRED from now on."""
        self._merchant(merchant_id).expire_cursors()

    def expire_next_records_cursor(self, merchant_id: str | None = None) -> None:
        """The next records cursor the merchant presents answers 410 CURSOR_EXPIRED, once;
        change cursors are untouched (see ``SimulatedMerchant.expire_next_records_cursor``)."""
        self._merchant(merchant_id).expire_next_records_cursor()

    def watermark(self, merchant_id: str | None = None) -> str:
        """The sequence of the merchant's newest change ("0" when there is none)."""
        return self._merchant(merchant_id).store.watermark()
