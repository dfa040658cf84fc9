"""Records and changes as the API prints them (spec: Record, Record change, Conventions).

Money is printed with exactly the currency's decimal_scale, times with exactly three
millisecond digits and ``Z``.  JSON is assembled from trusted pieces (UUIDs, digits, fixed
words) without a dict per record: this is the hot path of every page.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Final

import orjson

from recordsync.sim.added_fields import AddedField, members_text
from recordsync.sim.data import (
    CURRENCIES,
    NO_TIME,
    SETTLED,
    STATUS_NAMES,
    UNIT_DIGITS,
    Catalog,
    Columns,
)

_ONE: Final = 10**UNIT_DIGITS


@functools.lru_cache(maxsize=1 << 16)
def _second_text(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def format_ms(ms: int) -> str:
    """Unix milliseconds as RFC3339 UTC with exactly three fraction digits and ``Z``."""
    seconds, millis = divmod(ms, 1000)
    return f"{_second_text(seconds)}.{millis:03d}Z"


def format_amount(units: int, scale: int) -> str:
    """An amount in units of 10**-4 with exactly ``scale`` fraction digits (never rounded).

    Amounts are always whole multiples of the currency's smallest unit, so cutting the
    digits beyond ``scale`` drops only zeros.
    """
    whole, fraction = divmod(abs(units), _ONE)
    sign = "-" if units < 0 else ""
    if scale == 0:
        return f"{sign}{whole}"
    return f"{sign}{whole}.{f'{fraction:04d}'[:scale]}"


class Renderer:
    """Prints records at a given change, from the columns, as JSON bytes."""

    def __init__(
        self, catalog: Catalog, cols: Columns, added_fields: tuple[AddedField, ...] = ()
    ) -> None:
        self.cols = cols
        self.added_fields = added_fields
        self.player_ids = catalog.player_ids
        self.game_ids = catalog.game_ids
        self.currency_codes = tuple(code for code, _, _, _ in CURRENCIES)
        self.currency_scales = tuple(scale for _, scale, _, _ in CURRENCIES)

    def record_text(self, change: int) -> str:
        """The full record at the revision that ``change`` produced."""
        cols = self.cols
        record = cols.rec[change]
        revision = cols.revision[change]
        status = cols.status[change]
        currency = cols.currency[record]
        scale = self.currency_scales[currency]
        bet = cols.bet[record] if revision > 1 else 0
        refund = cols.refund[change]
        payout = cols.payout[change]
        parent = cols.parent[record]
        parent_text = f'"{cols.round_id(parent)}"' if parent >= 0 else "null"
        settled = cols.settled_ms[record] if status == SETTLED else NO_TIME
        settled_text = f'"{format_ms(settled)}"' if settled != NO_TIME else "null"
        return (
            f'{{"record_id":"{cols.record_id(record)}","revision":{revision},'
            f'"player_id":"{self.player_ids[cols.player[record]]}",'
            f'"game_id":"{self.game_ids[cols.game[record]]}",'
            f'"currency":"{self.currency_codes[currency]}",'
            f'"round_id":"{cols.round_id(record)}","parent_round_id":{parent_text},'
            f'"bet_amount":"{format_amount(bet, scale)}",'
            f'"refund_amount":"{format_amount(refund, scale)}",'
            f'"payout_amount":"{format_amount(payout, scale)}",'
            f'"net_amount":"{format_amount(payout + refund - bet, scale)}",'
            f'"status":"{STATUS_NAMES[status]}",'
            f'"created_at":"{format_ms(cols.created_ms[record])}",'
            f'"settled_at":{settled_text},'
            f'"updated_at":"{format_ms(cols.changed_ms[change])}"'
            f"{self._added(change)}}}"
        )

    def _added(self, change: int) -> str:
        if not self.added_fields:
            return ""
        return members_text(self.added_fields, change, self.cols.changed_ms[change])

    def record_json(self, change: int) -> bytes:
        return self.record_text(change).encode()

    def change_json(self, change: int, sequence: int) -> bytes:
        """One item of a record-changes page: the change and the full record after it."""
        cols = self.cols
        return (
            f'{{"sequence":"{sequence}","record_id":"{cols.record_id(cols.rec[change])}",'
            f'"revision":{cols.revision[change]},'
            f'"changed_at":"{format_ms(cols.changed_ms[change])}",'
            f'"record":{self.record_text(change)}}}'
        ).encode()

    def record_dict(self, change: int) -> dict[str, Any]:
        record: dict[str, Any] = orjson.loads(self.record_text(change))
        return record
