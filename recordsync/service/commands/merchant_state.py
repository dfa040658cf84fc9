"""``recordsync merchant state ID show|export FILE|import FILE``: a merchant's sync state (the
change cursor, the phase, the snapshot plan and every window's cursor, its lease epoch, the
warehouse it is of) as JSON (``sync.state_document``), to look at, to keep, or to put back.

``show`` and ``export`` only read; an export is written readable by its owner only (it names
the merchant's cursors), through a temporary file no one else can have made or linked.
``import`` replaces the merchant's state whole, and only for a merchant that is paused and
held by nobody, so that no sync reads or writes it meanwhile; its write raises the lease epoch
(``warehouse.state_transfer``), fencing off any writer from before.  The file is validated
first and refused with its reason (another merchant's state, a window past the anchor, a
malformed file), then held against this warehouse (``sync.state_import``): a file of another
warehouse, or one ahead of this warehouse's progress, is refused unless the operator accepts
it by name, and whatever this warehouse has not read is imported unread, to be read again.
Nothing is written when it is refused.  None of the three migrates: the schema must be this
version's (``recordsync migrate`` upgrades it).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

import orjson
import structlog

from recordsync.core.errors import RecordSyncError
from recordsync.core.settings import Settings
from recordsync.core.state import StoredState, SyncState, WindowProgress
from recordsync.service.commands.operator import operator, watching_session
from recordsync.sync.state_document import InvalidStateError, parse, to_document
from recordsync.sync.state_import import ImportPlan, plan_import
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync")


def show_state(settings: Settings, merchant_id: str, *, out: TextIO | None = None) -> int:
    """Print the merchant's state document on ``out`` (stdout)."""
    document = _document(settings, merchant_id)
    (out or sys.stdout).write(_encoded(document).decode())
    return 0


def export_state(settings: Settings, merchant_id: str, path: Path) -> int:
    """Write the merchant's state document to ``path`` (whole or not at all), mode 0600."""
    document = _document(settings, merchant_id)
    write_private(path, _encoded(document))
    print(  # noqa: T201 - the command's last line
        f"merchant {document['merchant_id']}: state exported to {path} ({_summary(document)}), "
        "readable by its owner only"
    )
    return 0


def write_private(path: Path, data: bytes) -> None:
    """``data`` in ``path``, readable by its owner only: written to a new temporary file beside
    it (created exclusively with mode 0600, so no file or link planted there is written
    through), then renamed over ``path`` (which replaces a link rather than following it)."""
    try:
        fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    except OSError as exc:
        raise RecordSyncError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        Path(partial).replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            Path(partial).unlink()
        raise RecordSyncError(f"cannot write {path}: {exc.strerror}") from None


def import_state(
    settings: Settings,
    merchant_id: str,
    path: Path,
    *,
    accept_foreign: bool = False,
    accept_ahead: bool = False,
) -> int:
    """Replace the paused merchant's state with the document in ``path``, held against this
    warehouse (module docstring)."""
    merchant = settings.merchant(merchant_id)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidStateError(f"state file {path}: {exc.strerror}") from None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidStateError(f"state file {path}: not JSON ({exc})") from None
    try:
        incoming = parse(document, merchant.merchant_id)
    except InvalidStateError as exc:
        raise InvalidStateError(f"state file {path}: {exc}") from None
    planned: list[ImportPlan] = []

    def decide(here: StoredState) -> tuple[SyncState | None, list[WindowProgress]]:
        plan = plan_import(
            incoming,
            here,
            configured_history_from=merchant.history_from,
            accept_foreign=accept_foreign,
            accept_ahead=accept_ahead,
        )
        planned.append(plan)
        return plan.state, plan.windows

    warehouse = Warehouse.connect(settings.database_url)
    try:
        warehouse.check_schema()
        if merchant.merchant_id not in warehouse.controls.paused([merchant.merchant_id]):
            raise RecordSyncError(
                f"merchant {merchant.merchant_id} is not paused: a state is imported only "
                f"into a paused merchant (`recordsync merchant pause {merchant.merchant_id}` "
                "first, then resume it)"
            )
        session = watching_session(warehouse)
        try:
            holder = session.holders().get(merchant.merchant_id)
        finally:
            session.close()
        if holder is not None:
            raise RecordSyncError(
                f"merchant {merchant.merchant_id} is paused but replica {holder} still holds "
                "it: try again once `recordsync status` shows it held by nobody"
            )
        try:
            epoch = warehouse.state_transfer.replace(
                merchant.merchant_id, decide, writer=f"state-import {operator()}"
            )
        except InvalidStateError as exc:
            raise InvalidStateError(f"state file {path}: {exc}") from None
    finally:
        warehouse.close()
    (plan,) = planned
    log.info(
        "state_imported",
        merchant_id=merchant.merchant_id,
        epoch=epoch,
        file=str(path),
        reread=plan.reread,
        accepted_foreign=accept_foreign,
        accepted_ahead=accept_ahead,
    )
    again = f"; read again: {'; '.join(plan.reread)}" if plan.reread else ""
    print(  # noqa: T201 - the command's last line
        f"merchant {merchant.merchant_id}: state imported from {path} ({_summary(document)}) "
        f"under lease epoch {epoch}{again}; `recordsync merchant resume {merchant.merchant_id}` "
        "syncs it from there"
    )
    return 0


def _document(settings: Settings, merchant_id: str) -> dict[str, Any]:
    merchant = settings.merchant(merchant_id)
    warehouse = Warehouse.connect(settings.database_url)
    try:
        warehouse.check_schema()
        stored, epoch = warehouse.state_transfer.read(merchant.merchant_id)
    finally:
        warehouse.close()
    return to_document(merchant.merchant_id, stored, epoch=epoch)


def _encoded(document: dict[str, Any]) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


def _summary(document: dict[str, Any]) -> str:
    state = document.get("state")
    phase = "never synced" if state is None else f"phase {state['phase']}"
    windows = document.get("windows") or []
    jobs = len({window["job"] for window in windows})
    return f"{phase}, {len(windows)} windows of {jobs} jobs"
