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

A file is taken only once it is whole and still.  Whole: it holds a secret of the platform's
form (``secret_from_file_bytes``), which a file truncated and half-written again never does.
Still: a file whose content differs from the current secret is read once more ``settle``
seconds later (100 ms, one sleep per refresh whatever the number of merchants), and taken
only when both reads agree; a file rewritten in place a few bytes at a time holds a mix of
the two secrets, of the right length, for a moment.  While the reads differ the current
secret stays and ``secret_file_changing`` is logged (a warning, once); the next refresh takes
the file once it is still.  Taking a half-written file would sign requests with a secret the
platform refuses (a 5-minute backoff) and drop the real previous secret from the overlap.

A file that stays unreadable, empty or malformed (a mount broken, a permission changed) keeps
the last good secret: the sync goes on, ``secret_file_unreadable`` is logged once, and
``secret_file_readable_again`` when it recovers.  Nothing here raises after start-up, and no
secret ever reaches a log line: events name the merchant and the file's path only.

The previous secret is known from a rotation seen while running, or, for a replica started
inside an overlap, from the configuration (``previous_secret_file``, read once at start and
accepted for the overlap from then): without it, callbacks still signed with the old secret
would be refused until the overlap ends.
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
# Seconds between the two reads of a changed file: far above the time a rewrite takes (an
# ``echo >``, a kubelet swap: microseconds), far below the interval.
DEFAULT_SETTLE: Final = 0.1

_log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _Held:
    """One merchant's secrets; changed only under the keeper's lock."""

    source: SecretSource
    current: Secret
    previous: Secret | None = None
    previous_until: float = 0.0  # the keeper's clock
    unreadable: bool = False  # the last read failed (and was logged)
    changing: bool = False  # the last two reads differed (and it was logged)


class _MerchantSecret:
    """The ``SecretProvider`` the client of one merchant asks."""

    def __init__(self, keeper: SecretKeeper, merchant_id: str) -> None:
        self._keeper = keeper
        self._merchant_id = merchant_id

    def current(self) -> Secret:
        return self._keeper.current(self._merchant_id)

    def __repr__(self) -> str:
        return f"SecretKeeper.provider({self._merchant_id!r})"


def _read_bytes(path: Path) -> bytes | OSError:
    try:
        return path.read_bytes()
    except OSError as exc:
        return exc


@dataclass(frozen=True, slots=True)
class _Reading:
    """What a file held on two reads a moment apart: a secret, or why not (a safe reason)."""

    secret: Secret | None = None
    problem: str | None = None
    changing: bool = False  # the two reads differed: being rewritten, try again later


def _settled(first: bytes | OSError, second: bytes | OSError) -> _Reading:
    if isinstance(first, OSError) and isinstance(second, OSError):
        return _Reading(problem=f"cannot be read ({second.strerror or type(second).__name__})")
    if isinstance(first, OSError) or isinstance(second, OSError) or first != second:
        return _Reading(changing=True)
    try:
        return _Reading(secret=secret_from_file_bytes(second))
    except ValueError as exc:
        return _Reading(problem=str(exc))


def _is_secret(data: bytes | OSError, secret: Secret) -> bool:
    if isinstance(data, OSError):
        return False
    try:
        return secret_from_file_bytes(data) == secret
    except ValueError:
        return False


