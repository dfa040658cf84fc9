"""PostgreSQL loads the stage by binary COPY; its failures surface as SQLAlchemy errors."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from dbfixtures import fresh_database
from sqlalchemy import exc
from sqlalchemy.schema import CreateTable

from recordsync.warehouse import Warehouse
from recordsync.warehouse.postgres_copy import StageCopy, binary_types
from recordsync.warehouse.staging import STAGE_COLUMNS, stage

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def row(amount: Decimal) -> tuple[object, ...]:
    values: dict[str, object] = {
        "record_id": "r-1",
        "revision": 1,
        "player_id": "p",
        "game_id": "g",
        "currency": "EUR",
        "round_id": "round",
        "parent_round_id": None,
        "bet_amount": amount,
        "refund_amount": Decimal(0),
        "payout_amount": Decimal(0),
        "net_amount": Decimal(0),
        "status": "open",
        "created_at": NOW,
        "settled_at": None,
        "updated_at": NOW,
        "sequence": None,
        "changed_at": None,
        "bet_units": None,
        "refund_units": None,
        "payout_units": None,
        "net_units": None,
        "is_top": True,
        "in_history": True,
    }
    return tuple(values[name] for name in STAGE_COLUMNS)


def test_every_stage_column_has_a_binary_copy_type() -> None:
    assert len(binary_types()) == len(STAGE_COLUMNS)


@pytest.fixture
def postgres_warehouse(tmp_path: Path) -> Iterator[Warehouse]:
    with fresh_database("postgres", tmp_path) as url:
        warehouse = Warehouse.connect(url)
        try:
            yield warehouse
        finally:
            warehouse.close()


@pytest.mark.postgres
def test_a_value_the_stage_refuses_is_a_data_error_not_a_driver_error(
    postgres_warehouse: Warehouse,
) -> None:
    warehouse = postgres_warehouse
    copy = StageCopy()
    with warehouse.engine.begin() as conn:
        conn.execute(CreateTable(stage, if_not_exists=True))
        copy.load(conn, [row(Decimal("1.5"))])
    with warehouse.engine.begin() as conn:
        conn.execute(CreateTable(stage, if_not_exists=True))
        with pytest.raises(exc.DataError):
            copy.load(conn, [row(Decimal("1" * 40))])  # beyond NUMERIC(30,4)
