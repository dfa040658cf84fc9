"""Wire parsing: the platform's JSON into the core's typed values (spec: Record, Record change,
Capabilities, Game).

Tolerant where the spec asks for tolerance and strict where data would otherwise be wrong:

- unknown fields are ignored everywhere (spec: Versioning 3), except a record's: those are kept
  as sent in ``Record.extra_fields`` (``unknown_members``);
- an unknown record status is kept as its string (``Record.status_known`` is False) so the
  caller can count and log it; it is never a crash and never a silent drop;
- a record that fails validation does not fail its page: the page parser returns it as a
  ``RejectedItem`` (raw JSON, reason, position) for the quarantine;
- a page whose *shape* is wrong (items not a list, a missing cursor) raises ``ProtocolError``:
  such a page is retried and never advances a cursor.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Final, NoReturn

import msgspec
import orjson

from recordsync.core.errors import InvalidRecordError, ProtocolError
from recordsync.core.models import (
    Capabilities,
    ChangesPage,
    Currency,
    Game,
    GamesPage,
    Limits,
    Localization,
    Record,
    RecordChange,
    RecordsPage,
    RejectedItem,
)
from recordsync.core.money import all_money, amount_or_none, parse_money
from recordsync.core.times import parse_time
from recordsync.platform.envelope import OutOfRangeNumber
from recordsync.platform.unknown_members import (
    KNOWN_RECORD_FIELDS,
    has_unknown,
    members_text,
    sent_items,
    sent_record,
    unknown_text,
)

_SEQUENCE = re.compile(r"0|[1-9][0-9]*")
MAX_CURSOR_LENGTH: Final = 4096  # spec: Limits, "Cursor length"
# The exact form record responses use (three millisecond digits and Z): the hot path.  Spelled
# out digit by digit: the regex engine matches that about twice as fast as counted repeats.
_D2 = "[0-9][0-9]"
_RECORD_TIME = re.compile(
    rf"{_D2}{_D2}-{_D2}-{_D2}T{_D2}:{_D2}:{_D2}\.[0-9][0-9][0-9]Z",
)


def _text(raw: dict[str, Any], name: str) -> str:
    value = raw.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidRecordError(f"{name}: expected a non-empty string")
    return value


def _integer(raw: dict[str, Any], name: str) -> int:
    value = raw.get(name)
    # bool is an int in Python; the platform never means True as revision 1.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidRecordError(f"{name}: expected a non-negative integer")
    return value


def _time(raw: dict[str, Any], name: str) -> datetime:
    value = raw.get(name)
    if isinstance(value, str) and _RECORD_TIME.fullmatch(value):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass  # an impossible date: let parse_time name the field and reject the record
    return parse_time(value, field=name)


def _optional_time(raw: dict[str, Any], name: str) -> datetime | None:
    return None if raw.get(name) is None else _time(raw, name)


_is_record_time = _RECORD_TIME.fullmatch
_from_iso = datetime.fromisoformat


def _usual_record(raw: dict[str, Any]) -> Record | None:
    """The record, when every field has the form the platform normally sends; else None.

    The hot path (tens of thousands of calls a second): no helper calls and one lookup per
    amount seen before.  It accepts a subset of what ``parse_record``'s checks accept and
    builds exactly the same values; anything else (an offset time, a str subclass, a bad
    field) returns None and the full path decides, with its precise reason.
    """
    get = raw.get
    record_id = get("record_id")
    revision = get("revision")
    player_id = get("player_id")
    game_id = get("game_id")
    currency = get("currency")
    round_id = get("round_id")
    parent = get("parent_round_id")
    status = get("status")
    created = get("created_at")
    settled = get("settled_at")
    updated = get("updated_at")
    if not (
        type(record_id) is str
        and record_id
        and type(revision) is int  # not bool: type(True) is bool
        and revision >= 0
        and type(player_id) is str
        and player_id
        and type(game_id) is str
        and game_id
        and type(currency) is str
        and currency
        and type(round_id) is str
        and round_id
        and (parent is None or type(parent) is str)
        and type(status) is str
        and status
        and type(created) is str
        and _is_record_time(created)
        and type(updated) is str
        and _is_record_time(updated)
        and (settled is None or (type(settled) is str and _is_record_time(settled)))
    ):
        return None
    bet = amount_or_none(get("bet_amount"))
    refund = amount_or_none(get("refund_amount"))
    payout = amount_or_none(get("payout_amount"))
    net = amount_or_none(get("net_amount"))
    if bet is None or refund is None or payout is None or net is None:
        return None
    try:
        created_at = _from_iso(created)
        updated_at = _from_iso(updated)
        settled_at = None if settled is None else _from_iso(settled)
    except ValueError:  # the right form but an impossible date: the full path names it
        return None
    return Record(
        record_id=record_id,
        revision=revision,
        player_id=player_id,
        game_id=game_id,
        currency=currency,
        round_id=round_id,
        parent_round_id=parent,
        bet_amount=bet,
        refund_amount=refund,
        payout_amount=payout,
        net_amount=net,
        status=status,
        created_at=created_at,
        settled_at=settled_at,
        updated_at=updated_at,
    )


def parse_record(raw: object) -> Record:
    """Validate one record object or raise ``InvalidRecordError`` with a precise reason."""
    if type(raw) is dict:
        usual = _usual_record(raw)
        if usual is not None:
            return usual
    return _checked_record(raw)


def _checked_record(raw: object) -> Record:
    """Every check, one field at a time, so a failure names its field and reason."""
    if not isinstance(raw, dict):
        raise InvalidRecordError(f"record: expected an object, got {type(raw).__name__}")
    parent = raw.get("parent_round_id")
    if parent is not None and not isinstance(parent, str):
        raise InvalidRecordError("parent_round_id: expected a string or null")
    status = raw.get("status")
    if not isinstance(status, str) or not status:
        raise InvalidRecordError("status: expected a non-empty string")
    return Record(
        record_id=_text(raw, "record_id"),
        revision=_integer(raw, "revision"),
        player_id=_text(raw, "player_id"),
        game_id=_text(raw, "game_id"),
        currency=_text(raw, "currency"),
        round_id=_text(raw, "round_id"),
        parent_round_id=parent,
        bet_amount=parse_money(raw.get("bet_amount"), field="bet_amount"),
        refund_amount=parse_money(raw.get("refund_amount"), field="refund_amount"),
        payout_amount=parse_money(raw.get("payout_amount"), field="payout_amount"),
        net_amount=parse_money(raw.get("net_amount"), field="net_amount"),
        status=status,
        created_at=_time(raw, "created_at"),
        settled_at=_optional_time(raw, "settled_at"),
        updated_at=_time(raw, "updated_at"),
    )


def parse_change(raw: object) -> RecordChange:
    """Validate one change; its record_id and revision must agree with the embedded record."""
    if not isinstance(raw, dict):
        raise InvalidRecordError(f"change: expected an object, got {type(raw).__name__}")
    sequence = raw.get("sequence")
    if not isinstance(sequence, str) or _SEQUENCE.fullmatch(sequence) is None:
        raise InvalidRecordError("sequence: expected a decimal string")
    record = parse_record(raw.get("record"))
    record_id = _text(raw, "record_id")
    revision = _integer(raw, "revision")
    if record_id != record.record_id or revision != record.revision:
        raise InvalidRecordError(
            "change: record_id/revision disagree with the embedded record "
            f"({record_id}/{revision} vs {record.record_id}/{record.revision})"
        )
    return RecordChange(
        sequence=sequence,
        record_id=record_id,
        revision=revision,
        changed_at=_time(raw, "changed_at"),
        record=record,
    )


def _as_sent(rejected: list[RejectedItem], body: bytes) -> list[RejectedItem]:
    """The rejected items with their bytes as the body held them, numbers spelled as sent
    (orjson's re-encoding writes ``10.000`` as ``10.0``); as re-encoded when unreadable."""
    items = sent_items(body)
    if items is None:
        return rejected
    return [
        dataclasses.replace(item, raw=bytes(items[item.position]))
        if item.position < len(items)
        else item
        for item in rejected
    ]


def _keep_unknown(
    records: list[Record],
    drifted: list[tuple[int, int, dict[str, Any]]],
    body: bytes | None,
    *,
    change: bool,
) -> None:
    """Each drifted record of ``records`` replaced by a copy holding its unknown members,
    their bytes read from ``body`` (once, for the page) when it is there."""
    items = None if body is None else sent_items(body)
    for position, index, raw in drifted:
        sent = sent_record(items, position, change=change)
        extra = unknown_text(raw, sent)
        records[index] = msgspec.structs.replace(records[index], extra_fields=extra)


def _as_json(value: object) -> Any:
    """orjson's ``default``: an out-of-range number as the number sent, anything else as text."""
    if isinstance(value, OutOfRangeNumber):
        return orjson.Fragment(value.text)
    return str(value)


def _msgspec_json(value: object) -> Any:
    if isinstance(value, OutOfRangeNumber):
        return msgspec.Raw(value.text.encode())
    return str(value)


_DEEP_ENCODER: Final = msgspec.json.Encoder(enc_hook=_msgspec_json)


def raw_json(raw: object) -> bytes:
    """A rejected item as JSON for the quarantine, as received, whatever it holds.

    orjson writes at most 254 levels of nesting, which an item read by it (1024 levels) may
    exceed: msgspec writes those.  An item too deep even for that is kept as a note saying
    so, never a failure of its page.
    """
    try:
        return orjson.dumps(raw, option=orjson.OPT_PASSTHROUGH_DATACLASS, default=_as_json)
    except orjson.JSONEncodeError:
        pass
    try:
        return _DEEP_ENCODER.encode(raw)
    except (RecursionError, TypeError):
        return orjson.dumps({"not_kept": "the item nests too deeply to be written back"})


def _reject(position: int, raw: object, error: InvalidRecordError) -> RejectedItem:
    record_id = raw.get("record_id") if isinstance(raw, dict) else None
    return RejectedItem(
        position=position,
        raw=raw_json(raw),
        reason=error.reason,
        record_id=record_id if isinstance(record_id, str) else None,
    )


class _PageShape:
    """Reads the members every page has; wrong shapes raise ``ProtocolError``."""

    def __init__(self, data: object, *, endpoint: str, request_id: str | None) -> None:
        self.endpoint = endpoint
        self.request_id = request_id
        if not isinstance(data, dict):
            self.fail("data is not an object")
        self.data: dict[str, Any] = data

    def fail(self, what: str) -> NoReturn:
        raise ProtocolError(
            f"malformed page: {what}", endpoint=self.endpoint, request_id=self.request_id
        )

    def items(self) -> list[Any]:
        items = self.data.get("items")
        if not isinstance(items, list):
            self.fail("items is not a list")
        return items

    def has_more(self) -> bool:
        has_more = self.data.get("has_more")
        if not isinstance(has_more, bool):
            self.fail("has_more is not a boolean")
        return has_more

    def cursor(self, *, nullable: bool) -> str | None:
        cursor = self.data.get("next_cursor")
        if cursor is None and nullable:
            return None
        if not isinstance(cursor, str) or not cursor:
            self.fail("next_cursor is missing or not a string")
        if len(cursor) > MAX_CURSOR_LENGTH:
            # The next request could not send it back (client._cursor), nor the warehouse
            # keep it: a page that cannot be followed is refused, never half-committed.
            self.fail(f"next_cursor has {len(cursor)} characters, more than {MAX_CURSOR_LENGTH}")
        return cursor

    def projection_as_of(self) -> datetime | None:
        value = self.data.get("projection_as_of")
        if value is None:
            return None
        try:
            return parse_time(value, field="projection_as_of")
        except InvalidRecordError as exc:
            self.fail(exc.reason)


def parse_records_page(
    data: object,
    *,
    endpoint: str = "records",
    request_id: str | None = None,
    body: bytes | None = None,
) -> RecordsPage:
    """``body``, the answer ``data`` was read from, gives the unknown members their bytes."""
    shape = _PageShape(data, endpoint=endpoint, request_id=request_id)
    records: list[Record] = []
    rejected: list[RejectedItem] = []
    drifted: list[tuple[int, int, dict[str, Any]]] = []  # (position, index in records, raw)
    for position, raw in enumerate(shape.items()):
        usual = _usual_record(raw) if type(raw) is dict else None
        if usual is not None:
            if has_unknown(raw):
                drifted.append((position, len(records), raw))
            records.append(usual)
            continue
        try:
            records.append(_checked_record(raw))
        except InvalidRecordError as exc:
            rejected.append(_reject(position, raw, exc))
            continue
        if has_unknown(raw):
            drifted.append((position, len(records) - 1, raw))
    if drifted:
        _keep_unknown(records, drifted, body, change=False)
    if rejected and body is not None:
        rejected = _as_sent(rejected, body)
    has_more = shape.has_more()
    next_cursor = shape.cursor(nullable=True)
    if has_more and next_cursor is None:
        shape.fail("has_more is true but next_cursor is null")
    watermark = shape.data.get("snapshot_watermark")
    if not isinstance(watermark, str):
        shape.fail("snapshot_watermark is missing or not a string")
    return RecordsPage(
        records=records,
        rejected=rejected,
        next_cursor=next_cursor,
        has_more=has_more,
        snapshot_watermark=watermark,
        projection_as_of=shape.projection_as_of(),
        request_id=request_id,
    )


# -- records pages straight from the body's bytes (the hot path) ------------------------------
#
# msgspec decodes a whole records answer from its bytes in C, once, into the page's items with
# their amounts and times still as the strings sent (their types, non-empty ids and a
# non-negative revision checked by the decode).  Those strings are held to the forms
# ``_usual_record`` accepts for the whole page at once; only then does ``msgspec.convert`` make
# the page's ``Record`` values from them (amounts as ``Decimal``, times as aware ``datetime``),
# in C as well.  Anything else, one odd item, a bad envelope, a field missing, returns None and
# the caller takes the orjson path (``decode_reply`` and ``parse_records_page``), which accepts
# and rejects exactly as before and names what is wrong; so an answer's outcome never depends
# on which path read it.  Why not decode straight into ``Record``: that typed decode takes
# "+1", "1e3" or a JSON number as a Decimal and any RFC3339 offset as a time, so the strings
# must be seen first; one decode and a conversion cost less than the typed decode and a
# second one for the strings did (``bench/parse.py``).

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class _WireRecord(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """A record as sent, before its amounts and times are known to have the usual form.

    An unknown member fails this decode (at no cost to the usual page), and the page is read
    again by ``_DriftRecord``'s decoder, which keeps reading and leaves the unknown members
    to ``unknown_members``."""

    record_id: _NonEmpty
    # msgspec reads any integer, orjson a float past 64 bits: beyond a BIGINT (which msgspec
    # can bound) the orjson path decides, so both paths give a revision the same outcome.
    revision: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
    player_id: _NonEmpty
    game_id: _NonEmpty
    currency: _NonEmpty
    round_id: _NonEmpty
    parent_round_id: str | None
    bet_amount: str
    refund_amount: str
    payout_amount: str
    net_amount: str
    status: _NonEmpty
    created_at: str
    settled_at: str | None
    updated_at: str


class _DriftRecord(_WireRecord, forbid_unknown_fields=False):
    """A record with members recordsync does not know (kept apart by ``unknown_members``)."""


_Cursor = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_CURSOR_LENGTH)]


