"""The catalogue job: every page of ``GET /v1/games`` read, then stored as one pass.

It runs as a periodic job beside the tail (``engine``), at start and then every
``catalogue_interval`` seconds.  The platform's catalogue is small (a page holds up to 1000
games), so a pass is read whole into memory and handed to the warehouse at once: one
transaction, so a reader never sees half a catalogue.  Its requests go through the client's
query budget, never the record budget (spec: Capabilities, ``limits.query_requests`` per
``query_seconds``), so the catalogue never slows the tail.

A games cursor is valid 24 hours (spec: Endpoints, Games): should one expire mid-pass (a
pass held up by a long outage), the pages read so far are dropped and the pass starts over
from the first page; nothing of the broken pass was stored.

The catalogue is optional: records sync without it.  A platform that does not serve it to
this merchant (404 from an older platform, 403 without the ``catalog:read`` scope, any other
refusal, or reads failing ``GIVE_UP_AFTER`` times in a row: a 5xx storm, timeouts) turns the
catalogue off for this merchant alone: one warning naming the endpoint and the status, the
metric ``recordsync_catalogue_available`` at 0, the warehouse's ``endpoint_availability``
(``recordsync status``), and a look again every ``recheck`` seconds (hourly), which turns it
back on by itself.  The job never waits in its thread (it runs on a pool shared with every
merchant's jobs, ``core.waiting``): a failed read defers it, and it goes on from the page it
failed on.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Final

from recordsync.core.errors import (
    CursorExpiredError,
    FatalPlatformError,
    PlatformError,
    RateLimitedError,
    RetryableError,
)
from recordsync.core.models import Game, GamesPage
from recordsync.core.state import EndpointAvailability
from recordsync.core.waiting import Deferred
from recordsync.platform.retry import RetryPolicy
from recordsync.sync.context import SyncContext
from recordsync.sync.ports import CatalogueStore, GameSource
from recordsync.sync.resilience import StepRunner

GAMES_ENDPOINT: Final = "games"
# A pass that keeps losing its cursor gives up until the next interval rather than loop.
MAX_PASS_RESTARTS: Final = 3
MAX_GAMES_PAGE: Final = 1000  # spec: Endpoints, Games (limit 1-1000)
# An endpoint the platform refuses is asked again this often (a rare recheck: an hour).
CATALOGUE_RECHECK: Final = 3600.0
# Reads failing in a row (5xx, timeouts, 429) before the catalogue counts as unavailable;
# about half a minute of backoff in all (a minute at most).
GIVE_UP_AFTER: Final = 5
READ_BACKOFF: Final = RetryPolicy(max_attempts=1, base_delay=4.0, max_delay=60.0)


@dataclass(slots=True)
class _Pass:
    """A pass under way: what it read so far and where it goes on."""

    games: list[Game] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # games seen but rejected: kept as stored
    cursor: str | None = None
    pages: int = 0
    started: float = field(default_factory=time.perf_counter)


class CatalogueRefresh:
    """One merchant's catalogue job (module docstring).  ``runner`` is the job's own, for
    the warehouse's steps."""

    def __init__(
        self,
        ctx: SyncContext,
        source: GameSource,
        store: CatalogueStore,
        runner: StepRunner,
        *,
        recheck: float = CATALOGUE_RECHECK,
        rng: random.Random | None = None,
    ) -> None:
        self._ctx = ctx
        self._source = source
        self._store = store
        self._runner = runner
        self._recheck = recheck
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._pass: _Pass | None = None
        self._restarts = 0
        self._failures = 0  # reads that failed in a row
        self._available: bool | None = None  # None: not known yet in this process

    @property
    def available(self) -> bool | None:
        return self._available

    def run(self) -> None:
        """One pass: read it whole, commit it once, say what changed.  Raises ``Deferred``
        to be run again later: after a failed read (it goes on from that page), or in
        ``recheck`` seconds when the platform refuses the catalogue."""
        read = self._read_pass()
        if read is None:
            return  # its cursor kept expiring: given up until the next interval
        result = self._runner.run(
            lambda: self._store.commit_catalogue(read.games, kept_ids=read.kept),
            what="commit catalogue",
        )
        if result.unstorable:
            self._ctx.log.warning(
                "catalogue_games_unstorable",
                count=result.unstorable,
                first=result.first_unstorable,
                action="left out; kept as stored; not counted as gone",
            )
        self._pass, restarts, self._restarts = None, self._restarts, 0
        seconds = time.perf_counter() - read.started
        self._ctx.observer.catalogue_refreshed(len(read.games), seconds)
        self._ctx.log.info(
            "catalogue_refreshed",
            games=len(read.games),
            pages=read.pages,
            restarts=restarts,
            added=result.added,
            changed=result.changed,
            unlisted=result.unlisted,
            seconds=round(seconds, 3),
        )
        self._served()

    def _read_pass(self) -> _Pass | None:
        """Every page of the catalogue, in order, from where a deferred run stopped; a 410
        mid-pass starts the pass over (None: it kept expiring)."""
        limit = min(self._ctx.options.page_size, MAX_GAMES_PAGE)
        while True:
            read = self._pass = self._pass or _Pass()
            try:
                while True:
                    page = self._read(read.cursor, limit)
                    read.pages += 1
                    read.games.extend(page.games)
                    read.kept.extend(item.record_id for item in page.rejected if item.record_id)
                    if page.rejected:
                        self._ctx.log.warning(
                            "catalogue_games_rejected",
                            count=len(page.rejected),
                            first_reason=page.rejected[0].reason,
                            game_ids=[item.record_id for item in page.rejected[:5]],
                            request_id=page.request_id,
                            action="kept as stored; not counted as gone",
                        )
                    if not page.has_more:
                        return read
                    read.cursor = page.next_cursor
            except CursorExpiredError as exc:
                self._pass = None
                self._restarts += 1
                given_up = self._restarts > MAX_PASS_RESTARTS
                self._ctx.log.warning(
                    "catalogue_cursor_expired",
                    pages_dropped=read.pages,
                    restarts=self._restarts,
                    request_id=exc.request_id,
                    action="given up until the next interval"
                    if given_up
                    else "the pass starts over",
                )
                if given_up:
                    self._restarts = 0
                    return None

    def _read(self, cursor: str | None, limit: int) -> GamesPage:
        """One page; a failure defers the job (the pass is kept), a refusal turns the
        catalogue off until the recheck."""
        try:
            page = self._source.games(cursor=cursor, limit=limit)
        except FatalPlatformError as exc:
            self._refused(exc)
            raise Deferred(self._recheck, "the platform refuses the catalogue") from None
        except RetryableError as exc:
            self._failures += 1
            if self._failures >= GIVE_UP_AFTER:
                self._refused(exc)
                raise Deferred(self._recheck, "the catalogue keeps failing") from None
            delay = READ_BACKOFF.backoff(self._failures - 1, self._rng)
            if isinstance(exc, RateLimitedError):
                delay = max(delay, exc.retry_after)
            self._ctx.observer.error(type(exc).__name__)
            self._ctx.log.info(
                "catalogue_read_failed",
                endpoint=GAMES_ENDPOINT,
                status=exc.status,
                code=exc.code,
                error=str(exc),
                failures=self._failures,
                retry_in=round(delay, 3),
                request_id=exc.request_id,
            )
            raise Deferred(delay, "a catalogue read failed") from None
        self._failures = 0
        return page

    def _refused(self, exc: PlatformError) -> None:
        """The platform does not serve the catalogue now: say so (loudly once), drop the pass
        in hand, and record it for ``status``."""
        self._pass, self._failures = None, 0
        first = self._available is not False
        self._available = False
        self._ctx.observer.catalogue_available(available=False)
        fields = {
            "endpoint": GAMES_ENDPOINT,
            "status": exc.status,
            "code": exc.code,
            "error": str(exc),
            "request_id": exc.request_id,
            "retry_in": self._recheck,
        }
        if first:
            self._ctx.log.warning(
                "catalogue_unavailable",
                action="the game catalogue is off for this merchant (its records keep "
                "syncing); the platform is asked again at the recheck",
                **fields,
            )
        else:
            self._ctx.log.info("catalogue_still_unavailable", **fields)
        self._record(
            EndpointAvailability(
                GAMES_ENDPOINT,
                available=False,
                status=exc.status,
                code=exc.code,
                recheck_in=self._recheck,
            )
        )

    def _served(self) -> None:
        if self._available is False:
            self._ctx.log.info("catalogue_available_again", endpoint=GAMES_ENDPOINT)
        self._available = True
        self._ctx.observer.catalogue_available(available=True)
        self._record(
            EndpointAvailability(
                GAMES_ENDPOINT, available=True, recheck_in=self._ctx.options.catalogue_interval
            )
        )

    def _record(self, seen: EndpointAvailability) -> None:
        self._runner.run(
            lambda: self._store.record_availability(seen),
            what="record catalogue availability",
        )
