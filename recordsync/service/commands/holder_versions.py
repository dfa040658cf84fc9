"""Whether the replica holding a merchant can do what a command is about to ask of it.

During a rolling upgrade the holder may run an earlier version: one before revision 0014 reads
no pause (``merchant_controls``) and skips the request kinds it does not know (a resync, a
reset), so a command that asked it would wait for ever, or say what is not so.  Each replica
says its version and the kinds it takes in ``replicas`` (``warehouse.lease.replicas``); a command
asks here first and refuses with one line naming the replica, having written nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from recordsync.core.errors import RecordSyncError
from recordsync.warehouse import FleetSession, RequestKind


class HolderCannotError(RecordSyncError):
    """The merchant's holder runs a version that cannot do what was asked."""


def refuse_unless_holder_obeys_pause(session: FleetSession, merchant_id: str) -> None:
    holder = session.holders().get(merchant_id)
    if holder is None:
        return
    said = session.replica_version(holder)
    if said is not None and not said.obeys_pause:
        raise HolderCannotError(
            f"merchant {merchant_id} is held by replica {holder}, which runs an earlier version "
            "of recordsync that does not obey a pause: nothing was paused; upgrade or stop that "
            "replica first"
        )


def refuse_unless_holder_takes(session: FleetSession, merchant_id: str, kind: RequestKind) -> None:
    holder = session.holders().get(merchant_id)
    if holder is None:
        return
    said = session.replica_version(holder)
    if said is not None and not said.takes(kind):
        version = said.version or "an earlier version"
        raise HolderCannotError(
            f"merchant {merchant_id} is held by replica {holder} ({version}), which does not "
            f"take {kind.value} requests: nothing was asked; upgrade that replica first"
        )


def ask_if_holder_takes(
    session: FleetSession, merchant_id: str, kind: RequestKind, ask: Callable[[], int]
) -> int:
    """``ask`` (insert the request; its id) once the holder is known to take ``kind``."""
    refuse_unless_holder_takes(session, merchant_id, kind)
    return ask()
