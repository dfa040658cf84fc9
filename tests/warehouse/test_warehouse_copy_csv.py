"""A snapshot page's stage rows as CSV: exact bytes for plain values, the COPY text way for
anything else."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest
from msgspec.structs import replace
from support.warehouse_samples import make_change, make_record

from recordsync.warehouse.pages.postgres.copy_csv import snapshot_csv
from recordsync.warehouse.pages.staging import STAGE_COLUMNS, StagedRevision, stage_page

PLAIN = (
    b'"a",1,"player-1","game-1","USD","round-a",null,"10.00","0","0","-10.00","OPEN",'
    b'"2024-03-01T00:01:00Z",null,"2024-03-01T00:01:01Z",null,null,null,true,true\n'
)


def test_a_snapshot_row_is_its_values_in_stage_column_order() -> None:
    staged = stage_page([make_record("a")], (), keep_revisions=True)
    assert snapshot_csv(staged) == PLAIN
    assert PLAIN.count(b",") == len(STAGE_COLUMNS) - 1


def test_a_page_without_history_says_so_in_every_row() -> None:
    staged = stage_page([make_record("a"), make_record("b")], (), keep_revisions=False)
    body = snapshot_csv(staged)
    assert body is not None
    assert body.count(b",true,false\n") == 2
    assert body.count(b"\n") == 2


def test_amounts_keep_their_exact_digits() -> None:
    record = make_record(
        "a", bet_amount=Decimal("0.1000"), net_amount=Decimal("-123456789012345678901234.5678")
    )
    body = snapshot_csv(stage_page([record], (), keep_revisions=True))
    assert body is not None
    assert b',"0.1000",' in body
    assert b',"-123456789012345678901234.5678",' in body


def test_a_text_null_stays_text() -> None:
    body = snapshot_csv(
        stage_page([make_record("a", parent_round_id="null")], (), keep_revisions=True)
    )
    assert body is not None
    assert b',"null",' in body  # quoted: the text; only the unquoted null is NULL


@pytest.mark.parametrize(
    "value",
    ['a"quote', "back\\slash", "com,ma", "new\nline", "tab\there", "\x01"],
    ids=["quote", "backslash", "comma", "newline", "tab", "control"],
)
def test_a_value_csv_would_need_escaped_takes_the_text_way(value: str) -> None:
    staged = stage_page(
        [make_record("b"), make_record("a", player_id=value)], (), keep_revisions=True
    )
    assert snapshot_csv(staged) is None


def test_a_page_of_changes_takes_the_text_way() -> None:
    record = make_record("a")
    assert snapshot_csv(stage_page([record], [make_change(record, 7)], keep_revisions=True)) is None


def test_mixed_rows_take_the_text_way() -> None:
    plain = make_record("a")
    assert snapshot_csv([StagedRevision(plain, None, None, False, True)]) is None
    mixed = [
        StagedRevision(plain, None, None, True, True),
        StagedRevision(make_record("b"), None, None, True, False),
    ]
    assert snapshot_csv(mixed) is None


def test_a_time_without_a_zone_is_refused() -> None:
    naive = replace(make_record("a"), settled_at=datetime(2024, 3, 1))  # noqa: DTZ001
    with pytest.raises(ValueError, match="naive datetime"):
        snapshot_csv(stage_page([naive], (), keep_revisions=True))
