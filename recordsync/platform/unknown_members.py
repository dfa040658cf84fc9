"""The members of a record that recordsync does not know, kept as the bytes received.

The spec lets answers gain fields (Conventions 3: "clients ignore them"); ignoring one must
not mean losing it, or the day the platform adds a jackpot contribution or a tax amount its
values are gone until every record is read again.  So a record's unknown members go with its
row, as one JSON object (``Record.extra_fields``) whose values are the member's JSON text as
the platform wrote it: a number keeps its digits (orjson would read a 30-digit decimal as a
float, so the text is taken from the body by msgspec as ``Raw``), a nested object keeps its
members.  Unknown members of a record change item outside ``record`` are not the record's data
and stay ignored.

The usual record has exactly the known members; ``has_unknown`` tells the rare one from it in
two dictionary lookups, so pages without drift pay nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec
import orjson

from recordsync.core.models import Record
from recordsync.platform.envelope import OutOfRangeNumber

# The members the platform's Record has: every field of ours but the one that keeps the rest.
KNOWN_RECORD_FIELDS: Final = frozenset(Record.__struct_fields__) - {"extra_fields"}
# The two members a record may leave out (their value would be null).
_OPTIONAL: Final = ("parent_round_id", "settled_at")
_REQUIRED_COUNT: Final = len(KNOWN_RECORD_FIELDS) - len(_OPTIONAL)


def has_unknown(raw: Mapping[str, Any]) -> bool:
    """Whether ``raw``, a record whose required members are all present (the usual record
    path checked them), carries a member recordsync does not know."""
    count = len(raw)
    return count > _REQUIRED_COUNT and count != _REQUIRED_COUNT + sum(
        name in raw for name in _OPTIONAL
    )


def unknown_names(raw: Mapping[str, Any]) -> list[str]:
    """The unknown member names of any record object, in the order sent."""
    return [name for name in raw if name not in KNOWN_RECORD_FIELDS]


def members_text(members: Iterable[tuple[str, bytes]]) -> str | None:
    """``{"name": <value as sent>, ...}``; None when there is none."""
    parts = [msgspec.json.encode(name) + b":" + value for name, value in members]
    if not parts:
        return None
    return (b"{" + b",".join(parts) + b"}").decode()


def unknown_text(raw: Mapping[str, Any], sent: Mapping[str, msgspec.Raw] | None) -> str | None:
    """The unknown members of ``raw`` as ``Record.extra_fields``: each value from ``sent``,
    the same record's members as the body held them, when they were read (the bytes of a
    number are its exact text); else re-encoded from the decoded value (an answer msgspec
    could not read: nested too deep)."""
    names = unknown_names(raw)
    if sent is not None:
        return members_text((name, bytes(sent[name])) for name in names if name in sent)
    return members_text((name, _encoded(raw[name])) for name in names)


def _as_sent(value: object) -> Any:
    """orjson's ``default``: a number no float holds as the number sent, else its text."""
    if isinstance(value, OutOfRangeNumber):
        return orjson.Fragment(value.text)
    return str(value)


def _encoded(value: object) -> bytes:
    try:
        return orjson.dumps(value, default=_as_sent)
    except (orjson.JSONEncodeError, TypeError):
        return orjson.dumps(str(value))


class _SentItems(msgspec.Struct):
    items: list[msgspec.Raw]


class _SentAnswer(msgspec.Struct):
    data: _SentItems


_ANSWER: Final = msgspec.json.Decoder(_SentAnswer)
_MEMBERS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ERRORS: Final = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)


def sent_items(body: bytes) -> list[msgspec.Raw] | None:
    """A page answer's items as the bytes sent; None when msgspec cannot read the body so
    (the caller then re-encodes what orjson read)."""
    try:
        return _ANSWER.decode(body).data.items
    except _ERRORS:
        return None


def sent_members(item: msgspec.Raw | None) -> dict[str, msgspec.Raw] | None:
    """An object's members as the bytes sent; None when it is not an object."""
    if item is None:
        return None
    try:
        return _MEMBERS.decode(item)
    except _ERRORS:
        return None


def sent_record(items: list[msgspec.Raw] | None, position: int, *, change: bool) -> Any:
    """The members of the record at ``position`` of ``items`` (a change's ``record``)."""
    if items is None or position >= len(items):
        return None
    members = sent_members(items[position])
    if change and members is not None:
        members = sent_members(members.get("record"))
    return members