class _WirePage(msgspec.Struct, gc=False):
    items: list[_WireRecord]
    has_more: bool
    next_cursor: _Cursor | None
    snapshot_watermark: str
    projection_as_of: str | None = None


class _DriftPage(msgspec.Struct, gc=False):
    items: list[_DriftRecord]
    has_more: bool
    next_cursor: _Cursor | None
    snapshot_watermark: str
    projection_as_of: str | None = None


class _WireAnswer(msgspec.Struct, gc=False):
    data: _WirePage
    request_id: _NonEmpty
    error: None = None  # an answer with an error member is never a page


class _DriftAnswer(msgspec.Struct, gc=False):
    data: _DriftPage
    request_id: _NonEmpty
    error: None = None


_WIRE: Final = msgspec.json.Decoder(_WireAnswer)
_DRIFT: Final = msgspec.json.Decoder(_DriftAnswer)
if (*_WireRecord.__struct_fields__, "extra_fields") != Record.__struct_fields__:
    raise RuntimeError("Record changed: update _WireRecord, which convert() reads it from")


# Where the record time form ``2024-03-01T00:01:00.123Z`` has its punctuation, and its digits.
_TIME_LENGTH: Final = 24
_TIME_MARKS: Final = ((4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":"), (19, "."), (23, "Z"))
_TIME_DIGITS: Final = _TIME_LENGTH - len(_TIME_MARKS)
_WITHOUT_MARKS: Final = str.maketrans(dict.fromkeys("-T:.Z"))


