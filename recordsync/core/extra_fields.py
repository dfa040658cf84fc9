"""What a record's ``extra_fields`` says, read without a float (pure).

The warehouse keeps the members as the platform sent them, but a backend may give them back
in its own spelling (PostgreSQL's ``jsonb`` orders the members and spaces them; a number keeps
its value, not always its spelling: ``1e2`` becomes ``100``).  So two copies are the same when
their values are, numbers compared as exact ``Decimal`` values.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any


def members(text: str | None) -> dict[str, Any]:
    """The members of ``text``, numbers as ``Decimal`` (integers as ``int``); {} for None."""
    if text is None:
        return {}
    value = json.loads(text, parse_float=Decimal)
    return value if isinstance(value, dict) else {}


def same_extra(left: str | None, right: str | None) -> bool:
    """Whether two ``extra_fields`` hold the same members with the same values."""
    if left == right:
        return True
    return members(left) == members(right)
