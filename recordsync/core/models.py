"""The platform's values as typed, immutable objects (spec: Record, Record change, Capabilities).

Pure: no I/O and no parsing.  Amounts are exact ``Decimal`` values and times aware
``datetime`` values; the wire format is read into these by ``recordsync.platform.parsing``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Final

import msgspec

KNOWN_STATUSES: Final = frozenset({"OPEN", "SETTLED", "VOID"})


@dataclass(frozen=True, slots=True)
class Limits:
    """``capabilities.limits``; ``record_requests`` per ``record_seconds`` is the shared budget."""

    record_requests: int
    record_seconds: int
    max_page_size: int
    query_requests: int | None = None
    query_seconds: int | None = None
    max_body_bytes: int | None = None


DEFAULT_LIMITS: Final = Limits(record_requests=2, record_seconds=1, max_page_size=1000)


@dataclass(frozen=True, slots=True)
class Currency:
    code: str
    decimal_scale: int


@dataclass(frozen=True, slots=True)
class Capabilities:
    wallet_mode: str
    currencies: tuple[Currency, ...]
    limits: Limits


class Record(msgspec.Struct, frozen=True, gc=False):
    """One game round at one revision; amounts are exact ``Decimal`` values.

    A frozen msgspec ``Struct`` rather than a dataclass, for the number made of it (every
    record synced, thousands a second): msgspec builds a records page's in C, a quarter
    faster than it built dataclasses (``platform.parsing``), and ``gc=False`` keeps them out of
    the cycle collector, which no longer walks the thousands a page holds until it commits.
    That is safe because a record holds only strings, ints, ``Decimal`` and ``datetime``
    values, which never form a cycle.  Build a changed copy with
    ``msgspec.structs.replace``.
    """

    record_id: str
    revision: int
    player_id: str
    game_id: str
    currency: str
    round_id: str
    parent_round_id: str | None
    bet_amount: Decimal
    refund_amount: Decimal
    payout_amount: Decimal
    net_amount: Decimal
    status: str
    created_at: datetime
    settled_at: datetime | None
    updated_at: datetime
    # The members the platform sent that recordsync does not know (spec: Conventions 3), as
    # one JSON object whose values are the bytes received, numbers as their decimal text:
    # kept with the row so that a field added by the platform is never lost; None when the
    # record had none, which is every record until the platform adds one.
    extra_fields: str | None = None

    @property
    def status_known(self) -> bool:
        return self.status in KNOWN_STATUSES


@dataclass(frozen=True, slots=True)
class RecordChange:
    """One change of the change stream; ``sequence`` is a decimal string of any length."""

    sequence: str
    record_id: str
    revision: int
    changed_at: datetime
    record: Record


@dataclass(frozen=True, slots=True)
class RejectedItem:
    """An item that failed validation: kept whole for the quarantine, never dropped."""

    position: int
    raw: bytes
    reason: str
    record_id: str | None


@dataclass(frozen=True, slots=True)
class RecordsPage:
    records: list[Record]
    rejected: list[RejectedItem]
    next_cursor: str | None
    has_more: bool
    snapshot_watermark: str
    projection_as_of: datetime | None
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChangesPage:
    changes: list[RecordChange]
    rejected: list[RejectedItem]
    next_cursor: str
    has_more: bool
    projection_as_of: datetime | None
    request_id: str | None = None
    unknown_statuses: list[str] = field(default_factory=list)


# -- the game catalogue (spec: Game; Endpoints, Games) ------------------------------------------

GAME_STATUSES: Final = frozenset({"AVAILABLE", "MAINTENANCE", "DISABLED"})


@dataclass(frozen=True, slots=True)
class Localization:
    """A name in one language (spec: Game, ``localizations[]``); icons are not kept."""

    language: str
    name: str


@dataclass(frozen=True, slots=True)
class Game:
    """One catalogue entry: what BI needs to name a ``game_id``.

    Icons (asset references) are not kept: recordsync never downloads them.  ``status`` is
    kept as received, even a status the spec does not list (Game status: transitions not
    shown), like a record's status.
    """

    game_id: str
    name: str
    brand: str | None
    category: str | None
    category_name: str | None
    status: str
    launch_supported: bool
    provider_code: str | None
    provider_name: str | None
    client_version: str | None
    languages: tuple[str, ...]
    localizations: tuple[Localization, ...]


@dataclass(frozen=True, slots=True)
class GamesPage:
    games: list[Game]
    rejected: list[RejectedItem]  # ``record_id`` holds the game id, when it had one
    next_cursor: str | None
    has_more: bool
    request_id: str | None = None
