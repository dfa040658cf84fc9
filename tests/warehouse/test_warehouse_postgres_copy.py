"""PostgreSQL loads the stage by COPY text: every value comes back exactly, failures surface
as SQLAlchemy errors."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from sqlalchemy import exc, text
from sqlalchemy.schema import CreateTable
from support.dbfixtures import fresh_database
from support.warehouse_samples import make_record

from recordsync.core.extra_fields import members
from recordsync.core.models import Record
from recordsync.warehouse import Warehouse
from recordsync.warehouse.pages.postgres.copy import StageCopy
from recordsync.warehouse.pages.postgres.copy_csv import snapshot_csv
from recordsync.warehouse.pages.postgres.copy_text import copy_text
from recordsync.warehouse.pages.staging import STAGE_COLUMNS, StagedRevision, stage

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def postgres_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Warehouse]:
    with fresh_database("postgres", tmp_path_factory.mktemp("copy")) as url:
        warehouse = Warehouse.connect(url)
        try:
            yield warehouse
        finally:
            warehouse.close()


def staged_back(
    warehouse: Warehouse, batch: list[StagedRevision], *, csv: bool = False
) -> list[dict[str, Any]]:
    """``batch`` through COPY into the stage (as text, or as CSV: ``copy_csv``), and the
    stage's rows read back."""
    with warehouse.engine.begin() as conn:
        conn.execute(CreateTable(stage, if_not_exists=True))
        if csv:
            body = snapshot_csv(batch)
            assert body is not None
            StageCopy().load_csv(conn, body)
        else:
            StageCopy().load(conn, copy_text(batch))
        columns = ", ".join(
            f"{name}::text AS {name}" if name == "extra_fields" else name for name in STAGE_COLUMNS
        )
        rows = conn.execute(text(f"SELECT {columns} FROM {stage.name}"))
        return [
            {**row._mapping, "extra_fields": members(row._mapping["extra_fields"])} for row in rows
        ]


def expected(item: StagedRevision) -> dict[str, Any]:
    r = item.record
    return {
        "record_id": r.record_id,
        "revision": r.revision,
        "player_id": r.player_id,
        "game_id": r.game_id,
        "currency": r.currency,
        "round_id": r.round_id,
        "parent_round_id": r.parent_round_id,
        "bet_amount": r.bet_amount,
        "refund_amount": r.refund_amount,
        "payout_amount": r.payout_amount,
        "net_amount": r.net_amount,
        "status": r.status,
        "created_at": r.created_at,
        "settled_at": r.settled_at,
        "updated_at": r.updated_at,
        "extra_fields": members(r.extra_fields),
        "sequence": item.sequence,
        "changed_at": item.changed_at,
        "is_top": item.is_top,
        "in_history": item.in_history,
    }


# Text PostgreSQL holds: no NUL (quarantined before, upsert.unstorable), no lone surrogate
# (never decoded from JSON); the characters COPY text escapes, and its NULL, are drawn often.
values = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
    | st.sampled_from("\\\t\n\rN."),
    max_size=40,
) | st.sampled_from(["\\N", "\\.", "a\\Nb", "\\N\t\\N"])
amounts = st.decimals(
    min_value=Decimal("-1e25"), max_value=Decimal("1e25"), places=4, allow_nan=False
)
offsets = st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-9.5))])
times = st.builds(
    lambda at, zone: at.replace(tzinfo=UTC).astimezone(zone),
    st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1)),  # noqa: DTZ001
    offsets,
)


# Unknown members as the platform may send them: every JSON type, a 30-digit decimal, and text
# holding what COPY text escapes.
extras = st.sampled_from(
    [
        '{"tax":123456789012345678901234567890.123456789}',
        '{"s":"a\\tb\\\\c","n":null,"b":true,"i":-7,"o":{"x":[1,"2",{"y":0.10}]}}',
        '{"a": [ ],\n\t"e": "\\n"}',
    ]
)

MAYBE_EXTRAS = st.none() | extras


@st.composite
def records(
    draw: st.DrawFn,
    values: st.SearchStrategy[str] = values,
    extra: st.SearchStrategy[str | None] = MAYBE_EXTRAS,
) -> Record:
    return replace(
        make_record(draw(values.filter(bool)), revision=draw(st.integers(0, 2**63 - 1))),
        player_id=draw(values),
        game_id=draw(values),
        currency=draw(values),
        round_id=draw(values),
        parent_round_id=draw(st.none() | values),
        status=draw(values),
        **{f"{kind}_amount": draw(amounts) for kind in ("bet", "refund", "payout", "net")},
        created_at=draw(times),
        settled_at=draw(st.none() | times),
        updated_at=draw(times),
        extra_fields=draw(extra),
    )


@st.composite
def staged_revisions(draw: st.DrawFn) -> StagedRevision:
    return StagedRevision(
        draw(records()),
        draw(st.none() | values),
        draw(st.none() | times),
        is_top=draw(st.booleans()),
        in_history=draw(st.booleans()),
    )


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(staged_revisions(), min_size=1, max_size=6))
def test_every_value_comes_back_exactly_from_the_stage(
    postgres_warehouse: Warehouse, batch: list[StagedRevision]
) -> None:
    assert staged_back(postgres_warehouse, batch) == [expected(item) for item in batch]


# Text CSV carries as it stands (no quote, comma, backslash or control character), with the
# words a careless CSV would read as NULL or as a boolean.
plain_values = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='",\\'),
    max_size=40,
) | st.sampled_from(["null", "NULL", "", " ", "true", "\u2028", "N"])


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # Unknown members always hold a quote, which CSV would escape: those pages go as text.
    batch=st.lists(records(plain_values, st.none()), min_size=1, max_size=6),
    in_history=st.booleans(),
)
def test_a_snapshot_page_comes_back_exactly_from_the_stage_by_csv(
    postgres_warehouse: Warehouse, batch: list[Record], in_history: bool
) -> None:
    staged = [StagedRevision(record, None, None, True, in_history) for record in batch]
    assert snapshot_csv(staged) is not None
    assert staged_back(postgres_warehouse, staged, csv=True) == [expected(i) for i in staged]


def test_a_value_the_stage_refuses_is_a_data_error_not_a_driver_error(
    postgres_warehouse: Warehouse,
) -> None:
    fits = [StagedRevision(make_record(bet_amount=Decimal("1.5")), None, None, True, True)]
    assert staged_back(postgres_warehouse, fits)[0]["bet_amount"] == Decimal("1.5")
    beyond = [StagedRevision(make_record(bet_amount=Decimal("1" * 40)), None, None, True, True)]
    with pytest.raises(exc.DataError):  # beyond NUMERIC(30,4)
        staged_back(postgres_warehouse, beyond)
