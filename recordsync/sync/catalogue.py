"""The catalogue job: every page of ``GET /v1/games`` read, then stored as one pass.

It runs as a periodic job beside the tail (``engine``), at start and then every
``catalogue_interval`` seconds.  The platform's catalogue is small (a page holds up to 1000
games), so a pass is read whole into memory and handed to the warehouse at once: one
transaction, so a reader never sees half a catalogue.  Its requests go through the client's
query budget, never the record budget (spec: Capabilities, ``limits.query_requests`` per
``query_seconds``), so the catalogue never slows the tail.

A games cursor is valid 24 hours (spec: Endpoints, Games): should one expire mid-pass (a
pass held up by a long outage), the pages read so far are dropped and the pass starts over
from the first page; nothing of the broken pass was stored.  Every read and the commit are
steps of the runner: an outage is waited out, never the end of the daemon.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from recordsync.core.errors import CursorExpiredError
from recordsync.core.models import Game
from recordsync.core.stopping import Stopper
from recordsync.sync.context import SyncContext
from recordsync.sync.ports import CatalogueStore, GameSource

# A pass that keeps losing its cursor gives up until the next interval rather than loop.
MAX_PASS_RESTARTS: Final = 3
MAX_GAMES_PAGE: Final = 1000  # spec: Endpoints, Games (limit 1-1000)


@dataclass(frozen=True, slots=True)
class CataloguePass:
    games: list[Game]
    kept_ids: list[str]  # games seen but rejected by validation: kept as they are
    pages: int
    restarts: int


def read_pass(ctx: SyncContext, source: GameSource, stopper: Stopper) -> CataloguePass:
    """Every page of the catalogue, in order; a 410 mid-pass starts the pass over."""
    runner = ctx.runner(stopper, fatal_is_final=False)
    limit = min(ctx.options.page_size, MAX_GAMES_PAGE)
    restarts = 0
    while True:
        games: list[Game] = []
        kept: list[str] = []
        cursor: str | None = None
        pages = 0
        try:
            while True:
                page = runner.run(
                    lambda at=cursor: source.games(cursor=at, limit=limit),  # type: ignore[misc]
                    what="read catalogue",
                )
                pages += 1
                games.extend(page.games)
                kept.extend(item.record_id for item in page.rejected if item.record_id)
                if page.rejected:
                    ctx.log.warning(
                        "catalogue_games_rejected",
                        count=len(page.rejected),
                        first_reason=page.rejected[0].reason,
                        game_ids=[item.record_id for item in page.rejected[:5]],
                        request_id=page.request_id,
                        action="kept as stored; not counted as gone",
                    )
                if not page.has_more:
                    return CataloguePass(games, kept, pages, restarts)
                cursor = page.next_cursor
        except CursorExpiredError as exc:
            restarts += 1
            ctx.log.warning(
                "catalogue_cursor_expired",
                pages_dropped=pages,
                restarts=restarts,
                request_id=exc.request_id,
                action="the pass starts over"
                if restarts <= MAX_PASS_RESTARTS
                else "given up until the next interval",
            )
            if restarts > MAX_PASS_RESTARTS:
                raise


def refresh_catalogue(
    ctx: SyncContext, source: GameSource, store: CatalogueStore, stopper: Stopper
) -> None:
    """One catalogue pass: read it whole, commit it once, say what changed."""
    merchant_id = ctx.options.merchant_id
    started = time.perf_counter()
    try:
        read = read_pass(ctx, source, stopper)
    except CursorExpiredError:
        return  # logged; the next interval tries again
    runner = ctx.runner(stopper, fatal_is_final=False)
    result = runner.run(
        lambda: store.commit_catalogue(merchant_id, read.games, kept_ids=read.kept_ids),
        what="commit catalogue",
    )
    seconds = time.perf_counter() - started
    ctx.observer.catalogue_refreshed(len(read.games), seconds)
    ctx.log.info(
        "catalogue_refreshed",
        games=len(read.games),
        pages=read.pages,
        restarts=read.restarts,
        added=result.added,
        changed=result.changed,
        unlisted=result.unlisted,
        seconds=round(seconds, 3),
    )
