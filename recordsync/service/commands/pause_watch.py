"""A command holding a merchant's lease obeys a pause within a tick, as a daemon does.

A daemon reads the pauses at every fleet tick and lets a paused merchant go (``fleet.member``);
a command that holds the lease itself (``backfill``, ``merchant resync``, ``verify``, ``verify
--repair`` run here because no daemon held the merchant) has no fleet tick.  So while it works
it has this watch: a thread that looks at the merchant's pause every ``LOOK_EVERY`` seconds
(the fleet's tick) and, once it finds one, stops the command's ``Stopper``: the page in hand is
committed, no new request is sent, the lease is let go, and the command ends with one line
naming the pause (``paused_error``).  The operator's ``merchant pause``, which waits until
nobody holds the merchant, then ends with "its holder let go".

A command refuses a merchant paused before it starts (``refuse_before_any_request``), before
its client asks the platform anything.

A look that fails (the warehouse busy or away for a moment) is simply tried again at the next
tick: the command's own writes would meet the same outage and wait it out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Final, Self

import structlog

from recordsync.core.errors import ConfigurationError, RecordSyncError
from recordsync.core.stopping import Stopper
from recordsync.fleet.member import DEFAULT_TICK
from recordsync.service.commands.handover import refuse_if_paused
from recordsync.warehouse import Pause
from recordsync.warehouse.reader import WarehouseReader

log = structlog.get_logger("recordsync")

# Seconds: the fleet's tick, at which a daemon obeys a pause (the command passes its
# settings' ``fleet_tick``).
LOOK_EVERY: Final = DEFAULT_TICK


class PauseWatch:
    """Stop ``stopper`` once ``merchant_id`` is paused; ``paused`` is
    ``ControlStore.paused``.  A context manager: the thread lives for the block."""

    def __init__(
        self,
        paused: Callable[[list[str]], Mapping[str, Pause]],
        merchant_id: str,
        stopper: Stopper,
        *,
        look_every: float = LOOK_EVERY,
    ) -> None:
        self._paused = paused
        self._merchant_id = merchant_id
        self._stopper = stopper
        self._look_every = look_every
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.pause: Pause | None = None  # the pause found, once found

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._watch, name="pause-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=self._look_every + 10.0)

    def _watch(self) -> None:
        while not self._done.wait(self._look_every):
            try:
                pause = self._paused([self._merchant_id]).get(self._merchant_id)
            except RecordSyncError as exc:  # a warehouse blip: the next tick looks again
                log.debug("pause_look_failed", error=str(exc))
                continue
            if pause is not None:
                self.pause = pause
                log.warning(
                    "command_paused",
                    merchant_id=self._merchant_id,
                    paused_by=pause.by,
                    reason=pause.reason,
                    action="stopping: the page in hand is committed, then the lease let go",
                )
                self._stopper.stop()
                return

    def error(self, what: str, what_now: str) -> RecordSyncError | None:
        """The command's last word when a pause stopped it (None when none did)."""
        if self.pause is None:
            return None
        return paused_error(self.pause, self._merchant_id, what=what, what_now=what_now)


def refuse_before_any_request(database_url: str, merchant_id: str, *, what: str) -> None:
    """Refuse a paused merchant before the command builds its client, whose start asks the
    platform's capabilities: a paused merchant sees no request at all.  A warehouse not
    there yet, or at a schema behind this version, has no pause to read: the command creates
    or migrates it, and its own check applies."""
    try:
        reader = WarehouseReader.open(database_url)
    except ConfigurationError:
        return
    try:
        refuse_if_paused(reader.paused, merchant_id, what=what)
    finally:
        reader.close()


def paused_error(pause: Pause, merchant_id: str, *, what: str, what_now: str) -> RecordSyncError:
    """``what`` stopped by ``pause`` while it ran, and what becomes of its work."""
    why = f", {pause.reason}" if pause.reason else ""
    return RecordSyncError(
        f"{what} stopped: merchant {merchant_id} was paused while it ran (since "
        f"{pause.since.isoformat(timespec='seconds')} by {pause.by}{why}); {what_now}"
    )
