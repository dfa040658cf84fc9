"""RFC3339 times (spec: Conventions, Time): accept any offset, send UTC milliseconds with Z."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from recordsync.core.errors import InvalidRecordError
from recordsync.core.times import ceil_ms, floor_ms, format_time, parse_time

MIDNIGHT = datetime(2026, 1, 1, tzinfo=UTC)

VALID = [
    ("2026-01-01T00:00:00Z", MIDNIGHT, "z-no-fraction"),
    ("2026-01-01T00:00:00.123Z", MIDNIGHT.replace(microsecond=123000), "three-digits"),
    ("2026-01-01T00:00:00.123456Z", MIDNIGHT.replace(microsecond=123456), "six-digits"),
    ("2026-01-01T00:00:00.1234567Z", MIDNIGHT.replace(microsecond=123456), "nine-truncated"),
    ("2026-01-01T05:30:00+05:30", MIDNIGHT, "positive-offset"),
    ("2025-12-31T16:00:00.500-08:00", MIDNIGHT.replace(microsecond=500000), "negative-offset"),
    ("2026-01-01T00:00:00+00:00", MIDNIGHT, "zero-offset"),
    ("2026-01-01t00:00:00z", MIDNIGHT, "lowercase-t-and-z"),
    ("2024-02-29T12:00:00Z", datetime(2024, 2, 29, 12, tzinfo=UTC), "leap-day"),
]

INVALID = [
    ("2026-01-01T00:00:00", "no-zone"),
    ("2026-01-01 00:00:00Z", "space-separator"),
    ("2026-01-01", "date-only"),
    ("2026-13-01T00:00:00Z", "month-13"),
    ("2026-02-30T00:00:00Z", "february-30"),
    ("2026-01-01T24:00:00Z", "hour-24"),
    ("2026-01-01T23:59:60Z", "leap-second"),
    ("2026-01-01T00:00:00.Z", "empty-fraction"),
    ("2026-01-01T00:00:00+0530", "offset-without-colon"),
    ("", "empty"),
    (" 2026-01-01T00:00:00Z", "leading-space"),
]


@pytest.mark.parametrize(("text", "expected", "case"), VALID, ids=[c for *_, c in VALID])
def test_valid_times_parse_to_aware_utc(text, expected, case):
    parsed = parse_time(text, field="created_at")
    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(("text", "case"), INVALID, ids=[c for _, c in INVALID])
def test_invalid_times_raise_naming_the_field(text, case):
    with pytest.raises(InvalidRecordError) as caught:
        parse_time(text, field="updated_at")
    assert caught.value.reason.startswith("updated_at:")


@pytest.mark.parametrize("value", [None, 1767225600, 1.5], ids=["null", "int", "float"])
def test_non_strings_are_rejected(value):
    with pytest.raises(InvalidRecordError, match="expected an RFC3339 string"):
        parse_time(value, field="settled_at")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (MIDNIGHT, "2026-01-01T00:00:00.000Z"),
        (MIDNIGHT.replace(microsecond=123999), "2026-01-01T00:00:00.123Z"),
        (
            datetime(2026, 1, 1, 5, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))),
            "2026-01-01T00:00:00.000Z",
        ),
    ],
    ids=["utc", "sub-millisecond-floored", "offset-converted"],
)
def test_format_time_sends_utc_milliseconds_with_z(value, expected):
    assert format_time(value) == expected


def test_format_time_refuses_naive_datetimes():
    with pytest.raises(ValueError, match="naive"):
        format_time(datetime(2026, 1, 1))  # noqa: DTZ001 - the point of the test


def test_format_then_parse_round_trips_milliseconds():
    value = MIDNIGHT.replace(microsecond=987000)
    assert parse_time(format_time(value), field="t") == value


@pytest.mark.parametrize(
    ("micro", "floor", "ceil"),
    [(0, 0, 0), (1000, 1000, 1000), (1001, 1000, 2000), (999999, 999000, 1000000)],
    ids=["zero", "whole-ms", "just-above", "rolls-over-second"],
)
def test_floor_and_ceil_to_milliseconds(micro, floor, ceil):
    value = MIDNIGHT + timedelta(microseconds=micro)
    assert floor_ms(value) == MIDNIGHT + timedelta(microseconds=floor)
    assert ceil_ms(value) == MIDNIGHT + timedelta(microseconds=ceil)


@pytest.mark.parametrize(
    "text",
    ["\u0662\u0660\u0662\u0666-01-01T00:00:00Z", "2026-01-01T00:00:00+99:99"],
    ids=["arabic-indic-digits", "offset-out-of-range"],
)
def test_non_ascii_digits_and_impossible_offsets_are_rejected(text):
    with pytest.raises(InvalidRecordError):
        parse_time(text, field="created_at")
