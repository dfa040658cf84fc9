"""Parsing and validating the query of a request, from the raw request target (pure).

The raw target is what the client signed (spec: Authentication, Signature), so it is parsed
here exactly as received: split on ``?`` and ``&``, each name and value percent-decoded once
(``+`` stays ``+``; it is not form encoding).  Duplicate parameters and undeclared parameters
are rejected (spec: Authentication, Request format).  Every rule of the records and
record-changes endpoints (spec: Records endpoints, Conventions, Limits) is checked here and
reported as an ``ApiError`` the service sends back as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final
from urllib.parse import unquote

from recordsync.core.errors import InvalidRecordError
from recordsync.core.times import parse_time
from recordsync.sim.cursors import MAX_CURSOR_LENGTH
from recordsync.sim.envelope import ApiError

MAX_WINDOW_MS: Final = 24 * 3600 * 1000  # spec: Limits, records window
DEFAULT_LIMIT: Final = 100

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_FRACTION: Final = re.compile(r"[Tt]\d{2}:\d{2}:\d{2}(?:\.(\d+))?")
_UUID: Final = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_LIMIT: Final = re.compile(r"[1-9][0-9]{0,3}")

RECORDS_PARAMS: Final = frozenset(
    {"created_from", "created_to", "player_id", "game_id", "limit", "cursor"}
)
CHANGES_PARAMS: Final = frozenset({"since", "from_now", "cursor", "limit"})
GAMES_PARAMS: Final = frozenset({"status", "limit", "cursor"})
GAME_STATUSES: Final = frozenset({"AVAILABLE", "MAINTENANCE", "DISABLED"})


def invalid(message: str, **details: object) -> ApiError:
    return ApiError(400, "VALIDATION_FAILED", message, details=dict(details))


def split_target(target: str) -> tuple[str, dict[str, str]]:
    """Path and parameters of a raw target; duplicates and malformed pairs are errors."""
    path, _, query = target.partition("?")
    params: dict[str, str] = {}
    if not query:
        return path, params
    for pair in query.split("&"):
        if not pair:
            raise invalid("empty query parameter")
        raw_name, _, raw_value = pair.partition("=")
        try:
            name = unquote(raw_name, errors="strict")
            value = unquote(raw_value, errors="strict")
        except UnicodeDecodeError:
            raise invalid("a query parameter is not UTF-8 once percent-decoded") from None
        if name in params:
            raise invalid(f"duplicate query parameter {name!r}", parameter=name)
        params[name] = value
    return path, params


def reject_unknown(params: dict[str, str], allowed: frozenset[str]) -> None:
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise invalid(f"unknown query parameter {unknown[0]!r}", parameter=unknown[0])


def parse_limit(params: dict[str, str], max_page_size: int) -> int:
    raw = params.get("limit")
    if raw is None:
        return min(DEFAULT_LIMIT, max_page_size)
    if _LIMIT.fullmatch(raw) is None or int(raw) > max_page_size:
        raise invalid(f"limit must be an integer from 1 to {max_page_size}", parameter="limit")
    return int(raw)


def parse_cursor_text(params: dict[str, str]) -> str | None:
    raw = params.get("cursor")
    if raw is not None and not 1 <= len(raw) <= MAX_CURSOR_LENGTH:
        raise invalid("cursor must be 1 to 4096 characters", parameter="cursor")
    return raw


def _time_ns(value: str, name: str) -> tuple[int, int]:
    """(nanoseconds since the epoch, number of fraction digits) of an RFC3339 time."""
    try:
        parsed = parse_time(value, field=name)
    except InvalidRecordError as exc:
        raise invalid(f"{name} is not an RFC3339 time", parameter=name) from exc
    match = _FRACTION.search(value)
    fraction = (match.group(1) if match else None) or ""
    delta = parsed.replace(microsecond=0) - _EPOCH
    seconds = delta.days * 86_400 + delta.seconds
    return seconds * 1_000_000_000 + int(fraction[:9].ljust(9, "0")), len(fraction)


def parse_millisecond_time(value: str, name: str) -> int:
    """An RFC3339 time with at most millisecond precision (3 digits), as Unix milliseconds."""
    nanos, digits = _time_ns(value, name)
    if digits > 3:  # noqa: PLR2004 -- milliseconds
        raise invalid(f"{name} has more than millisecond precision", parameter=name)
    return nanos // 1_000_000


def parse_since_ms(value: str) -> int:
    """``since`` is inclusive: the first whole millisecond at or after it."""
    nanos, _ = _time_ns(value, "since")
    return -(-nanos // 1_000_000)


@dataclass(frozen=True, slots=True)
class RecordsStart:
    """The first request of a records chain."""

    from_ms: int
    to_ms: int
    player_id: str | None
    game_id: str | None
    limit: int


@dataclass(frozen=True, slots=True)
class RecordsNext:
    """A following request of a chain: only the cursor and the limit."""

    cursor: str
    limit: int


def parse_records(params: dict[str, str], max_page_size: int) -> RecordsStart | RecordsNext:
    reject_unknown(params, RECORDS_PARAMS)
    limit = parse_limit(params, max_page_size)
    cursor = parse_cursor_text(params)
    if cursor is not None:
        extra = sorted(set(params) - {"cursor", "limit"})
        if extra:
            raise invalid(
                f"{extra[0]!r} is not allowed with a cursor: the cursor carries the filters",
                parameter=extra[0],
            )
        return RecordsNext(cursor, limit)
    missing = [name for name in ("created_from", "created_to") if name not in params]
    if missing:
        raise invalid(f"{missing[0]} is required on the first request", parameter=missing[0])
    from_ms = parse_millisecond_time(params["created_from"], "created_from")
    to_ms = parse_millisecond_time(params["created_to"], "created_to")
    if to_ms <= from_ms:
        raise invalid("created_to must be after created_from", parameter="created_to")
    if to_ms - from_ms > MAX_WINDOW_MS:
        raise invalid("the window is longer than 24 hours", parameter="created_to")
    for name in ("player_id", "game_id"):
        if name in params and _UUID.fullmatch(params[name]) is None:
            raise invalid(f"{name} must be a UUID", parameter=name)
    return RecordsStart(from_ms, to_ms, params.get("player_id"), params.get("game_id"), limit)


@dataclass(frozen=True, slots=True)
class ChangesSince:
    since_ms: int
    limit: int


@dataclass(frozen=True, slots=True)
class ChangesFromNow:
    limit: int


@dataclass(frozen=True, slots=True)
class ChangesNext:
    cursor: str
    limit: int


def parse_changes(
    params: dict[str, str], max_page_size: int
) -> ChangesSince | ChangesFromNow | ChangesNext:
    reject_unknown(params, CHANGES_PARAMS)
    limit = parse_limit(params, max_page_size)
    starts = [name for name in ("since", "from_now", "cursor") if name in params]
    if len(starts) != 1:
        raise invalid("exactly one of since, from_now=true and cursor is required")
    cursor = parse_cursor_text(params)
    if cursor is not None:
        return ChangesNext(cursor, limit)
    if "from_now" in params:
        if params["from_now"] != "true":
            raise invalid("from_now only takes the value true", parameter="from_now")
        return ChangesFromNow(limit)
    return ChangesSince(parse_since_ms(params["since"]), limit)


@dataclass(frozen=True, slots=True)
class GamesQuery:
    """``GET /v1/games`` (spec: Endpoints, Games): a status filter, a limit, maybe a cursor."""

    status: str | None
    cursor: str | None
    limit: int


def parse_games(params: dict[str, str], max_page_size: int) -> GamesQuery:
    reject_unknown(params, GAMES_PARAMS)
    limit = parse_limit(params, max_page_size)
    status = params.get("status")
    if status is not None and status not in GAME_STATUSES:
        raise invalid("status must be one of AVAILABLE, MAINTENANCE, DISABLED", parameter="status")
    return GamesQuery(status, parse_cursor_text(params), limit)