def _usual_forms(items: Sequence[_WireRecord]) -> bool:
    """True when every amount and time has the form ``_usual_record`` accepts.

    Checked for the whole page at once on the joined strings, string operations in C instead
    of a regex call per value: the times' length and punctuation by slicing, their digits by
    taking the punctuation out (a mark where a digit belongs shortens the rest), the amounts by
    one pass of ``all_money`` over the distinct ones.
    """
    times = [item.created_at for item in items]
    times += [item.updated_at for item in items]
    times += [item.settled_at for item in items if item.settled_at is not None]
    if times and set(map(len, times)) != {_TIME_LENGTH}:
        return False
    joined = "".join(times)
    count = len(times)
    if not all(joined[at::_TIME_LENGTH] == mark * count for at, mark in _TIME_MARKS):
        return False
    digits = joined.translate(_WITHOUT_MARKS)
    if times and not (
        len(digits) == _TIME_DIGITS * count and digits.isascii() and digits.isdigit()
    ):
        return False
    amounts = {item.bet_amount for item in items}
    amounts.update(item.refund_amount for item in items)
    amounts.update(item.payout_amount for item in items)
    amounts.update(item.net_amount for item in items)
    return all_money(amounts)


def _keep_sent_unknown(records: list[Record], body: bytes) -> bool:
    """The unknown members of a drifted page's records into their ``extra_fields``; False
    when the body cannot be read as members (the orjson path then reads the page)."""
    items = sent_items(body)
    if items is None or len(items) != len(records):
        return False
    for position, record in enumerate(records):
        members = sent_record(items, position, change=False)
        if members is None:
            return False
        if len(members) != len(KNOWN_RECORD_FIELDS):
            extra = members_text(
                (name, bytes(value))
                for name, value in members.items()
                if name not in KNOWN_RECORD_FIELDS
            )
            records[position] = msgspec.structs.replace(record, extra_fields=extra)
    return True


