"""The request book on the warehouse's engine: each call one short transaction, its errors
translated (``WarehouseUnavailableError`` when the database is away), as a holder's watcher and
a following command need (what each move means: ``book``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine

from recordsync.warehouse.connection import WRITE_OPTION, translate_errors
from recordsync.warehouse.requests import book, previous
from recordsync.warehouse.values import HolderRequest, RequestKind, RequestState


class RequestStore:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})

    def ask(
        self,
        merchant_id: str,
        kind: RequestKind,
        start: datetime,
        end: datetime,
        *,
        key: str | None = None,
        repair: bool = False,
    ) -> int:
        """Hand work on ``[start, end)`` to the merchant's holder; its request id (with ``key``,
        an unfinished request of the same kind and key is followed rather than duplicated)."""
        with translate_errors(f"request {kind.value}"), self._writer.begin() as conn:
            return book.ask(conn, merchant_id, kind, start, end, key=key, repair=repair)

    def get(self, request_id: int) -> HolderRequest | None:
        """The request as it stands (the requester follows it)."""
        with translate_errors("read request"), self._engine.begin() as conn:
            return book.get(conn, request_id)

    def follow(self, request_id: int) -> HolderRequest | None:
        """Note a look of the command following the request (``book.follow``, so that no
        holder starts it once that command is gone); the request as it stands."""
        with translate_errors("follow request"), self._writer.begin() as conn:
            return book.follow(conn, request_id)

    def unfinished(self, merchant_ids: tuple[str, ...]) -> list[HolderRequest]:
        """The merchants' pending and running requests of every kind, oldest first (running
        ones a previous holder did not finish included: take them up).  One query."""
        if not merchant_ids:
            return []
        with translate_errors("read requests"), self._engine.begin() as conn:
            return book.unfinished(conn, merchant_ids)

    def start(self, request_id: int, holder: str) -> None:
        """Mark an unfinished request running under ``holder``; LookupError when there is none
        (finished, cancelled, pending past its limit: ``book.START_WITHIN``, or its command
        gone: then failed with the reason, ``book.FOLLOWED_WITHIN``)."""
        with translate_errors("start request"), self._writer.begin() as conn:
            started = book.start(conn, request_id, holder)
        if not started:
            raise LookupError(f"request {request_id} not started: {book.unfollowed_reason()}")

    def finish(
        self, request_id: int, *, failed: str | None = None, result: str | None = None
    ) -> None:
        """Mark an unfinished request done (with ``result``), or failed with the reason (shown
        to the requester, so never a secret); LookupError when there is none."""
        with translate_errors("finish request"), self._writer.begin() as conn:
            book.finish(conn, request_id, failed=failed, result=result)

    def expire(self, merchant_ids: tuple[str, ...]) -> list[HolderRequest]:
        """Fail the merchants' pending requests older than their limit (``book.expire``): the
        holder before it starts any, the following command at each look."""
        if not merchant_ids:
            return []
        with translate_errors("read requests"), self._engine.begin() as conn:
            overdue = book.overdue(conn, merchant_ids)
        if not overdue:
            return []
        with translate_errors("expire requests"), self._writer.begin() as conn:
            return book.expire(conn, overdue)

    def cancel(self, request_id: int) -> RequestState:
        """Cancel an unfinished request; the state it had.  LookupError once it is finished."""
        with translate_errors("cancel request"), self._writer.begin() as conn:
            return book.cancel(conn, request_id)

    def note(self, request_id: int, progress: str) -> None:
        """Keep a running request's progress (``book.note``); LookupError once not running."""
        with translate_errors("note request"), self._writer.begin() as conn:
            book.note(conn, request_id, progress)

    def fail_previous(self, merchant_ids: tuple[str, ...]) -> int:
        """Fail what a previous version's commands asked of these merchants (``previous``)."""
        if not merchant_ids:
            return 0
        with translate_errors("answer previous requests"), self._writer.begin() as conn:
            return previous.fail_previous(conn, merchant_ids)
