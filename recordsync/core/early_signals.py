"""SIGTERM or SIGINT before the daemon is ready to stop gracefully must still end it cleanly.

systemd and Kubernetes may stop a service at any moment, including while Python is still
importing.  ``install()`` runs first thing in ``main()`` and only remembers the signal;
the graceful handler takes over later and acts on what was remembered (nothing had been
committed yet, so stopping then is trivially safe).  After the graceful handler is removed
(the daemon is closing down), signals are remembered again instead of killing the process
mid-cleanup.
"""

from __future__ import annotations

import queue
import signal
import threading
from types import FrameType

# SimpleQueue.put may be called from a signal handler (Python says so); a lock may not: the
# handler could interrupt the main thread while it holds that very lock (``take``), and wait
# for it for ever.
_received: queue.SimpleQueue[int] = queue.SimpleQueue()


def remember(signum: int, _frame: FrameType | None) -> None:
    _received.put(signum)


def install() -> None:
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, remember)


def take() -> list[int]:
    """The signals received so far (each delivered once)."""
    taken = []
    while True:
        try:
            taken.append(_received.get_nowait())
        except queue.Empty:
            return taken