def _decoded(body: bytes) -> tuple[_WireAnswer | _DriftAnswer, bool] | None:
    """The answer, and whether a record carried a member recordsync does not know."""
    try:
        return _WIRE.decode(body), False
    except msgspec.ValidationError:
        try:  # an unknown member, or a page the orjson path must judge
            return _DRIFT.decode(body), True
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return None
    except (msgspec.DecodeError, RecursionError):
        # RecursionError: an unknown member nested deeper than msgspec follows (it skips
        # members by recursion); the orjson path reads or refuses the answer.
        return None


def usual_records_page(body: bytes) -> RecordsPage | None:
    """The records page of a successful answer's ``body`` when it is a valid envelope and every
    item has the usual form; None for anything else (see above: the caller then takes the
    orjson path, which tells what is wrong)."""
    decoded = _decoded(body)
    if decoded is None:
        return None
    answer, drift = decoded
    page = answer.data
    if (page.has_more and page.next_cursor is None) or not _usual_forms(page.items):
        return None
    try:  # the usual forms are valid: only an impossible date (February 30th) fails here
        records = msgspec.convert(page.items, list[Record], from_attributes=True)
    except msgspec.ValidationError:
        return None
    if drift and not _keep_sent_unknown(records, body):
        return None
    projection_as_of = None
    if page.projection_as_of is not None:
        try:
            projection_as_of = parse_time(page.projection_as_of, field="projection_as_of")
        except InvalidRecordError:
            return None
    return RecordsPage(
        records=records,
        rejected=[],
        next_cursor=page.next_cursor,
        has_more=page.has_more,
        snapshot_watermark=page.snapshot_watermark,
        projection_as_of=projection_as_of,
        request_id=answer.request_id,
    )