class SecretKeeper:
    """Every merchant's current and previous secret; thread-safe."""

    def __init__(
        self,
        sources: Mapping[str, SecretSource],
        *,
        previous: Mapping[str, SecretSource] | None = None,
        overlap: float = DEFAULT_SECRET_OVERLAP,
        interval: float = DEFAULT_INTERVAL,
        settle: float = DEFAULT_SETTLE,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Read every secret once, and ``previous`` (the operator's previous secrets, accepted
        for ``overlap`` from now); a file without a secret now is a ``ConfigurationError``
        (there is no last good secret to keep yet)."""
        self._overlap = overlap
        self._interval = interval
        self._settle = settle
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        previous = previous or {}
        unknown = sorted(set(previous) - set(sources))
        if unknown:
            raise ConfigurationError(f"a previous secret but no secret for merchants {unknown}")
        files = {
            (merchant_id, kind): source.path
            for kind, given in (("secret", sources), ("previous secret", previous))
            for merchant_id, source in given.items()
            if source.path is not None
        }
        read = self._read_settled(files)
        now = self._clock()
        self._held: dict[str, _Held] = {}
        for merchant_id, source in sources.items():
            current = source.value or read[merchant_id, "secret"]
            held = _Held(source, current)
            before = previous.get(merchant_id)
            if before is not None:
                secret = before.value or read[merchant_id, "previous secret"]
                if secret != current:
                    held.previous, held.previous_until = secret, now + overlap
                    _log.info("secret_previous_accepted", merchant_id=merchant_id, overlap=overlap)
            self._held[merchant_id] = held
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read_settled(self, files: Mapping[tuple[str, str], Path]) -> dict[tuple[str, str], Secret]:
        """Every file's secret, each read twice ``settle`` apart; else a ``ConfigurationError``."""
        if not files:
            return {}
        first = {key: _read_bytes(path) for key, path in files.items()}
        self._sleep(self._settle)
        secrets: dict[tuple[str, str], Secret] = {}
        for (merchant_id, kind), path in files.items():
            reading = _settled(first[merchant_id, kind], _read_bytes(path))
            if reading.changing:
                problem = (
                    "changed while it was read (being rewritten?); start again once it is whole"
                )
            elif reading.problem is not None:
                problem = reading.problem
            else:
                assert reading.secret is not None
                secrets[merchant_id, kind] = reading.secret
                continue
            raise ConfigurationError(f"merchant {merchant_id}: the {kind} file {path} {problem}")
        return secrets

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        interval: float = DEFAULT_INTERVAL,
        settle: float = DEFAULT_SETTLE,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Self:
        """A keeper of every configured merchant that has a secret (``status`` and ``report``
        load none), with the configured previous secrets and overlap."""
        sources = {m.merchant_id: m.secret for m in settings.merchants if m.secret is not None}
        previous = {
            m.merchant_id: m.previous_secret
            for m in settings.merchants
            if m.secret is not None and m.previous_secret is not None
        }
        return cls(
            sources,
            previous=previous,
            overlap=settings.secret_overlap,
            interval=interval,
            settle=settle,
            clock=clock,
            sleep=sleep,
        )

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

        Never raises for a file: an unreadable, malformed or changing one keeps the last good
        secret.  A file that differs from the current secret is read again ``settle`` later
        (one sleep for all of them) and taken only if both reads agree.
        """
        files = {
            merchant_id: held.source.path
            for merchant_id, held in list(self._held.items())
            if held.source.path is not None  # given inline: it changes with a restart only
        }
        first = {merchant_id: _read_bytes(path) for merchant_id, path in files.items()}
        suspect = {
            merchant_id
            for merchant_id, data in first.items()
            if not _is_secret(data, self._held[merchant_id].current)
        }
        if suspect:
            self._sleep(self._settle)
        changed = []
        for merchant_id, path in files.items():
            held = self._held[merchant_id]
            if merchant_id not in suspect:
                self._take(merchant_id, held, path, held.current)
                continue
            reading = _settled(first[merchant_id], _read_bytes(path))
            if reading.changing or reading.problem is not None:
                self._trouble(merchant_id, held, path, reading.problem)
            elif reading.secret is not None and self._take(merchant_id, held, path, reading.secret):
                changed.append(merchant_id)
        return tuple(changed)

    def _trouble(self, merchant_id: str, held: _Held, path: Path, reason: str | None) -> None:
        """Log once that the file is being rewritten (``reason`` None: a warning, it settles by
        itself) or holds no secret (an error: someone must fix the file)."""
        with self._lock:
            if reason is None:
                first, held.changing = not held.changing, True
            else:
                first, held.unreadable, held.changing = not held.unreadable, True, False
        if not first:
            return
        where = {"merchant_id": merchant_id, "path": str(path)}
        if reason is None:
            action = "keeping the current secret until the file reads the same twice"
            _log.warning("secret_file_changing", **where, action=action)
        else:
            action = "signing with the last good secret; fix the file"
            _log.error("secret_file_unreadable", **where, reason=reason, action=action)

    def _take(self, merchant_id: str, held: _Held, path: Path, secret: Secret) -> bool:
        with self._lock:
            recovered = held.unreadable
            held.unreadable = held.changing = False
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
