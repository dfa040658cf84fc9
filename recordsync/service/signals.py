"""SIGTERM and SIGINT: stop taking pages, commit the one in hand, exit; a second one: exit now.
(A command with no page in hand, each step its own transaction, ends at once: ``end_on_signals``.)

Signals that arrived before this handler took over (``recordsync.core.early_signals``) are
acted on as soon as it does.

The handler itself only queues the signal (``queue.SimpleQueue.put``, which Python makes safe
to call from a signal handler); a thread of its own logs it and stops the work.  A handler runs
in the main thread between two bytecodes, possibly inside a log write that holds the writer's
lock: logging from the handler took that lock a second time and the process hung for ever
(a backfill interrupted while it logged never ended).
"""

from __future__ import annotations

import os
import queue
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
    arrived: queue.SimpleQueue[int] = queue.SimpleQueue()

    def handle(signum: int, _frame: FrameType | None) -> None:
        arrived.put(signum)  # nothing else here: see the module docstring

    watcher = threading.Thread(
        target=_act_on, args=(arrived, record, stopper), name="signals", daemon=True
    )
    watcher.start()
    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    for signum in early_signals.take():
        handle(signum, None)
    try:
        yield record
    finally:
        for sig in previous:
            signal.signal(sig, early_signals.remember)
        arrived.put(_DONE)
        watcher.join(timeout=5)


_DONE = 0  # no signal has the number 0: the watcher's end


def _act_on(arrived: queue.SimpleQueue[int], record: Received, stopper: Stopper) -> None:
    """The first signal stops the work; a second one ends the process at once."""
    while (signum := arrived.get()) != _DONE:
        name = signal.Signals(signum).name
        if record.signals:
            log.warning("second_signal", signal=name, action="exit now")
            sys.stdout.flush()
            sys.stderr.flush()
            # A second signal means "now": no cleanup; the committed state is consistent.
            os._exit(128 + signum)
        # Recorded before the stop, so whoever the stop wakes sees which signal it was.
        record.signals.append(signum)
        log.info("stopping", signal=name)
        stopper.stop()


class _Ended(KeyboardInterrupt):
    """Raised out of ``end_on_signals``' handler.  A ``KeyboardInterrupt``, so that what
    Ctrl-C unwinds specially (the drivers cancel the statement they wait on) a SIGTERM unwinds
    the same way."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def end_on_signals(what_now: str) -> Iterator[None]:
    """SIGTERM or SIGINT end the block at once, wherever it is, as ``CommandInterruptedError``
    (one line, exit 128 + the signal) saying ``what_now``: for a command whose every step is
    a transaction of its own (``fields promote``), where a stop leaves what a kill would and
    the same command carries on from there, so no page is waited for.  Python's default was a
    KeyboardInterrupt's traceback on the terminal for Ctrl-C, and no word at all for SIGTERM.

    Raising from the handler takes no lock, so unlike logging there (``stop_on_signals``) it
    cannot wait for one the interrupted main thread holds."""

    ended: list[int] = []

    def end(signum: int, _frame: FrameType | None) -> None:
        if ended:  # a second one while the first unwinds: now, as stop_on_signals' second
            os._exit(128 + signum)
        ended.append(signum)
        raise _Ended(signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, end) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for signum in early_signals.take():
            end(signum, None)
        yield
    except _Ended as exc:
        first = signal.Signals(exc.signum)
        raise CommandInterruptedError(first.name, first.value, what_now) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