def parse_changes_page(
    data: object,
    *,
    endpoint: str = "record-changes",
    request_id: str | None = None,
    body: bytes | None = None,
) -> ChangesPage:
    """``body``, the answer ``data`` was read from, gives the unknown members their bytes."""
    shape = _PageShape(data, endpoint=endpoint, request_id=request_id)
    changes: list[RecordChange] = []
    rejected: list[RejectedItem] = []
    drifted: list[tuple[int, int, dict[str, Any]]] = []
    for position, raw in enumerate(shape.items()):
        try:
            changes.append(parse_change(raw))
        except InvalidRecordError as exc:
            rejected.append(_reject(position, raw, exc))
            continue
        record = raw["record"]
        if has_unknown(record):
            drifted.append((position, len(changes) - 1, record))
    if rejected and body is not None:
        rejected = _as_sent(rejected, body)
    if drifted:
        records = [change.record for change in changes]
        _keep_unknown(records, drifted, body, change=True)
        changes = [
            change if change.record is record else dataclasses.replace(change, record=record)
            for change, record in zip(changes, records, strict=True)
        ]
    return ChangesPage(
        changes=changes,
        rejected=rejected,
        next_cursor=shape.cursor(nullable=False),  # type: ignore[arg-type]
        has_more=shape.has_more(),
        projection_as_of=shape.projection_as_of(),
        request_id=request_id,
    )


