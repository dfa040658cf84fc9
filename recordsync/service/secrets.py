"""The merchants' secrets as they are now: read from their files, and read again when rotated.

A platform secret rotates with an overlap: for a while the platform accepts the old and the new
one, and the merchant accepts both on callbacks (spec: Authentication, Key rotation).  So the
keeper holds, per merchant, the current secret and the previous one with the time until which
it is still accepted (``RECORDSYNC_SECRET_OVERLAP``), and the client asks it for the current
secret at every attempt (``provider``): a new secret signs the next request, with no restart.

How a change is seen: every ``interval`` seconds (2 s, well inside the 10 s an operator may
expect) ``refresh`` reads each file again *by its path* and compares the content.  Kubernetes
rotates a mounted secret by swapping the ``..data`` symlink of the volume, which keeps the
file's mtime and ends an inotify watch on the file itself; an operator may instead rewrite it
in place.  Reading by path and comparing content sees both, with nothing platform-specific and
no new dependency; a few small reads every 2 s cost nothing.

A file that becomes unreadable or empty (a mount half-updated, a permission changed) keeps the
last good secret: the sync goes on, ``secret_file_unreadable`` is logged once, and
``secret_file_readable_again`` when it recovers.  Nothing here raises after start-up, and no
secret ever reaches a log line: events name the merchant and the file's path only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Self

import structlog

from recordsync.core.errors import ConfigurationError
from recordsync.core.secret import Secret, SecretProvider, SecretSource, secret_from_file_bytes
from recordsync.core.settings import DEFAULT_SECRET_OVERLAP, Settings

DEFAULT_INTERVAL: Final = 2.0

_log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _Held:
    """One merchant's secrets; changed only under the keeper's lock."""

    source: SecretSource
    current: Secret
    previous: Secret | None = None
    previous_until: float = 0.0  # the keeper's clock
    unreadable: bool = False  # the last read failed (and was logged)


class _MerchantSecret:
    """The ``SecretProvider`` the client of one merchant asks."""

    def __init__(self, keeper: SecretKeeper, merchant_id: str) -> None:
        self._keeper = keeper
        self._merchant_id = merchant_id

    def current(self) -> Secret:
        return self._keeper.current(self._merchant_id)

    def __repr__(self) -> str:
        return f"SecretKeeper.provider({self._merchant_id!r})"


def _read(path: Path) -> Secret:
    """The secret in ``path``; ``OSError`` or ``ValueError`` (a safe reason) when there is none."""
    return secret_from_file_bytes(path.read_bytes())


class SecretKeeper:
    """Every merchant's current and previous secret; thread-safe."""

    def __init__(
        self,
        sources: Mapping[str, SecretSource],
        *,
        overlap: float = DEFAULT_SECRET_OVERLAP,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Read every secret once; a file without a secret now is a ``ConfigurationError``
        (there is no last good secret to keep yet)."""
        self._overlap = overlap
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}
        for merchant_id, source in sources.items():
            if source.value is not None:
                self._held[merchant_id] = _Held(source, source.value)
                continue
            assert source.path is not None
            try:
                secret = _read(source.path)
            except OSError as exc:
                raise ConfigurationError(
                    f"merchant {merchant_id}: cannot read the secret file {source.path} "
                    f"({exc.strerror})"
                ) from None
            except ValueError as exc:
                raise ConfigurationError(
                    f"merchant {merchant_id}: the secret file {source.path} {exc}"
                ) from None
            self._held[merchant_id] = _Held(source, secret)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> Self:
        """A keeper of every configured merchant that has a secret (``status`` and ``report``
        load none), with the configured overlap."""
        sources = {m.merchant_id: m.secret for m in settings.merchants if m.secret is not None}
        return cls(sources, overlap=settings.secret_overlap, interval=interval, clock=clock)

    # -- asking ----------------------------------------------------------------------------------

    def current(self, merchant_id: str) -> Secret:
        """The secret to sign with now."""
        with self._lock:
            return self._entry(merchant_id).current

    def accepted(self, merchant_id: str) -> tuple[Secret, ...]:
        """The secrets a callback may be signed with: the current one, and the previous one
        until its overlap ends (spec: Authentication, Key rotation)."""
        with self._lock:
            held = self._entry(merchant_id)
            if held.previous is not None and self._clock() >= held.previous_until:
                held.previous = None  # the overlap is over: forget it
            if held.previous is None:
                return (held.current,)
            return held.current, held.previous

    def provider(self, merchant_id: str) -> SecretProvider:
        """What the merchant's client asks at every attempt."""
        with self._lock:
            self._entry(merchant_id)  # unknown: fail now, not at the first request
        return _MerchantSecret(self, merchant_id)

    def _entry(self, merchant_id: str) -> _Held:
        held = self._held.get(merchant_id)
        if held is None:
            raise ConfigurationError(f"no secret is configured for merchant {merchant_id!r}")
        return held

    # -- reading again ---------------------------------------------------------------------------

    def refresh(self) -> tuple[str, ...]:
        """Read every secret file again; returns the merchants whose secret changed.

        Never raises for a file: an unreadable or empty one keeps the last good secret.
        """
        changed = []
        for merchant_id, held in list(self._held.items()):
            path = held.source.path
            if path is None:
                continue  # given inline: it changes with a restart only
            try:
                secret = _read(path)
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else str(exc)
                self._unreadable(merchant_id, held, path, reason or type(exc).__name__)
                continue
            if self._take(merchant_id, held, path, secret):
                changed.append(merchant_id)
        return tuple(changed)

    def _unreadable(self, merchant_id: str, held: _Held, path: Path, reason: str) -> None:
        with self._lock:
            first = not held.unreadable
            held.unreadable = True
        if first:
            _log.error(
                "secret_file_unreadable",
                merchant_id=merchant_id,
                path=str(path),
                reason=reason,
                action="signing with the last good secret; fix the file",
            )

    def _take(self, merchant_id: str, held: _Held, path: Path, secret: Secret) -> bool:
        with self._lock:
            recovered = held.unreadable
            held.unreadable = False
            rotated = secret != held.current
            if rotated:
                held.previous = held.current
                held.previous_until = self._clock() + self._overlap
                held.current = secret
        if recovered:
            _log.info("secret_file_readable_again", merchant_id=merchant_id, path=str(path))
        if rotated:
            _log.info(
                "secret_rotated", merchant_id=merchant_id, path=str(path), overlap=self._overlap
            )
        return rotated

    # -- the watcher -----------------------------------------------------------------------------

    def start(self) -> None:
        """Refresh every ``interval`` seconds in a thread until ``stop``; safe twice."""
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._watch, name="secret-keeper", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End the watcher and wait for it; safe twice, and before ``start``."""
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _watch(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the watcher must outlive any surprise
                # The type only: a message might quote what was read.
                _log.error("secret_refresh_failed", error=type(exc).__name__)

    def __repr__(self) -> str:
        return f"SecretKeeper(merchants={sorted(self._held)!r})"
