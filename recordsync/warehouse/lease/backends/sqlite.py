"""SQLite: one file lock beside the database covers every merchant.

The first process holds them all, a second holds none until the first is gone, as SQLite has
one writer anyway: ``flock`` on ``<database file>.fleet.lock``, which the kernel frees when its
holder dies.  An in-memory database has no other process to fear.  The file says who holds it
(``file_lock_owner``).  A file on a network filesystem is refused before (``support``).
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Collection, Mapping
from pathlib import Path

from recordsync.core.errors import ConfigurationError


class FileLock:
    """``flock`` on a file beside the SQLite database; the kernel frees it when we die.

    The file says who holds it: ``owner`` (the fleet's replica id), else the process id.
    """

    def __init__(self, path: Path, *, owner: str | None = None) -> None:
        self.path = path
        self.resource = f"file {path}"
        self._owner = owner
        self._fd: int | None = None
        self._held = False

    def try_acquire(self) -> bool:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise ConfigurationError(
                    f"lease: cannot open the lock file {self.path}: {exc.strerror}"
                ) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._held = True
        # Who holds it, for a person and for ``file_lock_owner``; the lock is what counts.
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{self._owner or os.getpid()}\n".encode(), 0)
        return True

    def verify(self) -> bool:
        """Still the file at ``path``: a deleted or replaced lock file locks nobody out."""
        if self._fd is None or not self._held:
            return False
        try:
            on_disk = self.path.stat()
        except FileNotFoundError:
            return False
        ours = os.fstat(self._fd)
        return (on_disk.st_dev, on_disk.st_ino) == (ours.st_dev, ours.st_ino)

    def release(self) -> None:
        fd, self._fd, self._held = self._fd, None, False
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the flock


class FileLocks:
    """SQLite: one file lock for every merchant, let go when the last merchant is unlocked.

    A command that held a merchant and hands its job back to a daemon that started unlocks
    it; keeping the file then would lock the daemon out of every merchant until the command
    ends (its handed-back request expired unserved).
    """

    exclusive = True

    listens = False

    def __init__(self, path: Path, *, owner: str) -> None:
        self.resource = f"file {path}"
        self._path = path
        self._owner = owner
        self._lock = FileLock(path, owner=owner)
        self._merchants: set[str] = set()
        self._guard = threading.Lock()

    def try_lock(self, merchant_id: str) -> bool:
        with self._guard:
            if not self._lock.verify():
                self._merchants.clear()
                self._lock.release()  # a deleted or replaced lock file locks nobody out
                if not self._lock.try_acquire():
                    return False
            self._merchants.add(merchant_id)
            return True

    def unlock(self, merchant_id: str) -> None:
        with self._guard:
            self._merchants.discard(merchant_id)
            if not self._merchants:
                self._lock.release()

    def held(self, merchants: Collection[str]) -> frozenset[str]:
        return frozenset(merchants) if self._lock.verify() else frozenset()

    def holders(self, claimed: Mapping[str, str]) -> dict[str, str]:
        owner = self._owner if self._lock.verify() else file_lock_owner(self._path)
        return {merchant: holder for merchant, holder in claimed.items() if holder == owner}

    def keep_alive(self) -> None:
        """The kernel needs no keep-alive."""

    def end_blockers(self, pid: int) -> list[int]:
        """One process writes SQLite: nobody to end."""
        return []

    def wait(self, timeout: float, *, ignore: str) -> bool:
        raise NotImplementedError("SQLite has no notifications: the session sleeps instead")

    def drop_all(self) -> None:
        with self._guard:
            self._merchants.clear()
            self._lock.release()

    def close(self) -> None:
        self.drop_all()


class InMemoryLocks:
    """In-memory SQLite: one process, one connection pool, nobody to lock out."""

    exclusive = True

    listens = False
    resource = "in-memory sqlite (no lock needed)"

    def try_lock(self, merchant_id: str) -> bool:
        return True

    def unlock(self, merchant_id: str) -> None:
        pass

    def held(self, merchants: Collection[str]) -> frozenset[str]:
        return frozenset(merchants)

    def holders(self, claimed: Mapping[str, str]) -> dict[str, str]:
        return dict(claimed)

    def keep_alive(self) -> None:
        pass

    def end_blockers(self, pid: int) -> list[int]:
        """One process writes SQLite: nobody to end."""
        return []

    def wait(self, timeout: float, *, ignore: str) -> bool:
        raise NotImplementedError("SQLite has no notifications: the session sleeps instead")

    def drop_all(self) -> None:
        pass

    def close(self) -> None:
        pass


def file_lock_owner(path: Path) -> str | None:
    """What the holder of the lock file at ``path`` wrote there; None when nobody holds it.

    Probes with a shared lock taken and dropped at once (on a descriptor of its own, so a
    lock this process holds through another descriptor counts as held).  A holder trying to
    lock at that very instant fails once and tries again on its next poll.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 1024, 0).decode(errors="replace").strip() or None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
