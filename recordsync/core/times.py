"""RFC3339 UTC times as the platform writes and reads them (spec: Conventions, Time).

Record responses use exactly three millisecond digits and ``Z``; other responses carry up to
six fraction digits.  We accept any RFC3339 offset on input (and convert it to UTC) because
``projection_as_of`` is not restricted to ``Z`` by the spec; we always *send* ``Z`` with
milliseconds, the precision the records endpoint accepts.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from recordsync.core.errors import InvalidRecordError

MILLISECOND = timedelta(milliseconds=1)

_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(?:([Zz])|([+-])([01][0-9]|2[0-3]):([0-5][0-9]))"
)


def parse_time(value: object, *, field: str) -> datetime:
    """Parse an RFC3339 time into an aware UTC ``datetime`` or raise ``InvalidRecordError``.

    Fractions beyond microseconds are truncated (Python has no finer resolution); the
    platform promises at most six digits, so nothing is lost in practice.
    """
    if not isinstance(value, str):
        raise InvalidRecordError(f"{field}: expected an RFC3339 string, got {type(value).__name__}")
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise InvalidRecordError(f"{field}: {value[:40]!r} is not an RFC3339 time")
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        parsed = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=UTC
        )
    except ValueError as exc:
        raise InvalidRecordError(f"{field}: {value[:40]!r} is not a valid time ({exc})") from None
    if not zulu:
        offset = timedelta(hours=int(off_h), minutes=int(off_m))
        try:
            parsed = parsed - offset if sign == "+" else parsed + offset
        except OverflowError:
            # "9999-12-31T23:30:00-01:00" is year 10000 in UTC, which no datetime (nor a
            # warehouse column) holds: the value is refused like any other invalid time.
            raise InvalidRecordError(
                f"{field}: {value[:40]!r} is outside the years 0001-9999 once in UTC"
            ) from None
    return parsed


def format_time(value: datetime) -> str:
    """Format as the records endpoint expects: UTC, exactly three fraction digits, ``Z``."""
    if value.tzinfo is None:
        raise ValueError("refusing to format a naive datetime: its zone is unknown")
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def floor_ms(value: datetime) -> datetime:
    """Drop sub-millisecond digits: the records endpoint takes at most millisecond precision."""
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


def ceil_ms(value: datetime) -> datetime:
    """Round up to the next whole millisecond (identity on whole milliseconds)."""
    floored = floor_ms(value)
    return floored if floored == value else floored + MILLISECOND
