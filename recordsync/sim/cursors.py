"""Opaque cursors: a compact payload plus an HMAC under a key only the simulator knows.

A cursor is ``base64url(json payload) "." base64url(hmac-sha256[:16])``.  Clients must treat it
as an opaque string (spec: Conventions, Pagination); the HMAC makes any edit detectable, so a
tampered or foreign cursor answers 400 CURSOR_INVALID.  Records cursors are bound to the
merchant, the filters and the watermark, and carry the time of the chain's *first* page, from
which the 24-hour validity runs (spec: Records endpoints).  Change cursors carry a position in
the change log.  Games cursors are bound to the merchant and the status filter and carry the
last game id served and the time of the chain's first page (spec: Endpoints, Games).
All carry the "epoch" that ``Simulator.expire_cursors`` raises.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from typing import Final

import orjson

MAX_CURSOR_LENGTH: Final = 4096  # spec: Limits, cursor length
_TAG_BYTES: Final = 16


class CursorInvalidError(ValueError):
    """The string is not a cursor this simulator issued (or it was altered)."""


@dataclass(frozen=True, slots=True)
class RecordsCursor:
    merchant_id: str
    from_ms: int
    to_ms: int
    player_id: str | None
    game_id: str | None
    watermark: str
    after_ms: int
    after_id: str
    chain_started_ms: int
    epoch: int


@dataclass(frozen=True, slots=True)
class ChangesCursor:
    merchant_id: str
    position: int
    epoch: int


@dataclass(frozen=True, slots=True)
class GamesCursor:
    """Bound to the merchant and the status filter, valid 24 hours (spec: Endpoints, Games)."""

    merchant_id: str
    status: str | None
    after_game_id: str
    chain_started_ms: int
    epoch: int


Cursor = RecordsCursor | ChangesCursor | GamesCursor


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CursorCodec:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def _tag(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:_TAG_BYTES]

    def encode(self, cursor: Cursor) -> str:
        if isinstance(cursor, RecordsCursor):
            fields: list[object] = [
                "r",
                cursor.merchant_id,
                cursor.from_ms,
                cursor.to_ms,
                cursor.player_id,
                cursor.game_id,
                cursor.watermark,
                cursor.after_ms,
                cursor.after_id,
                cursor.chain_started_ms,
                cursor.epoch,
            ]
        elif isinstance(cursor, GamesCursor):
            fields = [
                "g",
                cursor.merchant_id,
                cursor.status,
                cursor.after_game_id,
                cursor.chain_started_ms,
                cursor.epoch,
            ]
        else:
            fields = ["c", cursor.merchant_id, cursor.position, cursor.epoch]
        payload = orjson.dumps(fields)
        return f"{_b64encode(payload)}.{_b64encode(self._tag(payload))}"

    def decode(self, token: str) -> Cursor:
        """The cursor inside ``token``; ``CursorInvalidError`` for anything we did not issue."""
        body, dot, tag = token.partition(".")
        if not dot or not body or not tag or len(token) > MAX_CURSOR_LENGTH:
            raise CursorInvalidError("not a cursor")
        try:
            payload = _b64decode(body)
            received = _b64decode(tag)
        except (binascii.Error, ValueError):
            raise CursorInvalidError("not base64url") from None
        if not hmac.compare_digest(self._tag(payload), received):
            raise CursorInvalidError("the cursor was altered or issued elsewhere")
        try:
            fields = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise CursorInvalidError("bad payload") from None
        return _from_fields(fields)


def _from_fields(fields: object) -> Cursor:
    match fields:
        case [
            "r",
            str() as merchant,
            int() as from_ms,
            int() as to_ms,
            str() | None as player,
            str() | None as game,
            str() as watermark,
            int() as after_ms,
            str() as after_id,
            int() as started,
            int() as epoch,
        ]:
            return RecordsCursor(
                merchant,
                from_ms,
                to_ms,
                player,
                game,
                watermark,
                after_ms,
                after_id,
                started,
                epoch,
            )
        case ["c", str() as merchant, int() as position, int() as epoch]:
            return ChangesCursor(merchant, position, epoch)
        case [
            "g",
            str() as merchant,
            str() | None as status,
            str() as after,
            int() as started,
            int() as epoch,
        ]:
            return GamesCursor(merchant, status, after, started, epoch)
    raise CursorInvalidError("unknown cursor shape")
