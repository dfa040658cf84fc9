"""What may be written to ``records``: one row per record_id, and only what the columns hold.

Spec, Records endpoints: "The same record may appear several times; the client keeps, per
record_id, the highest revision", and snapshot pages and change pages arrive in any order
relative to each other.  A page is first collapsed to its highest revision per record_id
(``collapse``): PostgreSQL refuses an ``ON CONFLICT DO UPDATE`` that touches the same row
twice in one statement, and fewer rows is less work.  The revision guard itself, "replace a
stored row only with a higher revision", is in the merge statements (``pages.writer``).

A record the columns cannot hold (an identifier longer than the column, an amount beyond
NUMERIC(30,4), a revision beyond BIGINT, a NUL character PostgreSQL refuses) would fail the
whole page on every retry: a crash loop.  ``unstorable()`` finds those first, and the caller
quarantines them with the reason, on every backend alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal
from itertools import chain
from operator import attrgetter
from typing import Final

from recordsync.core.models import Record
from recordsync.warehouse.schema import CODE_LENGTH, ID_LENGTH, records
from recordsync.warehouse.types import (
    MONEY_PRECISION,
    MONEY_SCALE,
)

_KEY: Final = ("merchant_id", "record_id")
# Every column an update replaces; ``revision`` last, which matters on MariaDB.
_UPDATED: Final = (
    *(column.name for column in records.columns if column.name not in {*_KEY, "revision"}),
    "revision",
)

MAX_REVISION: Final = 2**63 - 1  # BIGINT
_MONEY_DIGITS: Final = MONEY_PRECISION - MONEY_SCALE  # integer digits NUMERIC(30,4) holds
_ID_FIELDS: Final = ("record_id", "player_id", "game_id", "round_id", "parent_round_id")
_CODE_FIELDS: Final = ("currency", "status")
_AMOUNT_FIELDS: Final = ("bet_amount", "refund_amount", "payout_amount", "net_amount")


def collapse(batch: Iterable[Record]) -> list[Record]:
    """The highest revision per record_id (the first one on a tie), ordered by record_id."""
    best: dict[str, Record] = {}
    for record in batch:
        held = best.get(record.record_id)
        if held is None or record.revision > held.revision:
            best[record.record_id] = record
    return [best[record_id] for record_id in sorted(best)]


def fits(r: Record) -> bool:
    """The fast check: true for every sane record, in a few comparisons."""
    return (
        max(len(r.record_id), len(r.player_id), len(r.game_id), len(r.round_id)) <= ID_LENGTH
        and (r.parent_round_id is None or len(r.parent_round_id) <= ID_LENGTH)
        and max(len(r.currency), len(r.status)) <= CODE_LENGTH
        and r.revision <= MAX_REVISION
        and max(
            r.bet_amount.adjusted(),
            r.refund_amount.adjusted(),
            r.payout_amount.adjusted(),
            r.net_amount.adjusted(),
        )
        < _MONEY_DIGITS
        and "\x00"
        not in f"{r.record_id}{r.player_id}{r.game_id}{r.round_id}"
        f"{r.parent_round_id or ''}{r.currency}{r.status}"
    )


def unstorable(record: Record) -> str | None:
    """Why the warehouse columns cannot hold ``record``, or None when they can."""
    if fits(record):
        return None
    for name in (*_ID_FIELDS, *_CODE_FIELDS):
        value = getattr(record, name)
        if value is None:
            continue
        limit = ID_LENGTH if name in _ID_FIELDS else CODE_LENGTH
        if len(value) > limit:
            return (
                f"{name}: {len(value)} characters, more than the warehouse column holds ({limit})"
            )
        if "\x00" in value:
            return f"{name}: contains a NUL character, which the warehouse cannot store"
    if record.revision > MAX_REVISION:
        return f"revision: {record.revision} exceeds the warehouse maximum ({MAX_REVISION})"
    for name in _AMOUNT_FIELDS:
        if getattr(record, name).adjusted() >= _MONEY_DIGITS:
            return f"{name}: more than {_MONEY_DIGITS} integer digits, beyond NUMERIC(30,4)"
    return None  # pragma: no cover - fits and the checks above test the same limits


_IDS: Final = attrgetter("record_id", "player_id", "game_id", "round_id")
_CODES: Final = attrgetter("currency", "status")
_AMOUNTS: Final = attrgetter(*_AMOUNT_FIELDS)
_PARENT: Final = attrgetter("parent_round_id")
_REVISION: Final = attrgetter("revision")


def all_fit(batch: Sequence[Record]) -> bool:
    """``all(map(fits, batch))``, the same limits tested column by column for the whole page.

    Every record of every page synced passes here: ``fits`` per record cost about 1.5 us (a
    call, four ``adjusted`` calls and an f-string); these loops run in C (``map`` over
    ``attrgetter``, one ``join`` for the NUL test), about 1.3 us (bench/README.md).
    """
    ids = [*chain.from_iterable(map(_IDS, batch)), *filter(None, map(_PARENT, batch))]
    codes = [*chain.from_iterable(map(_CODES, batch))]
    return (
        max(map(len, ids), default=0) <= ID_LENGTH
        and max(map(len, codes), default=0) <= CODE_LENGTH
        and max(map(_REVISION, batch), default=0) <= MAX_REVISION
        and max(map(Decimal.adjusted, chain.from_iterable(map(_AMOUNTS, batch))), default=0)
        < _MONEY_DIGITS
        and "\x00" not in "".join(ids)
        and "\x00" not in "".join(codes)
    )


def split_unstorable(batch: list[Record]) -> tuple[list[Record], list[tuple[Record, str]]]:
    """(records the columns hold, [(record, reason)] for the others); one pass when all fit."""
    if all_fit(batch):
        return batch, []
    reasons = [(record, unstorable(record)) for record in batch]
    fitting = [record for record, reason in reasons if reason is None]
    return fitting, [(record, reason) for record, reason in reasons if reason is not None]
