"""Where the lease cannot hold, the holder refuses to start with one line: a server
too old for the settings that end a silent holder's sessions, MySQL, a SQLite file on a
network filesystem."""

from __future__ import annotations

import pytest

from recordsync.core.errors import ConfigurationError
from recordsync.warehouse import Warehouse
from recordsync.warehouse.lease.support import (
    check_mariadb_version,
    check_sqlite_file,
    filesystem_of,
)

MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 22 0:31 / /mnt/shared rw,relatime shared:2 - nfs4 fileserver:/export rw,vers=4.2
36 35 0:32 / /mnt/shared/local\\040disk rw,relatime shared:3 - ext4 /dev/sdb1 rw
37 22 0:33 / /srv/smb rw,relatime shared:4 - cifs //nas/share rw
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/var/lib/recordsync/w.db", ("/", "ext4")),
        ("/mnt/shared/w.db", ("/mnt/shared", "nfs4")),
        ("/mnt/shared/local disk/w.db", ("/mnt/shared/local disk", "ext4")),
        ("/mnt/sharedness/w.db", ("/", "ext4")),
        ("/srv/smb/deep/w.db", ("/srv/smb", "cifs")),
    ],
    ids=["root", "nfs", "local-under-nfs", "prefix-is-not-a-parent", "cifs"],
)
def test_the_filesystem_of_a_path_is_its_deepest_mount(path, expected):
    assert filesystem_of(path, MOUNTINFO) == expected


@pytest.mark.parametrize("path", ["/mnt/shared/w.db", "/srv/smb/w.db"], ids=["nfs", "cifs"])
def test_a_sqlite_file_on_a_network_filesystem_is_refused_naming_it(path):
    with pytest.raises(ConfigurationError, match="network filesystem") as refused:
        check_sqlite_file(path, mountinfo=MOUNTINFO)
    assert path in str(refused.value)


def test_a_sqlite_file_on_a_local_disk_passes():
    check_sqlite_file("/mnt/shared/local disk/w.db", mountinfo=MOUNTINFO)
    check_sqlite_file("/var/lib/recordsync/w.db", mountinfo=MOUNTINFO)


@pytest.mark.parametrize(
    ("version", "refused"),
    [
        ("10.11.19-MariaDB-0+deb12u1", False),
        ("10.3.39-MariaDB", False),
        ("10.2.44-MariaDB", True),
        ("8.0.36", True),
        ("5.5.5-10.11.6-MariaDB", False),
    ],
    ids=["10.11", "10.3", "10.2", "mysql", "mariadb-behind-a-5.5.5-prefix"],
)
def test_mariadb_must_be_10_3_or_newer_and_mysql_is_refused(version, refused):
    if refused:
        with pytest.raises(ConfigurationError, match=r"MariaDB 10\.3"):
            check_mariadb_version(version)
    else:
        check_mariadb_version(version)


def test_the_test_servers_can_hold_the_lease(warehouse_url):
    store = Warehouse.connect(warehouse_url)
    try:
        store.migrate()
        session = store.fleet_session("replica-a")
        session.close()
    finally:
        store.close()
