"""One merchant's side of the simulated platform: what the platform keeps per merchant.

A merchant has its own secrets, history and live traffic, game catalogue, rate-limit
windows (spec: Limits, the record limit is per merchant; the query limit beside it), fault
dice, statistics and cursor epoch, so that nothing one merchant does shows in what another
sees.  The ``SimulatedApi`` picks the merchant by X-Merchant-Id and works on it; the
``Simulator`` holds one per ``MerchantProfile``.
"""

from __future__ import annotations

from collections.abc import Callable

from recordsync.core.secret import Secret
from recordsync.sim.auth import Authenticator
from recordsync.sim.config import MerchantProfile
from recordsync.sim.data import LiveEvents, generate_history
from recordsync.sim.faults import FaultInjector
from recordsync.sim.games import GameCatalogue
from recordsync.sim.ratelimit import SlidingWindow
from recordsync.sim.stats import StatsRecorder
from recordsync.sim.store import Store


class SimulatedMerchant:
    """A merchant's secrets, store, rate limit, faults, statistics and cursor epoch."""

    def __init__(
        self,
        profile: MerchantProfile,
        *,
        clock: Callable[[], float],
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
        self.store = Store(history, LiveEvents(profile.seed))
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
        self.cursor_epoch = 0

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

    def expire_cursors(self) -> None:
        """Every cursor issued to this merchant so far answers 410 CURSOR_EXPIRED from now on."""
        self.cursor_epoch += 1