def _positive_int(limits: dict[str, Any], name: str, *, required: bool) -> int | None:
    value = limits.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRecordError(f"limits.{name}: expected a positive integer")
    return value


def parse_capabilities(data: object) -> Capabilities:
    """Parse capabilities; raises ``InvalidRecordError`` when the limits cannot be trusted."""
    if not isinstance(data, dict):
        raise InvalidRecordError("capabilities: expected an object")
    limits = data.get("limits")
    if not isinstance(limits, dict):
        raise InvalidRecordError("limits: expected an object")
    currencies = []
    listed = data.get("currencies")
    for raw in listed if isinstance(listed, list) else []:
        if isinstance(raw, dict) and isinstance(raw.get("code"), str):
            scale = raw.get("decimal_scale")
            currencies.append(Currency(raw["code"], scale if isinstance(scale, int) else 4))
    wallet_mode = data.get("wallet_mode")
    return Capabilities(
        wallet_mode=wallet_mode if isinstance(wallet_mode, str) else "UNKNOWN",
        currencies=tuple(currencies),
        limits=Limits(
            record_requests=_positive_int(limits, "record_requests", required=True),  # type: ignore[arg-type]
            record_seconds=_positive_int(limits, "record_seconds", required=True),  # type: ignore[arg-type]
            max_page_size=min(_positive_int(limits, "max_page_size", required=False) or 1000, 1000),
            query_requests=_positive_int(limits, "query_requests", required=False),
            query_seconds=_positive_int(limits, "query_seconds", required=False),
            max_body_bytes=_positive_int(limits, "max_body_bytes", required=False),
        ),
    )


