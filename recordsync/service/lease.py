"""One active instance per merchant and warehouse.

Two daemons on the same merchant and warehouse would spend the platform's shared rate budget
twice (spec: Limits, "Record rate" is per merchant).  So the daemon first takes a lease; a
second copy waits as a standby (logging ``lease_waiting``) and takes over when the first dies.

The lease holds the warehouse's lock for the merchant (``Warehouse.merchant_lock``; how each
backend locks is in ``recordsync.warehouse.locks``): the database or the operating system
releases it by itself when its holder dies, so a crashed daemon never blocks its own restart.
A heartbeat thread checks every ``heartbeat`` seconds that the lock is still ours;
``Lease.held`` only reads the result, so the daemon may ask between every page.  When the lock
is lost (a database restart, a killed session, a network failure, a deleted lock file)
``held`` turns False for good, ``on_lost`` is called, and the daemon must stop taking pages
and acquire a new lease.

How fast a standby takes over:

- the holder process dies (crash, SIGKILL, OOM): its sockets and files close, the lock is
  freed at once; the standby holds it within ``poll`` seconds;
- the holder's host or network dies: the server frees the lock of a silent session after
  about ``lease_seconds`` (the heartbeat keeps a live holder's session busy).  The holder's
  own heartbeat fails in about the same time; for a short overlap both may write, which the
  warehouse's revision guard makes harmless (only the budget is spent twice for that while).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final, Self

import structlog

from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.warehouse import MerchantLock, Warehouse

DEFAULT_POLL: Final = 5.0
DEFAULT_HEARTBEAT: Final = 5.0
DEFAULT_LEASE_SECONDS: Final = 60
DEFAULT_LOG_EVERY: Final = 60.0

_log = structlog.get_logger(__name__)


class Lease:
    """A held lease: ``held`` while it lasts, ``release()`` to give it back (idempotent)."""

    def __init__(
        self,
        lock: MerchantLock,
        merchant_id: str,
        *,
        heartbeat: float = DEFAULT_HEARTBEAT,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.merchant_id = merchant_id
        self.resource = lock.resource
        self._lock = lock
        self._io = threading.Lock()  # one user of the lock's connection at a time
        self._done = threading.Event()  # released or lost: the heartbeat ends
        self._lost = threading.Event()
        self._on_lost = on_lost
        self._heartbeat = heartbeat
        self._thread = threading.Thread(target=self._beat, name=f"lease-{merchant_id}", daemon=True)
        self._thread.start()

    @property
    def held(self) -> bool:
        """True until released or lost; reads a flag, no I/O."""
        return not self._done.is_set()

    def release(self) -> None:
        """Give the lease back; safe to call twice and after the lease was lost."""
        released = not self._done.is_set()
        self._done.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._io:
            self._lock.release()
        if released and not self._lost.is_set():
            _log.info("lease_released", merchant_id=self.merchant_id, lease=self.resource)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease(merchant_id={self.merchant_id!r}, resource={self.resource!r})"

    def _beat(self) -> None:
        while not self._done.wait(self._heartbeat):
            with self._io:
                if self._done.is_set():
                    return
                try:
                    still_ours = self._lock.verify()
                    error = None
                except Exception as exc:  # noqa: BLE001 - any failure: the lock is gone
                    still_ours, error = False, f"{type(exc).__name__}: {exc}"
                if still_ours:
                    continue
                self._lost.set()
                self._done.set()
                self._lock.release()  # the connection is unusable; close it
            _log.error(
                "lease_lost",
                merchant_id=self.merchant_id,
                lease=self.resource,
                error=error,
                action="stop taking pages and acquire the lease again",
            )
            if self._on_lost is not None:
                self._on_lost()
            return


def acquire_lease(
    warehouse: Warehouse,
    merchant_id: str,
    *,
    sleep: Callable[[float], None],
    poll: float = DEFAULT_POLL,
    heartbeat: float = DEFAULT_HEARTBEAT,
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    log_every: float = DEFAULT_LOG_EVERY,
    on_lost: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Lease:
    """Block until this process holds the lease for ``merchant_id`` on ``warehouse``.

    ``sleep`` is the stopper's: a shutdown while waiting raises ``ShutdownRequestedError``,
    which propagates after the waiting connection is closed (nothing was held).  A warehouse
    that does not answer is waited for like a lease held elsewhere (``lease_unavailable``).
    """
    if not merchant_id:
        raise ConfigurationError("merchant_id must not be empty")
    if not 0 < heartbeat < lease_seconds / 3 or not 0 < poll < lease_seconds / 3:
        raise ConfigurationError(
            "lease: heartbeat and poll must be positive and below a third of lease_seconds"
        )
    lock = warehouse.merchant_lock(merchant_id, lease_seconds=lease_seconds)
    log = _log.bind(merchant_id=merchant_id, lease=lock.resource)
    started = clock()
    next_log = started
    try:
        while True:
            try:
                if lock.try_acquire():
                    break
                event, level, error = "lease_waiting", "info", None
            except WarehouseUnavailableError as exc:
                event, level, error = "lease_unavailable", "warning", str(exc)
            now = clock()
            if now >= next_log:
                getattr(log, level)(
                    event, waited=round(now - started, 1), poll=poll, error=error, role="standby"
                )
                next_log = now + log_every
            sleep(poll)
    except BaseException:
        lock.release()
        raise
    log.info("lease_acquired", waited=round(clock() - started, 1))
    return Lease(lock, merchant_id, heartbeat=heartbeat, on_lost=on_lost)
