"""Where the lease cannot hold, say so at start.

The lease rests on what the database does when a holder goes silent: it ends the holder's
sessions within the lease (``timeouts``, ``connection``), which frees its locks and rolls back what
it had open.  A server that lacks those settings would keep a paused holder's locks and
transactions for hours, and a SQLite file on a network filesystem is locked per host at best:

- PostgreSQL 14 or newer (``idle_session_timeout`` ends a silent lock session);
- MariaDB 10.3 or newer (``idle_transaction_timeout``); MySQL has no such setting, so MySQL
  servers are refused;
- SQLite on a local filesystem: ``flock`` on NFS, SMB, 9p, Ceph, GlusterFS, Lustre and the
  like does not keep two hosts apart.  Detected from the mount table (Linux); where it cannot
  be told (a FUSE filesystem of unknown kind), nothing is said, and docs/operations.md says
  plainly that several hosts need PostgreSQL or MariaDB.

Each check raises ``ConfigurationError`` with one line naming what to change.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

from sqlalchemy import Connection

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.core.errors import ConfigurationError

POSTGRES_NEEDED: Final = (14, 0)
MARIADB_NEEDED: Final = (10, 3)
NETWORK_FILESYSTEMS: Final = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "ceph",
        "glusterfs",
        "lustre",
        "afs",
        "beegfs",
        "davfs",
        "fuse.sshfs",
        "fuse.glusterfs",
        "fuse.ceph",
        "fuse.s3fs",
        "fuse.rclone",
    }
)
_VERSION: Final = re.compile(r"(\d+)\.(\d+)")


def check_server(conn: Connection) -> None:
    """Refuse a server whose version cannot hold the lease (the module docstring)."""
    backend = conn.dialect.name
    if backend == "postgresql":
        number = int(conn.exec_driver_sql("SHOW server_version_num").scalar_one())
        found = (number // 10000, number // 100 % 100)
        if found < POSTGRES_NEEDED:
            raise ConfigurationError(
                f"PostgreSQL {found[0]} cannot hold recordsync's lease (it lacks "
                "idle_session_timeout): use PostgreSQL 14 or newer"
            )
    elif backend in MYSQL_FAMILY:
        version = str(conn.exec_driver_sql("SELECT VERSION()").scalar_one())
        check_mariadb_version(version)


def check_mariadb_version(version: str) -> None:
    """``SELECT VERSION()`` of a MariaDB or MySQL server: refused unless MariaDB 10.3+."""
    # MariaDB 10 said "5.5.5-10.x.y-MariaDB" to old clients; the real version follows.
    match = _VERSION.search(version.removeprefix("5.5.5-"))
    if "mariadb" not in version.lower() or match is None:
        raise ConfigurationError(
            f"the server says it is {version!r}: recordsync's lease needs MariaDB 10.3 or newer "
            "(MySQL lacks idle_transaction_timeout, which ends a silent holder's transactions)"
        )
    found = (int(match.group(1)), int(match.group(2)))
    if found < MARIADB_NEEDED:
        raise ConfigurationError(
            f"MariaDB {found[0]}.{found[1]} cannot hold recordsync's lease (it lacks "
            "idle_transaction_timeout): use MariaDB 10.3 or newer"
        )


def check_sqlite_file(path: str, *, mountinfo: str | None = None) -> None:
    """Refuse a SQLite file on a network filesystem (``mountinfo``: the mount table's text,
    read from ``/proc/self/mountinfo`` when None; unreadable: nothing is said)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
        except OSError:
            return
    found = filesystem_of(os.path.realpath(path), mountinfo)
    if found is not None and found[1] in NETWORK_FILESYSTEMS:
        mount, kind = found
        raise ConfigurationError(
            f"the SQLite warehouse {path} is on a network filesystem ({kind} at {mount}): its "
            "file locks cannot keep one writer per merchant across hosts; use a local disk, or "
            "PostgreSQL or MariaDB for several hosts"
        )


def filesystem_of(path: str, mountinfo: str) -> tuple[str, str] | None:
    """(mount point, filesystem type) of the mount holding ``path``: the longest mount point
    that is ``path`` or one of its parents (proc(5), /proc/pid/mountinfo)."""
    best: tuple[str, str] | None = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:  # noqa: PLR2004 - the format's fixed fields
            continue
        mount = _unescape(fields[4])
        kind = line.split(" - ", 1)[1].split()[0]
        inside = path == mount or path.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= len(best[0])):
            best = (mount, kind)
    return best


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)
