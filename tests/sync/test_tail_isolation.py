"""The tail is never queued behind anything else: it keeps its poll interval on a
host whose every pool thread is taken by a stalled or failing job, of its own merchant or of
another, and a merchant whose platform refuses it retries on its own, slowly."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from support.fakes import FakePlatform, FakeStore, options, tailing_state

from recordsync.core.errors import AuthenticationError, TransportError
from recordsync.core.stopping import Stopper
from recordsync.sync.engine import SyncEngine
from recordsync.sync.jobs import JobHost
from recordsync.sync.ports import GameSource

POLL = 0.05
WINDOW = 1.0


@pytest.fixture
def one_thread() -> Iterator[JobHost]:
    host = JobHost(periodic_threads=1, worker_threads=1)
    yield host
    host.shutdown()


class StalledGames:
    """A catalogue whose every read stalls until released, then times out."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.reads = 0

    def games(self, **_options: object):
        self.reads += 1
        self.release.wait(30)
        raise TransportError("timed out (ReadTimeout)", endpoint="games", retryable=True)


class RefusedPlatform(FakePlatform):
    """A platform that refuses this merchant's secret: 401 to every request."""

    def changes(self, **kwargs):
        self._called("changes", str(kwargs.get("cursor")), kwargs.get("priority"))
        raise AuthenticationError("signature mismatch", endpoint="record-changes", status=401)


@contextmanager
def running(engine: SyncEngine, stopper: Stopper) -> Iterator[None]:
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stopper.stop()
        thread.join(10)
        assert not thread.is_alive()


def polls_during(platform: FakePlatform, seconds: float) -> int:
    before = len(platform.calls_to("changes"))
    time.sleep(seconds)
    return len(platform.calls_to("changes")) - before


def engine_on(
    host: JobHost,
    platform: FakePlatform,
    stopper: Stopper,
    games: GameSource | None = None,
) -> SyncEngine:
    return SyncEngine(
        client=platform,
        warehouse=FakeStore(state=tailing_state()),
        options=options(poll_interval=POLL, stop_when_caught_up=False, catalogue_interval=3600.0),
        stopper=stopper,
        host=host,
        catalogue=None if games is None else (games, FakeStore()),  # type: ignore[arg-type]
    )


def test_the_tail_keeps_its_interval_while_its_catalogue_stalls_the_only_pool_thread(one_thread):
    platform, games, stopper = FakePlatform(), StalledGames(), Stopper()
    with running(engine_on(one_thread, platform, stopper, games), stopper):
        deadline = time.monotonic() + 5
        while not games.reads and time.monotonic() < deadline:
            time.sleep(0.01)
        assert games.reads == 1  # the stalled read holds the pool's only thread
        polls = polls_during(platform, WINDOW)
        games.release.set()
    assert polls >= 0.75 * WINDOW / POLL


def test_a_refused_merchant_on_the_same_host_slows_no_other_tail(one_thread):
    healthy, refused = FakePlatform(), RefusedPlatform()
    stopper = Stopper()
    with (
        running(engine_on(one_thread, refused, stopper), stopper),
        running(engine_on(one_thread, healthy, stopper), stopper),
    ):
        polls = polls_during(healthy, WINDOW)
        refused_polls = polls_during(refused, WINDOW)
    assert polls >= 0.75 * WINDOW / POLL
    assert len(refused.calls_to("changes")) == 1  # then the fatal backoff, in its own thread
    assert refused_polls == 0
