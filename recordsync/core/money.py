"""Exact money: decimal strings in, ``Decimal`` out, never a float (spec: Conventions, Money).

The platform sends amounts as decimal strings with at most 4 fraction digits, no exponent, no
``+`` sign, no whitespace.  One transaction is at most 999999999999.9999, but a record's amounts
are cumulative (several payouts, several refunds), so record amounts are *not* capped: a record
may legitimately exceed the per-transaction maximum.  Callers that validate a single transaction
pass ``per_transaction=True``.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from decimal import Decimal

from recordsync.core.errors import InvalidRecordError

MAX_TRANSACTION_AMOUNT = Decimal("999999999999.9999")

# Optional minus, integer part without superfluous leading zeros, optional 1-4 fraction digits.
# "-0" and "-0.00" are accepted: the platform may print a zero net amount with a sign.
# Possessive quantifiers (``*+``, ``?+``): giving characters back could never make a
# mismatch match (what follows a part is never what the part takes), so the engine is told
# not to try; the same strings match, about twice as fast over a page (``bench/parse.py``).
_MONEY = re.compile(r"-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]{1,4}+)?+")


# Amounts repeat (zero refunds, common stakes and payouts): the hot path remembers the
# strings it has already validated.  Decimal is immutable, so sharing one is safe; the cache
# only ever holds strings that passed the check, and it is emptied when full, so its memory
# is bounded whatever the data.
_KNOWN: dict[str, Decimal] = {}
_KNOWN_LIMIT = 4096


def amount_or_none(value: object) -> Decimal | None:
    """The exact amount of a valid money string, or None where ``parse_money`` would raise.

    For the per-record hot path (``models``): one dictionary lookup for an amount seen before.
    """
    if type(value) is not str:  # exactly str: a str subclass takes parse_money's full path
        return None
    amount = _KNOWN.get(value)
    if amount is None:
        if _MONEY.fullmatch(value) is None:
            return None
        amount = Decimal(value)
        if len(_KNOWN) >= _KNOWN_LIMIT:
            _KNOWN.clear()
        _KNOWN[value] = amount
    return amount


# Many amounts, each followed by a comma: one regex pass over a whole page's amounts.
_MONEY_LIST = re.compile(rf"(?:{_MONEY.pattern},)*+")


def all_money(values: Collection[str]) -> bool:
    """True when every string of ``values`` has the money form (``parse_money`` takes it).

    One regex pass over the joined strings instead of a call per amount; the comma count
    proves that no value itself holds the separator.
    """
    text = ",".join(values) + "," if values else ""
    return text.count(",") == len(values) and _MONEY_LIST.fullmatch(text) is not None


def parse_money(value: object, *, field: str, per_transaction: bool = False) -> Decimal:
    """Parse one amount exactly or raise ``InvalidRecordError`` naming the field.

    The original string survives: ``Decimal("10.50")`` keeps its exponent, so ``str()`` gives
    back exactly what the platform sent.
    """
    amount = amount_or_none(value)
    if amount is None:
        if not isinstance(value, str):
            raise InvalidRecordError(
                f"{field}: expected a decimal string, got {type(value).__name__}"
            )
        if _MONEY.fullmatch(value) is None:
            raise InvalidRecordError(
                f"{field}: {value[:40]!r} is not a decimal string with at most 4 fraction digits"
            )
        amount = Decimal(value)  # a str subclass with the right form
    if per_transaction and abs(amount) > MAX_TRANSACTION_AMOUNT:
        raise InvalidRecordError(f"{field}: {value} exceeds the per-transaction maximum")
    return amount


def is_money(value: str) -> bool:
    """True when ``value`` has the platform's money form (for the simulator's own checks)."""
    return _MONEY.fullmatch(value) is not None
