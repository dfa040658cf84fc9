"""``recordsync merchant state ID show|export FILE|import FILE``: a merchant's sync state (the
change cursor, the phase, the snapshot plan and every window's cursor, its lease epoch) as
JSON (``sync.state_document``), to look at, to keep, or to put back.

``show`` and ``export`` only read.  ``import`` replaces the merchant's state whole, and only
for a merchant that is paused and held by nobody, so that no sync reads or writes it
meanwhile; its write raises the lease epoch (``warehouse.state_transfer``), fencing off any
writer from before.  The file is validated first and refused with its reason (another
merchant's state, a window past the anchor, a malformed file): nothing is written then.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

import orjson
import structlog

from recordsync.core.errors import RecordSyncError
from recordsync.core.settings import Settings
from recordsync.service.control import operator, watching_session
from recordsync.sync.state_document import InvalidStateError, parse, to_document
from recordsync.warehouse import Warehouse

log = structlog.get_logger("recordsync")


def show_state(settings: Settings, merchant_id: str, *, out: TextIO | None = None) -> int:
    """Print the merchant's state document on ``out`` (stdout)."""
    document = _document(settings, merchant_id)
    (out or sys.stdout).write(_encoded(document).decode())
    return 0


def export_state(settings: Settings, merchant_id: str, path: Path) -> int:
    """Write the merchant's state document to ``path`` (whole or not at all)."""
    document = _document(settings, merchant_id)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_bytes(_encoded(document))
        partial.replace(path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise RecordSyncError(f"cannot write {path}: {exc.strerror}") from None
    print(  # noqa: T201 - the command's last line
        f"merchant {document['merchant_id']}: state exported to {path} ({_summary(document)})"
    )
    return 0


def import_state(settings: Settings, merchant_id: str, path: Path) -> int:
    """Replace the paused merchant's state with the document in ``path``."""
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
        state, windows = parse(document, merchant.merchant_id)
    except InvalidStateError as exc:
        raise InvalidStateError(f"state file {path}: {exc}") from None
    warehouse = Warehouse.connect(settings.database_url)
    try:
        warehouse.migrate()
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
        epoch = warehouse.state_transfer.write(
            merchant.merchant_id, state, windows, writer=f"state-import {operator()}"
        )
    finally:
        warehouse.close()
    log.info("state_imported", merchant_id=merchant.merchant_id, epoch=epoch, file=str(path))
    print(  # noqa: T201 - the command's last line
        f"merchant {merchant.merchant_id}: state imported from {path} ({_summary(document)}) "
        f"under lease epoch {epoch}; `recordsync merchant resume {merchant.merchant_id}` syncs "
        "it from there"
    )
    return 0


def _document(settings: Settings, merchant_id: str) -> dict[str, Any]:
    merchant = settings.merchant(merchant_id)
    warehouse = Warehouse.connect(settings.database_url)
    try:
        warehouse.check_schema()
        state, windows, epoch = warehouse.state_transfer.read(merchant.merchant_id)
    finally:
        warehouse.close()
    return to_document(merchant.merchant_id, state, windows, epoch=epoch)


def _encoded(document: dict[str, Any]) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


def _summary(document: dict[str, Any]) -> str:
    state = document.get("state")
    phase = "never synced" if state is None else f"phase {state['phase']}"
    windows = document.get("windows") or []
    jobs = len({window["job"] for window in windows})
    return f"{phase}, {len(windows)} windows of {jobs} jobs"
