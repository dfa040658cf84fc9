"""A page's stage rows in COPY text format: exact bytes, escaped only when a value needs it."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from support.warehouse_samples import make_change, make_record

from recordsync.warehouse.pages.postgres.copy_text import copy_text
from recordsync.warehouse.pages.staging import STAGE_COLUMNS, stage_page

PLAIN = (
    "a\t1\tplayer-1\tgame-1\tUSD\tround-a\t\\N\t10.00\t0\t0\t-10.00\tOPEN\t"
    "2024-03-01T00:01:00Z\t\\N\t2024-03-01T00:01:01Z\t\\N\t\\N\t\\N\tt\tt\n"
)


def test_a_snapshot_row_is_its_values_in_stage_column_order() -> None:
    staged = stage_page([make_record("a")], (), keep_revisions=True)
    assert copy_text(staged).decode() == PLAIN
    assert PLAIN.count("\t") == len(STAGE_COLUMNS) - 1


def test_a_change_row_carries_its_sequence_and_change_time() -> None:
    record = make_record("a", settled_at=make_record().created_at, parent_round_id="p")
    (item,) = stage_page([record], [make_change(record, 7)], keep_revisions=True)
    fields = copy_text([item]).decode().rstrip("\n").split("\t")
    named = dict(zip(STAGE_COLUMNS, fields, strict=True))
    assert (named["parent_round_id"], named["settled_at"]) == ("p", "2024-03-01T00:01:00Z")
    assert (named["sequence"], named["changed_at"]) == ("7", "2024-03-01T00:01:01.005000Z")


def test_amounts_keep_their_exact_digits_and_times_their_offset() -> None:
    plus_two = timezone(timedelta(hours=2))
    record = make_record(
        "a",
        bet_amount=Decimal("0.1000"),
        net_amount=Decimal("-123456789012345678901234.5678"),
        created_at=datetime(2024, 3, 1, 2, 0, 0, 123456, tzinfo=plus_two),
    )
    fields = copy_text(stage_page([record], (), keep_revisions=False)).decode().split("\t")
    named = dict(zip(STAGE_COLUMNS, fields, strict=True))
    assert (named["bet_amount"], named["net_amount"]) == (
        "0.1000",
        "-123456789012345678901234.5678",
    )
    assert named["created_at"] == "2024-03-01T02:00:00.123456+02:00"
    assert named["in_history"] == "f\n"


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("back\\slash", "back\\\\slash"),
        ("tab\there", "tab\\there"),
        ("new\nline", "new\\nline"),
        ("carriage\rreturn", "carriage\\rreturn"),
        ("\\N", "\\\\N"),
        ("\\.", "\\\\."),
    ],
    ids=["backslash", "tab", "newline", "carriage-return", "null-marker", "end-marker"],
)
def test_a_value_holding_what_the_format_escapes_is_escaped(value: str, written: str) -> None:
    plain = make_record("b")
    odd = make_record("a", player_id=value, parent_round_id=value)
    change = make_change(odd, 1)
    staged = [
        *stage_page([odd], [replace(change, sequence=value)], keep_revisions=True),
        *stage_page([plain], (), keep_revisions=True),
    ]
    lines = copy_text(staged).decode().split("\n")
    odd_fields = dict(zip(STAGE_COLUMNS, lines[0].split("\t"), strict=True))
    assert odd_fields["player_id"] == odd_fields["parent_round_id"] == written
    assert odd_fields["sequence"] == written
    assert lines[1] + "\n" == PLAIN.replace("a\t", "b\t", 1).replace("round-a", "round-b")
    assert lines[2:] == [""]


def test_a_time_without_a_zone_is_refused() -> None:
    naive = make_record("a", created_at=datetime(2024, 3, 1))  # noqa: DTZ001 - the case
    with pytest.raises(ValueError, match="naive"):
        copy_text(stage_page([naive], (), keep_revisions=True))
