"""Helpers for tests that need a platform: start a simulator and always stop it.

Like ``structlog.testing``, these are public API: the sync's and the client's tests use them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from recordsync.sim.config import SimConfig
from recordsync.sim.simulator import Simulator


@contextmanager
def running_simulator(
    config: SimConfig | None = None,
    *,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    host: str = "127.0.0.1",
    port: int = 0,
    live: bool = False,
) -> Iterator[Simulator]:
    """A started simulator (on an ephemeral port by default), stopped whatever happens."""
    simulator = Simulator(config, clock=clock, monotonic=monotonic, sleep=sleep)
    try:
        simulator.start(host=host, port=port)
        if live:
            simulator.start_live()
        yield simulator
    finally:
        simulator.stop()


class ManualClock:
    """A wall clock that moves only when told to (Unix seconds as a float); thread-safe."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def set(self, now: float) -> None:
        with self._lock:
            self._now = now
