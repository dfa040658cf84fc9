"""Cooperative stopping: every wait in recordsync goes through a ``Stopper``.

SIGTERM must end the daemon within seconds without abandoning a page half-committed.  So
nothing is ever interrupted mid-commit; instead every *wait* (rate budget, backoff, poll
interval) is a ``Stopper.sleep`` that raises ``ShutdownRequestedError`` as soon as a stop is
asked for, and loops check ``stopped`` before taking a new page.  A child stopper ends with its
parent (a shutdown) or on its own (a rebuild ends one generation of workers, not the process).
"""

from __future__ import annotations

import threading
from typing import Protocol

from recordsync.core.errors import ShutdownRequestedError


class Stoppable(Protocol):
    """Anything a stop must reach: a child ``Stopper``, or a wait of its own to cut short."""

    def stop(self) -> None: ...


class Stopper:
    def __init__(self, parent: Stopper | None = None) -> None:
        self._event = threading.Event()
        self._children: list[Stoppable] = []
        self._lock = threading.Lock()
        if parent is not None:
            parent.adopt(self)

    def adopt(self, child: Stoppable) -> None:
        """Stop ``child`` whenever this stopper stops (at once if it already has)."""
        with self._lock:
            self._children.append(child)
            stopped = self._event.is_set()
        if stopped:
            child.stop()

    def stop(self) -> None:
        self._event.set()
        with self._lock:
            children = list(self._children)
        for child in children:
            child.stop()

    @property
    def stopped(self) -> bool:
        return self._event.is_set()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` or raise ``ShutdownRequestedError`` the moment a stop is asked for."""
        if self._event.wait(max(seconds, 0.0)):
            raise ShutdownRequestedError("stop requested")

    def wait(self, seconds: float) -> bool:
        """Like ``sleep`` but returns True on a stop instead of raising."""
        return self._event.wait(max(seconds, 0.0))
