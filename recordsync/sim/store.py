"""The platform's record state in memory: records, their revisions, the change log (thread-safe).

Every revision is one change with a sequence.  Sequences start above 2**64 so that a client
that stores them in a 64-bit integer fails at once (spec: Record change, "decimal string").

Snapshots (spec: Records endpoints): a records chain freezes a watermark W at its first
request; every page of the chain shows each record as of W (its newest change with a sequence
<= W) and hides records first created after W, so the chain is one consistent snapshot while
live traffic goes on.  Changes are only ever appended, so "as of W" never changes.
"""

from __future__ import annotations

import bisect
import threading
import uuid
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from recordsync.sim.added_fields import AddedField
from recordsync.sim.data import (
    CURRENCIES,
    NO_TIME,
    OPEN,
    SETTLED,
    History,
    LiveEvents,
    RoundState,
    state_at,
)
from recordsync.sim.render import Renderer

SEQUENCE_BASE: Final = 2**64 + 1_000_000_007
NO_WATERMARK: Final = "0"  # spec: a merchant that never had a record


@dataclass(frozen=True, slots=True)
class RecordsSlice:
    items: list[bytes]
    last_key: tuple[int, str] | None  # (created_ms, record_id) of the last item
    has_more: bool


@dataclass(frozen=True, slots=True)
class ChangesSlice:
    items: list[bytes]
    end: int  # the position the next page starts at
    has_more: bool


@dataclass(frozen=True, slots=True)
class RoundEnd:
    """A live round that has just ended: it left OPEN (SETTLED, or VOID by a full refund).

    What the round-end notification needs (spec: Events, Round end); ``ended_ms`` is the time
    of the change that ended it.
    """

    round_id: str
    parent_round_id: str | None
    player_id: str
    currency: str
    ended_ms: int


RoundEndListener = Callable[[list[RoundEnd]], None]


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """Window [from_ms, to_ms) plus optional player and game (already known to be UUIDs)."""

    from_ms: int
    to_ms: int
    player_id: str | None = None
    game_id: str | None = None