# -- the game catalogue (spec: Game; Endpoints, Games) ------------------------------------------


def _optional_text(raw: dict[str, Any], name: str) -> str | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRecordError(f"{name}: expected a string")
    return value


def _named(raw: dict[str, Any], name: str) -> tuple[str | None, str | None]:
    """``(code, name)`` of a nested object such as ``provider`` or ``category_detail``."""
    value = raw.get(name)
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise InvalidRecordError(f"{name}: expected an object")
    try:
        return _optional_text(value, "code"), _optional_text(value, "name")
    except InvalidRecordError as exc:
        raise InvalidRecordError(f"{name}.{exc.reason}") from None


def _localizations(raw: dict[str, Any]) -> tuple[Localization, ...]:
    value = raw.get("localizations")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidRecordError("localizations: expected a list")
    found = []
    for position, item in enumerate(value):
        if not isinstance(item, dict):
            raise InvalidRecordError(f"localizations[{position}]: expected an object")
        try:
            found.append(Localization(_text(item, "language"), _text(item, "name")))
        except InvalidRecordError as exc:
            raise InvalidRecordError(f"localizations[{position}].{exc.reason}") from None
    return tuple(found)


def parse_game(raw: object) -> Game:
    """One Game; unknown fields are ignored, icons are not kept (never downloaded)."""
    if not isinstance(raw, dict):
        raise InvalidRecordError("game: expected an object")
    launch_supported = raw.get("launch_supported")
    if not isinstance(launch_supported, bool):
        raise InvalidRecordError("launch_supported: expected a boolean")
    languages = raw.get("languages")
    if languages is None:
        languages = []
    if not isinstance(languages, list) or not all(isinstance(item, str) for item in languages):
        raise InvalidRecordError("languages: expected a list of strings")
    provider_code, provider_name = _named(raw, "provider")
    _, category_name = _named(raw, "category_detail")
    name = raw.get("name")
    if not isinstance(name, str):
        raise InvalidRecordError("name: expected a string")
    return Game(
        game_id=_text(raw, "game_id"),
        name=name,
        brand=_optional_text(raw, "brand"),
        category=_optional_text(raw, "category"),
        category_name=category_name,
        status=_text(raw, "status"),
        launch_supported=launch_supported,
        provider_code=provider_code,
        provider_name=provider_name,
        client_version=_optional_text(raw, "client_version"),
        languages=tuple(languages),
        localizations=_localizations(raw),
    )


def parse_games_page(
    data: object, *, endpoint: str = "games", request_id: str | None = None
) -> GamesPage:
    """A games page; a game that fails validation is returned in ``rejected``, its page kept."""
    shape = _PageShape(data, endpoint=endpoint, request_id=request_id)
    games: list[Game] = []
    rejected: list[RejectedItem] = []
    for position, raw in enumerate(shape.items()):
        try:
            games.append(parse_game(raw))
        except InvalidRecordError as exc:
            game_id = raw.get("game_id") if isinstance(raw, dict) else None
            rejected.append(
                RejectedItem(
                    position=position,
                    raw=raw_json(raw),
                    reason=exc.reason,
                    record_id=game_id if isinstance(game_id, str) else None,
                )
            )
    has_more = shape.has_more()
    next_cursor = shape.cursor(nullable=True)
    if has_more and next_cursor is None:
        shape.fail("has_more is true but next_cursor is null")
    return GamesPage(
        games=games,
        rejected=rejected,
        next_cursor=next_cursor,
        has_more=has_more,
        request_id=request_id,
    )
