"""What a record's ``extra_fields`` says, read without a float (pure).

The warehouse keeps the members as the platform sent them, but a backend may give them back
in its own spelling (PostgreSQL's ``jsonb`` orders the members and spaces them; a number keeps
its value, not always its spelling: ``1e2`` becomes ``100``).  So two copies are the same when
their values are, numbers compared as exact ``Decimal`` values.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import msgspec


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


_NAMES = msgspec.json.Decoder(dict[str, msgspec.Raw])


def member_names(text: str) -> list[str]:
    """The member names of one ``extra_fields``, their values left unread."""
    try:
        return list(_NAMES.decode(text))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []


def unknown_counts(
    texts: Iterable[str | None], record_ids: Iterable[str]
) -> dict[str, tuple[int, str]]:
    """Per unknown member name: how many of the records carried it, and the first that did."""
    found: dict[str, tuple[int, str]] = {}
    for text, record_id in zip(texts, record_ids, strict=True):
        if text is None:
            continue
        for name in member_names(text):
            count, first = found.get(name, (0, record_id))
            found[name] = (count + 1, first)
    return found
