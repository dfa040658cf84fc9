"""Exact money: decimal strings in, ``Decimal`` out, never a float (spec: Conventions, Money).

The platform sends amounts as decimal strings with at most 4 fraction digits, no exponent, no
``+`` sign, no whitespace.  One transaction is at most 999999999999.9999, but a record's amounts
are cumulative (several payouts, several refunds), so record amounts are *not* capped: a record
may legitimately exceed the per-transaction maximum.  Callers that validate a single transaction
pass ``per_transaction=True``.
"""

from __future__ import annotations

import re
from decimal import Decimal

from recordsync.errors import InvalidRecordError

MAX_TRANSACTION_AMOUNT = Decimal("999999999999.9999")

# Optional minus, integer part without superfluous leading zeros, optional 1-4 fraction digits.
# "-0" and "-0.00" are accepted: the platform may print a zero net amount with a sign.
_MONEY = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]{1,4})?")


def parse_money(value: object, *, field: str, per_transaction: bool = False) -> Decimal:
    """Parse one amount exactly or raise ``InvalidRecordError`` naming the field.

    The original string survives: ``Decimal("10.50")`` keeps its exponent, so ``str()`` gives
    back exactly what the platform sent.
    """
    if not isinstance(value, str):
        raise InvalidRecordError(f"{field}: expected a decimal string, got {type(value).__name__}")
    if _MONEY.fullmatch(value) is None:
        raise InvalidRecordError(
            f"{field}: {value[:40]!r} is not a decimal string with at most 4 fraction digits"
        )
    amount = Decimal(value)
    if per_transaction and abs(amount) > MAX_TRANSACTION_AMOUNT:
        raise InvalidRecordError(f"{field}: {value} exceeds the per-transaction maximum")
    return amount


def is_money(value: str) -> bool:
    """True when ``value`` has the platform's money form (for the simulator's own checks)."""
    return _MONEY.fullmatch(value) is not None
