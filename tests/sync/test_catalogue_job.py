"""The catalogue job: an optional endpoint the platform does not serve turns the
catalogue off for that merchant alone, says so once, and is looked at again hourly; a failed
read never waits in the job's thread, and a deferred pass goes on where it stopped."""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import pytest
from structlog.testing import capture_logs
from support.fakes import FakePlatform, FakeStore, RecordingObserver, make_context

from recordsync.core.errors import (
    AuthenticationError,
    CursorExpiredError,
    PlatformError,
    RequestRejectedError,
    ServerError,
    TransportError,
)
from recordsync.core.models import Game, GamesPage
from recordsync.core.state import EndpointAvailability
from recordsync.core.stopping import Stopper
from recordsync.core.waiting import Deferred
from recordsync.sync.catalogue import CATALOGUE_RECHECK, GIVE_UP_AFTER, CatalogueRefresh


def game(game_id: str) -> Game:
    return Game(
        game_id=game_id,
        name=f"Game {game_id}",
        brand=None,
        category=None,
        category_name=None,
        status="AVAILABLE",
        launch_supported=True,
        languages=("en",),
        client_version=None,
        provider_code=None,
        provider_name=None,
        localizations=(),
    )


@dataclass
class Games:
    """The platform's catalogue: two pages of two games; ``script`` answers first."""

    script: list[BaseException | None] = field(default_factory=list)
    cursors: list[str | None] = field(default_factory=list)

    def games(self, *, cursor=None, status=None, limit=1000, priority=None) -> GamesPage:
        self.cursors.append(cursor)
        if self.script:
            outcome = self.script.pop(0)
            if outcome is not None:
                raise outcome
        first = cursor is None
        ids = ("g1", "g2") if first else ("g3", "g4")
        return GamesPage(
            games=[game(game_id) for game_id in ids],
            rejected=[],
            next_cursor="page-2" if first else None,
            has_more=first,
            request_id=f"req-{len(self.cursors)}",
        )


@dataclass
class Catalogue:
    passes: list[list[str]] = field(default_factory=list)
    seen: list[EndpointAvailability] = field(default_factory=list)

    def commit_catalogue(self, games: Sequence[Game], *, kept_ids: Collection[str] = ()):
        self.passes.append([item.game_id for item in games])
        return _Counts(len(games))

    def record_availability(self, seen: EndpointAvailability) -> None:
        self.seen.append(seen)


@dataclass(frozen=True)
class _Counts:
    added: int
    changed: int = 0
    unlisted: int = 0
    unstorable: int = 0
    first_unstorable: str | None = None


class AvailabilityObserver(RecordingObserver):
    def __init__(self) -> None:
        super().__init__()
        self.available: list[bool] = []

    def catalogue_available(self, *, available: bool) -> None:
        self.available.append(available)


def refresh(source: Games) -> tuple[CatalogueRefresh, Catalogue, AvailabilityObserver]:
    observer = AvailabilityObserver()
    ctx = make_context(FakePlatform(), FakeStore(), observer=observer, page_size=2)
    store = Catalogue()
    job = CatalogueRefresh(
        ctx,
        source,
        store,
        ctx.runner(Stopper(), fatal_is_final=False),
        rng=random.Random(1),
    )
    return job, store, observer


def run(job: CatalogueRefresh) -> float | None:
    """One run; the seconds it asked to be deferred, or None when it ended."""
    try:
        job.run()
    except Deferred as later:
        return later.seconds
    return None


def refusal(status: int, code: str) -> PlatformError:
    if status == 401:
        return AuthenticationError("refused", endpoint="games", status=status, code=code)
    return RequestRejectedError("refused", endpoint="games", status=status, code=code)


@pytest.mark.parametrize(
    ("status", "code"),
    [(404, "RESOURCE_NOT_FOUND"), (403, "FORBIDDEN"), (401, "AUTHENTICATION_FAILED")],
    ids=["not-served", "no-scope", "secret-refused"],
)
def test_a_refused_catalogue_is_off_with_one_warning_and_looked_at_again_hourly(status, code):
    source = Games(script=[refusal(status, code)] * 3)
    job, store, observer = refresh(source)
    with capture_logs() as logs:
        waits = [run(job) for _ in range(3)]
    assert waits == [CATALOGUE_RECHECK] * 3
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert [entry["event"] for entry in warnings] == ["catalogue_unavailable"]
    assert (warnings[0]["endpoint"], warnings[0]["status"], warnings[0]["code"]) == (
        "games",
        status,
        code,
    )
    assert [entry["event"] for entry in logs if entry["log_level"] == "info"] == [
        "catalogue_still_unavailable"
    ] * 2
    assert observer.available == [False] * 3
    assert store.seen[-1] == EndpointAvailability(
        "games", available=False, status=status, code=code, recheck_in=CATALOGUE_RECHECK
    )
    assert store.passes == []
    assert job.available is False


@pytest.mark.parametrize(
    "error",
    [
        ServerError("boom", endpoint="games", status=500, code="INTERNAL_ERROR", retryable=True),
        TransportError("timed out (ReadTimeout)", endpoint="games", retryable=True),
    ],
    ids=["5xx-storm", "timeouts"],
)
def test_reads_that_keep_failing_back_off_then_turn_the_catalogue_off(error):
    source = Games(script=[error] * GIVE_UP_AFTER)
    job, store, observer = refresh(source)
    with capture_logs() as logs:
        waits = [run(job) for _ in range(GIVE_UP_AFTER)]
    backoffs, last = waits[:-1], waits[-1]
    assert all(wait is not None and 0 <= wait <= 60 for wait in backoffs)
    assert last == CATALOGUE_RECHECK
    assert [entry["event"] for entry in logs if entry["log_level"] == "warning"] == [
        "catalogue_unavailable"
    ]
    assert observer.available == [False]
    assert store.seen[-1].status == error.status
    assert run(job) is None  # the recheck: served again
    assert store.passes == [["g1", "g2", "g3", "g4"]]
    assert observer.available == [False, True]


def test_a_deferred_pass_goes_on_from_the_page_it_failed_on():
    failure = ServerError("boom", endpoint="games", status=503, retryable=True)
    source = Games(script=[None, failure])
    job, store, _observer = refresh(source)
    assert run(job) is not None  # page 2 failed: deferred
    assert run(job) is None
    assert source.cursors == [None, "page-2", "page-2"]  # page 1 was not read again
    assert store.passes == [["g1", "g2", "g3", "g4"]]


def test_a_catalogue_served_again_is_said_once_and_recorded_available():
    source = Games(script=[refusal(404, "RESOURCE_NOT_FOUND")])
    job, store, observer = refresh(source)
    assert run(job) == CATALOGUE_RECHECK
    with capture_logs() as logs:
        assert run(job) is None
    assert "catalogue_available_again" in [entry["event"] for entry in logs]
    assert observer.available == [False, True]
    assert store.seen[-1] == EndpointAvailability("games", available=True, recheck_in=3600.0)
    assert job.available is True


def test_a_pass_that_keeps_losing_its_cursor_gives_up_until_the_next_interval():
    expiry = CursorExpiredError("expired", endpoint="games", status=410, code="CURSOR_EXPIRED")
    source = Games(script=[None, *[item for _ in range(4) for item in (expiry, None)]])
    job, store, observer = refresh(source)
    with capture_logs() as logs:
        assert run(job) is None
    expired = [entry for entry in logs if entry["event"] == "catalogue_cursor_expired"]
    assert [entry["action"] for entry in expired][-1] == "given up until the next interval"
    assert store.passes == []
    assert observer.available == []  # not a refusal: the platform serves the catalogue
