"""SIGTERM and SIGINT: stop taking pages, commit the one in hand, exit; a second one: exit now.

Signals that arrived before this handler took over (``recordsync.core.early_signals``) are
acted on as soon as it does.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import structlog

from recordsync.core import early_signals
from recordsync.core.errors import CommandInterruptedError
from recordsync.core.stopping import Stopper

log = structlog.get_logger("recordsync")


class Received:
    """The signals that stopped a command: a one-shot command that did not finish turns the
    first one into its exit code (``CommandInterruptedError``)."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def interrupted(self, what_now: str) -> CommandInterruptedError | None:
        """The error to end the command with, or None when no signal came."""
        if not self.signals:
            return None
        first = signal.Signals(self.signals[0])
        return CommandInterruptedError(first.name, first.value, what_now)


@contextmanager
def stop_on_signals(stopper: Stopper) -> Iterator[Received]:
    """SIGTERM/SIGINT: stop taking pages, commit the one in hand, exit; a second one: exit now."""
    record = Received()
    if threading.current_thread() is not threading.main_thread():
        yield record
        return
    received = record.signals

    def handle(signum: int, _frame: FrameType | None) -> None:
        if received:
            log.warning("second_signal", signal=signal.Signals(signum).name, action="exit now")
            sys.stderr.flush()
            # A second signal means "now": no cleanup; the committed state is consistent.
            import os  # noqa: PLC0415 - only on this emergency path

            os._exit(128 + signum)
        received.append(signum)
        log.info("stopping", signal=signal.Signals(signum).name)
        stopper.stop()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    for signum in early_signals.take():
        handle(signum, None)
    try:
        yield record
    finally:
        for sig in previous:
            signal.signal(sig, early_signals.remember)
