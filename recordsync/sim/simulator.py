"""The simulator: history, live traffic, faults and the HTTP server, started and stopped as one.

The wall clock is injected (``clock``, Unix seconds as a float) and is the simulator's "now"
for the data, timestamps and cursors; ``monotonic`` times the rate limit and the live
generator; ``sleep`` is the added latency.  Tests drive all three without monkeypatching.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from recordsync.core.secret import Secret
from recordsync.sim.api import SimulatedApi
from recordsync.sim.auth import Authenticator
from recordsync.sim.config import FaultRates, SimConfig
from recordsync.sim.cursors import CursorCodec
from recordsync.sim.data import LiveEvents, generate_history
from recordsync.sim.faults import FaultInjector
from recordsync.sim.ratelimit import SlidingWindow
from recordsync.sim.server import HttpServer
from recordsync.sim.stats import SimStats, StatsRecorder
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
    ) -> None:
        self.config = config = config if config is not None else SimConfig()
        self._clock = clock
        self._monotonic = monotonic
        injector = FaultInjector(config.faults, config.seed)
        now = clock() + config.faults.clock_skew_seconds
        history = generate_history(
            seed=config.seed,
            history_days=config.history_days,
            rounds_per_day=config.rounds_per_day,
            now_ms=int(now * 1000),
        )
        self.store = Store(history, LiveEvents(config.seed))
        keys = [Secret(config.secret)]
        if config.previous_secret:
            keys.append(Secret(config.previous_secret))
        self._window = SlidingWindow(config.record_requests, config.record_seconds)
        self._stats = StatsRecorder()
        self.api = SimulatedApi(
            config,
            self.store,
            authenticator=Authenticator(config.merchant_id, tuple(keys)),
            codec=CursorCodec(secrets.token_bytes(32)),
            injector=injector,
            window=self._window,
            stats=self._stats,
            clock=clock,
            monotonic=monotonic,
            sleep=sleep,
        )
        self._server: HttpServer | None = None
        self._live_thread: threading.Thread | None = None
        self._live_stop = threading.Event()
        self._lifecycle = threading.Lock()

    def __repr__(self) -> str:
        where = self.base_url if self._server is not None else "not started"
        return f"Simulator(merchant_id={self.config.merchant_id!r}, {where})"

    # --- serving ---------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> Simulator:
        """Serve in background threads; port 0 picks a free port (see ``base_url``)."""
        with self._lifecycle:
            if self._server is not None:
                raise RuntimeError("the simulator is already serving")
            server = HttpServer(self.api, host, port)
            server.start()
            self._server = server
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
        """Stop live traffic and the server; safe to call twice."""
        self.stop_live()
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

    def now(self) -> datetime:
        """The simulator's clock (the injected clock plus any configured skew), in UTC."""
        return datetime.fromtimestamp(self.api.now(), UTC)

    def now_ms(self) -> int:
        return int(self.api.now() * 1000)

    def step(self, events: int = 1) -> None:
        """``events`` live events at the simulator's now, synchronously (deterministic)."""
        self.store.apply_live(events, self.now_ms())

    def start_live(self) -> None:
        """Generate ``config.live_rate`` events per second in a background thread."""
        with self._lifecycle:
            if self._live_thread is not None or self.config.live_rate <= 0:
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
        rate = self.config.live_rate
        due = 0.0
        last = self._monotonic()
        while not self._live_stop.wait(_LIVE_TICK_SECONDS):
            now = self._monotonic()
            due += (now - last) * rate
            last = now
            events = int(due)
            if events:
                due -= events
                self.step(events)

    # --- inspection and control ------------------------------------------------------------

    def truth(self) -> dict[str, dict[str, Any]]:
        """record_id -> the record at its highest revision, exactly as the API prints it."""
        return self.store.truth()

    def stats(self) -> SimStats:
        return self._stats.snapshot(self._window.max_in_window)

    def set_faults(self, faults: FaultRates) -> None:
        """Change the fault rates (and clock skew) while serving."""
        self.api.injector.rates = faults

    def expire_cursors(self) -> None:
        """Every cursor issued so far answers 410 CURSOR_EXPIRED from now on."""
        self.api.expire_cursors()

    def watermark(self) -> str:
        """The sequence of the newest change ("0" when there is none)."""
        return self.store.watermark()
