"""SIGTERM or SIGINT before the daemon is ready to stop gracefully must still end it cleanly.

systemd and Kubernetes may stop a service at any moment, including while Python is still
importing.  ``install()`` runs first thing in ``main()`` and only remembers the signal;
the graceful handler takes over later and acts on what was remembered (nothing had been
committed yet, so stopping then is trivially safe).  After the graceful handler is removed
(the daemon is closing down), signals are remembered again instead of killing the process
mid-cleanup.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

_received: list[int] = []
_lock = threading.Lock()


def remember(signum: int, _frame: FrameType | None) -> None:
    with _lock:
        _received.append(signum)


def install() -> None:
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, remember)


def take() -> list[int]:
    """The signals received so far (each delivered once)."""
    with _lock:
        taken = list(_received)
        _received.clear()
    return taken
