"""The summary views planned cheap on PostgreSQL, whatever the size of ``records``.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03

Revision 0015's views read, beside the totals and the deltas, the rows of the days still to
build, straight from ``records`` joined to ``summary_builds``.  Once every day is built that
arm reads nothing (``summary_builds`` is empty), but PostgreSQL plans it from the size of
``records``: a range over ``ix_records_merchant_created`` whose bounds come from the join, so
a ninth of the table.  Past a few million rows the plan's estimated cost crosses
``jit_above_cost`` (100,000 by default), and every dashboard query compiled itself before
running: 400-550 ms at twenty million rows for a query that reads 400 buffers in about a
millisecond (at two million rows with the JIT thresholds lowered tenfold: 659 ms, of which
621 ms JIT).  Operators' Grafana and BI tools connect with the server's settings, so turning
the JIT off in our own sessions would not reach them.

Here the arm reads the rows to build through ``summary_rows_to_build()``, a PL/pgSQL
function declared ``ROWS 1``: PostgreSQL does not inline PL/pgSQL, so it plans the call as the
one row it is declared, and the views' cost no longer grows with the table.  What the arm
returns is unchanged (the same rows, the same columns), so the views stay exact at every
moment; while days are still to build (after an upgrade from before 0015), the function reads
all of them for every query instead of only the queried days: the views are slower until the
holder has built them, as they were before 0015, then fast for good.

MariaDB and SQLite plan without a JIT: nothing changes there.  Additive: the views keep
their names and columns, and an older replica reads them as before.  The view text is made
by revision 0015's own functions (loaded from its file, a fixed record), with only the arm
replaced, so the rest of the views stays exactly 0015's.
"""

# ruff: noqa: S608, SLF001 - the SQL is built from revision 0015's own names, never from input

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
additive = True

_FUNCTION = "summary_rows_to_build"


def _rollups() -> ModuleType:
    """Revision 0015, loaded from its file as Alembic loads it."""
    path = Path(__file__).with_name("0015_rollups.py")
    spec = importlib.util.spec_from_file_location("recordsync_revision_0015", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _function(rollups: ModuleType) -> str:
    start = rollups._day_start("postgresql", "b.next_day")
    end = rollups._day_start("postgresql", "b.last_day", after=True)
    return (
        f"CREATE OR REPLACE FUNCTION {_FUNCTION}() RETURNS SETOF records "
        "LANGUAGE plpgsql STABLE ROWS 1 AS $body$\nBEGIN\n"
        "    RETURN QUERY SELECT r.* FROM summary_builds b JOIN records r "
        f"ON r.merchant_id = b.merchant_id AND r.created_at >= {start} "
        f"AND r.created_at < {end};\nEND\n$body$"
    )


def _views(rollups: ModuleType, *, through_function: bool) -> list[str]:
    keyed = rollups._keyed("postgresql", "r", 1)
    start = rollups._day_start("postgresql", "b.next_day")
    end = rollups._day_start("postgresql", "b.last_day", after=True)
    joined = (
        f"SELECT {keyed} FROM summary_builds b JOIN records r "
        f"ON r.merchant_id = b.merchant_id AND r.created_at >= {start} AND r.created_at < {end}"
    )
    called = f"SELECT {keyed} FROM {_FUNCTION}() r"
    statements = []
    for name, subject in rollups._SUMMARIES:
        arms = rollups._arms("postgresql", subject, rollups=True)
        assert arms.count(f"FROM ({joined}) f") == 1, "revision 0015's arm is not where it was"
        if through_function:
            arms = arms.replace(f"FROM ({joined}) f", f"FROM ({called}) f")
        view = rollups._server_view("postgresql", name, subject, arms)
        statements.append(view.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1))
    return statements


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    rollups = _rollups()
    op.get_bind().exec_driver_sql(_function(rollups))
    for statement in _views(rollups, through_function=True):
        op.get_bind().exec_driver_sql(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    rollups = _rollups()
    for statement in _views(rollups, through_function=False):
        op.get_bind().exec_driver_sql(statement)
    op.get_bind().exec_driver_sql(f"DROP FUNCTION IF EXISTS {_FUNCTION}()")