class Store:
    """Holds the columns and serves consistent slices of them under one lock."""

    def __init__(
        self,
        history: History,
        live: LiveEvents,
        *,
        on_round_end: RoundEndListener | None = None,
        added_fields: tuple[AddedField, ...] = (),
    ) -> None:
        self._lock = threading.Lock()
        # Told of the live rounds that end, after the lock is released (history rounds ended
        # before anyone listened and are never announced).
        self._on_round_end = on_round_end
        self._catalog = history.catalog
        self._cols = history.columns
        self._live = live
        self._render = Renderer(self._catalog, self._cols, added_fields)
        self._player_index = {pid: i for i, pid in enumerate(self._catalog.player_ids)}
        self._game_index = {gid: i for i, gid in enumerate(self._catalog.game_ids)}
        # Records in API order; history indexes already are, live rounds are inserted.
        self._api_order = array("i", range(self._cols.record_count))

    # --- positions and watermarks -------------------------------------------------------

    @property
    def change_count(self) -> int:
        with self._lock:
            return self._cols.change_count

    @property
    def player_ids(self) -> tuple[str, ...]:
        return self._catalog.player_ids

    @property
    def record_count(self) -> int:
        with self._lock:
            return self._cols.record_count

    def watermark(self) -> str:
        """The sequence of the newest change, or "0" when there has never been one."""
        with self._lock:
            count = len(self._cols.order)
        return NO_WATERMARK if count == 0 else str(SEQUENCE_BASE + count - 1)

    @staticmethod
    def visible_count(watermark: str) -> int:
        """How many change positions a watermark covers."""
        return 0 if watermark == NO_WATERMARK else int(watermark) - SEQUENCE_BASE + 1

    @staticmethod
    def sequence_of(position: int) -> int:
        return SEQUENCE_BASE + position

    @staticmethod
    def position_of(sequence: int) -> int:
        return sequence - SEQUENCE_BASE

    def first_position_since(self, since_ms: int) -> int:
        """The first position whose change happened at or after ``since_ms`` (inclusive)."""
        with self._lock:
            cols = self._cols
            return bisect.bisect_left(cols.order, since_ms, key=cols.changed_ms.__getitem__)

    def changed_ms_at(self, position: int) -> int | None:
        """When the change at ``position`` happened, or None past the end of the log."""
        with self._lock:
            cols = self._cols
            if position >= len(cols.order):
                return None
            return cols.changed_ms[cols.order[position]]

    def last_changed_ms(self) -> int | None:
        with self._lock:
            cols = self._cols
            return cols.changed_ms[cols.order[-1]] if cols.order else None

    # --- reads -----------------------------------------------------------------------------

    def records(
        self,
        where: RecordFilter,
        *,
        watermark: str,
        after: tuple[int, str] | None,
        limit: int,
    ) -> RecordsSlice:
        """One page of a snapshot: records of the window as of ``watermark``, in API order."""
        visible = self.visible_count(watermark)
        with self._lock:
            cols = self._cols
            api_order = self._api_order
            player = self._filter_index(self._player_index, where.player_id)
            game = self._filter_index(self._game_index, where.game_id)
            if player is None or game is None:
                return RecordsSlice([], None, has_more=False)
            key = cols.order_key
            if after is None:
                start = bisect.bisect_left(api_order, (where.from_ms, b""), key=key)
            else:
                after_key = (after[0], bytes.fromhex(after[1].replace("-", "")))
                start = bisect.bisect_right(api_order, after_key, key=key)
            stop = bisect.bisect_left(api_order, (where.to_ms, b""), key=key)
            items: list[bytes] = []
            last = -1
            has_more = False
            player_of, game_of = cols.player, cols.game
            change_at, render = cols.change_at, self._render.record_json
            for index in range(start, stop):
                record = api_order[index]
                if (player >= 0 and player_of[record] != player) or (
                    game >= 0 and game_of[record] != game
                ):
                    continue
                change = change_at(record, visible)
                if change < 0:  # created after the watermark
                    continue
                if len(items) == limit:
                    has_more = True
                    break
                items.append(render(change))
                last = record
            last_key = (cols.created_ms[last], cols.record_id(last)) if last >= 0 else None
            return RecordsSlice(items, last_key, has_more=has_more)

    @staticmethod
    def _filter_index(index: dict[str, int], value: str | None) -> int | None:
        """-1 for no filter, the index of a known value, None for a value with no records."""
        if value is None:
            return -1
        return index.get(value.lower())

    def changes(self, start: int, limit: int) -> ChangesSlice:
        """Changes from position ``start`` on, at most ``limit`` of them."""
        with self._lock:
            cols = self._cols
            total = len(cols.order)
            end = min(start + limit, total)
            order, render = cols.order, self._render.change_json
            items = [render(order[p], SEQUENCE_BASE + p) for p in range(start, end)]
            return ChangesSlice(items, end, has_more=end < total)

    def stale_changes(self, positions: list[int]) -> list[bytes]:
        """Older changes printed again (for the duplicated-changes fault)."""
        with self._lock:
            order, render = self._cols.order, self._render.change_json
            return [render(order[p], SEQUENCE_BASE + p) for p in positions]

    def previous_position(self, position: int) -> int | None:
        """The position of the previous revision of the record changed at ``position``."""
        with self._lock:
            cols = self._cols
            before = cols.prev[cols.order[position]]
            return None if before < 0 else cols.position[before]

    def truth(self) -> dict[str, dict[str, Any]]:
        """Every record at its newest revision, exactly as the API prints it."""
        with self._lock:
            cols = self._cols
            render = self._render.record_dict
            return {
                cols.record_id(record): render(change)
                for record, change in enumerate(cols.last_change)
                if change >= 0
            }

    def truth_text(self) -> dict[str, str]:
        """Every record at its newest revision as the JSON text the API sends: the members a
        decoder would round (a 30-digit number the platform added) kept as sent."""
        with self._lock:
            cols = self._cols
            render = self._render.record_text
            return {
                cols.record_id(record): render(change)
                for record, change in enumerate(cols.last_change)
                if change >= 0
            }

    # --- writes ----------------------------------------------------------------------------

    def apply_live(self, count: int, now_ms: int) -> int:
        """``count`` live events at ``now_ms``: new rounds or new revisions; returns the count.

        Change times never go backwards (a sequence is also a time order), so an event is
        stamped no earlier than the newest change.  The rounds that end are handed to the
        ``on_round_end`` listener once the lock is released.
        """
        ended: list[RoundEnd] | None = [] if self._on_round_end is not None else None
        with self._lock:
            cols = self._cols
            live = self._live
            for _ in range(count):
                last = cols.changed_ms[cols.order[-1]] if cols.order else now_ms
                when = max(now_ms, last)
                if not live.wants_new_round(cols.record_count) and self._revise(when, ended):
                    continue
                self._create_round(when)
        if ended and self._on_round_end is not None:
            self._on_round_end(ended)
        return count

    def _round_end(self, record: int, when: int) -> RoundEnd:
        cols = self._cols
        parent = cols.parent[record]
        return RoundEnd(
            round_id=cols.round_id(record),
            parent_round_id=cols.round_id(parent) if parent >= 0 else None,
            player_id=self._catalog.player_ids[cols.player[record]],
            currency=CURRENCIES[cols.currency[record]][0],
            ended_ms=when,
        )

    def _revise(self, when: int, ended: list[RoundEnd] | None) -> bool:
        cols = self._cols
        record = self._live.pick_record(cols.record_count)
        change = cols.last_change[record]
        state = state_at(cols, change)
        following = self._live.advance(
            state,
            currency=cols.currency[record],
            child=cols.parent[record] >= 0,
            now_ms=when,
        )
        if following is None:
            return False
        cols.add_change(record, following, when)
        if ended is not None and state.status == OPEN and following.status != OPEN:
            ended.append(self._round_end(record, when))
        return True

    def unannounced_round_end(self, round_id: str, player: int, now_ms: int) -> RoundEnd:
        """The end of a round that is not in the store (yet): see ``add_ended_round``."""
        with self._lock:
            return RoundEnd(
                round_id=round_id,
                parent_round_id=None,
                player_id=self._catalog.player_ids[player],
                currency=CURRENCIES[self._catalog.player_currency[player]][0],
                ended_ms=now_ms,
            )

    def add_ended_round(self, end: RoundEnd, now_ms: int) -> None:
        """Add the round ``end`` describes, created and settled (no bet, no payout) now.

        For the hidden-round test hook: a round announced before the records show it
        appears in record-changes (two changes) and in records from now on.  No round-end
        listener hears of it: it was announced already.
        """
        with self._lock:
            cols = self._cols
            last = cols.changed_ms[cols.order[-1]] if cols.order else now_ms
            when = max(now_ms, last)
            player = self._player_index[end.player_id]
            record = cols.add_record(
                record_id=uuid.uuid4().bytes,  # not drawn from the live stream: leaves it as it was
                round_id=bytes.fromhex(end.round_id.replace("-", "")),
                player=player,
                game=0,
                currency=self._catalog.player_currency[player],
                parent=-1,
                created_ms=when,
            )
            cols.add_change(record, RoundState(1, 0, 0, 0, OPEN, NO_TIME), when)
            cols.add_change(record, RoundState(2, 0, 0, 0, SETTLED, when), when)
            bisect.insort(self._api_order, record, key=cols.order_key)

    def _create_round(self, when: int) -> None:
        cols = self._cols
        new = self._live.new_round(self._catalog, cols)
        record = cols.add_record(
            record_id=new.record_id,
            round_id=new.round_id,
            player=new.player,
            game=new.game,
            currency=new.currency,
            parent=new.parent,
            created_ms=when,
        )
        cols.add_change(record, RoundState(1, 0, 0, 0, OPEN, NO_TIME), when)
        bisect.insort(self._api_order, record, key=cols.order_key)
