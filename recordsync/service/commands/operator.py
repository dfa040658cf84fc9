"""Who acts on a merchant from an operator's command, and the session through which the
command watches the fleet without taking part in it: what ``merchant pause|resume`` records
and ``merchant import`` names as the writer.
"""

from __future__ import annotations

import os
import pwd
import socket

from recordsync.warehouse import FleetSession, Warehouse
from recordsync.warehouse.schema import ID_LENGTH


def operator(database_account: str | None = None) -> str:
    """Who acts, as the pause row records it: the user of this process's uid (its name in the
    password database, not ``$LOGNAME`` or ``$USER``, which anyone sets), the host, and the
    database account when the database has accounts (``user@host as account``).  A container
    may have no name for its uid: the uid then."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    who = f"{user}@{socket.gethostname()}"
    if database_account is not None:
        who += f" as {database_account}"
    return who[:ID_LENGTH]


def watching_session(warehouse: Warehouse) -> FleetSession:
    """A session that only asks who holds what and who is live: never holds or writes."""
    return warehouse.fleet_session(f"control-{os.getpid()}", holding=False)
