"""One merchant's side of the simulated platform: what the platform keeps per merchant.

A merchant has its own secrets, history and live traffic, game catalogue, rate-limit
windows (spec: Limits, the record limit is per merchant; the query limit beside it), fault
dice, statistics and cursor epoch, so that nothing one merchant does shows in what another
sees.  The ``SimulatedApi`` picks the merchant by X-Merchant-Id and works on it; the
``Simulator`` holds one per ``MerchantProfile``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from recordsync.core.secret import Secret
from recordsync.sim.auth import Authenticator
from recordsync.sim.config import MerchantProfile, Refusal
from recordsync.sim.data import LiveEvents, generate_history, seeded
from recordsync.sim.events import EventChannel, EventSender
from recordsync.sim.faults import FaultInjector
from recordsync.sim.games import GameCatalogue
from recordsync.sim.ratelimit import SlidingWindow
from recordsync.sim.stats import EventStatsRecorder, StatsRecorder
from recordsync.sim.store import RoundEnd, Store


class SimulatedMerchant:
    """A merchant's secrets, store, rate limit, faults, statistics and cursor epoch.

    With an ``events_url`` and a ``sender``, its live rounds that end are announced to the
    merchant (spec: Events, Round end) through its ``channel``.
    """

    def __init__(
        self,
        profile: MerchantProfile,
        *,
        clock: Callable[[], float],
        events_url: str | None = None,
        sender: EventSender | None = None,
        query_limit: tuple[int, int] = (10, 1),
    ) -> None:
        """``query_limit``: (requests, seconds) of the query endpoints (the catalogue)."""
        self.profile = profile
        self.merchant_id = profile.merchant_id
        self._clock = clock
        self.injector = FaultInjector(profile.faults, profile.seed)
        history = generate_history(
            seed=profile.seed,
            history_days=profile.history_days,
            rounds_per_day=profile.rounds_per_day,
            now_ms=self.now_ms(),
        )
        # Exactly the game ids the merchant's records draw from (spec: Game).
        self.games = GameCatalogue(profile.seed, history.catalog.game_ids)
        keys = [Secret(profile.secret)]
        if profile.previous_secret:
            keys.append(Secret(profile.previous_secret))
        self.authenticator = Authenticator(profile.merchant_id, tuple(keys))
        self.window = SlidingWindow(profile.record_requests, profile.record_seconds)
        # The catalogue is not under the record limit: it has its own (capabilities.limits
        # query_requests per query_seconds).
        self.query_window = SlidingWindow(*query_limit)
        self.stats = StatsRecorder()
        # The optional endpoints refused to this merchant, and how; changed while serving.
        self.refusals: dict[str, Refusal] = dict(profile.refusals)
        self.event_stats = EventStatsRecorder()
        self.cursor_epoch = 0
        self._records_expiries = 0  # records cursors to refuse (``expire_next_records_cursor``)
        self._expiries_lock = threading.Lock()
        self.channel: EventChannel | None = None
        self._sender = sender
        if events_url is not None and sender is not None:
            self.channel = EventChannel(
                profile.merchant_id,
                events_url,
                secret=self.authenticator.current,
                now=self.now,
                stats=self.event_stats,
            )
        self.store = Store(
            history,
            LiveEvents(profile.seed),
            on_round_end=self._announce if self.channel is not None else None,
            added_fields=profile.added_fields,
        )
        self._hidden_players = seeded(profile.seed, "hidden-rounds")
        self._hidden: dict[str, RoundEnd] = {}

    def __repr__(self) -> str:
        return f"SimulatedMerchant({self.merchant_id!r})"

    def now(self) -> float:
        """The platform's clock as this merchant sees it: the clock plus its clock skew."""
        return self._clock() + self.injector.rates.clock_skew_seconds

    def now_ms(self) -> int:
        return int(self.now() * 1000)

    def step(self, events: int) -> None:
        """``events`` live events at the merchant's now, synchronously (deterministic)."""
        self.store.apply_live(events, self.now_ms())

    def _announce(self, ends: list[RoundEnd]) -> None:
        if self._sender is not None and self.channel is not None:
            self._sender.submit(self.channel, ends)

    def announce_hidden_round(self) -> str:
        """Announce the end of a round the records and record-changes do not show; its id.

        A test hook for the receiver's cross-check: the platform announced a round that never
        reached the warehouse.  ``reveal_round`` makes it appear later.
        """
        if self.channel is None:
            raise RuntimeError(f"merchant {self.merchant_id!r} has no events_url to announce to")
        player = int(self._hidden_players.random() * len(self.store.player_ids))
        end = self.store.unannounced_round_end(str(uuid.uuid4()), player, self.now_ms())
        self._hidden[end.round_id] = end
        self._announce([end])
        return end.round_id

    def reveal_round(self, round_id: str) -> None:
        """Add a hidden round to the records: record-changes and records show it from now on."""
        try:
            end = self._hidden.pop(round_id)
        except KeyError:
            raise KeyError(f"no hidden round {round_id!r} of {self.merchant_id!r}") from None
        self.store.add_ended_round(end, self.now_ms())

    def expire_cursors(self) -> None:
        """Every cursor issued to this merchant so far answers 410 CURSOR_EXPIRED from now on."""
        self.cursor_epoch += 1

    def expire_next_records_cursor(self) -> None:
        """The next records cursor presented answers 410 CURSOR_EXPIRED, as one would 24 h
        after its chain's first page (spec: Records endpoints); change cursors are untouched.

        Exactly the request that meets the expiry is the next one to present a records cursor,
        whenever it comes.  Expiring every cursor issued so far (``expire_cursors``) while a
        sync runs leaves it to timing which holder meets its 410 first: the tail's change
        cursor, presented first, ends the generation for a rebuild and no window chain ever
        presents its own.
        """
        with self._expiries_lock:
            self._records_expiries += 1

    def take_records_expiry(self) -> bool:
        """Whether the records cursor presented now is one ``expire_next_records_cursor``
        asked to refuse (each asks for one)."""
        with self._expiries_lock:
            if self._records_expiries == 0:
                return False
            self._records_expiries -= 1
            return True
