"""A warehouse with rows, upgraded to the rollups' revision: its views are exact at once, and
the holder's build of the old days ends exact while pages keep committing into those days."""

from __future__ import annotations

import threading
from datetime import UTC, timedelta
from decimal import Decimal

import msgspec
from msgspec.structs import replace
from sqlalchemy import text
from support.previous_release import LAST_RELEASE, LAST_REVISION, previous_release, run_in_release
from support.summarycheck import assert_summaries_fresh
from support.warehouse_samples import make_record

from recordsync.core.state import TailPage, Window
from recordsync.warehouse import Warehouse
from recordsync.warehouse.bi.rollups import BuildProgress
from recordsync.warehouse.migrate import current_revision

MERCHANT = "upgraded"
DAYS = 5
START = make_record().created_at.replace(hour=0, minute=0) - timedelta(days=DAYS)
SPAN = Window(START, START + timedelta(days=DAYS + 2))


def _rounds(first: int, count: int, revision: int):
    """``count`` rounds from number ``first``, spread over the days, at ``revision``."""
    return [
        make_record(
            f"r{number}",
            revision,
            created_at=START + timedelta(hours=5 * number + 1),
            game_id=f"game-{number % 3}",
            player_id=f"player-{number % 4}",
            status="OPEN" if revision == 1 else "SETTLED",
            bet_amount=Decimal(number % 7) + Decimal("0.25"),
            payout_amount=Decimal(revision),
            net_amount=Decimal(revision) - Decimal(number % 7) - Decimal("0.25"),
        )
        for number in range(first, first + count)
    ]


def _tail(store: Warehouse, number: int, records) -> None:
    store.pages.commit_tail_page(
        MERCHANT,
        TailPage(
            records=records,
            rejected=[],
            next_cursor=f"tail-{number}",
            last_sequence=str(number),
            projection_as_of=START,
            position=f"tail-{number}",
        ),
    )


# The rows of revision 0014's warehouse, written by the last release on that schema.
_OLD_WRITER = """
import sys
from datetime import datetime
import msgspec
from recordsync.core.models import Record
from recordsync.core.state import REBUILD_JOB, Window
from recordsync.warehouse import Warehouse

url, merchant, start, end = sys.argv[1:5]
window = Window(datetime.fromisoformat(start), datetime.fromisoformat(end))
records = msgspec.json.decode(sys.stdin.buffer.read(), type=list[Record])
store = Warehouse.connect(url)
store.migrate()
store.start_rebuild(
    merchant, change_cursor="anchor", anchor_at=window.start, history_from=window.start,
    snapshot_to=window.end, windows=[window],
)
store.commit_window_page(
    merchant, REBUILD_JOB, window, records=records, rejected=[], next_cursor=None,
    cursor_issued_at=window.start, done=True, position="page-0",
)
store.close()
"""


def test_an_upgraded_warehouse_builds_its_old_days_exact_while_pages_commit(
    warehouse_url, tmp_path
):
    release = previous_release(tmp_path, LAST_RELEASE)
    before = _rounds(0, DAYS * 4, revision=1)
    run_in_release(
        release,
        _OLD_WRITER,
        warehouse_url,
        MERCHANT,
        SPAN.start.isoformat(),
        SPAN.end.isoformat(),
        stdin=msgspec.json.encode(before),
    )
    store = Warehouse.connect(warehouse_url)
    writer = Warehouse.connect(warehouse_url)
    try:
        with store.engine.connect() as conn:
            assert current_revision(conn) == LAST_REVISION
        store.migrate()

        days = sorted({row.created_at.astimezone(UTC).date() for row in before})
        assert store.summaries.build_progress() == [
            BuildProgress(MERCHANT, days[0], days[0], days[-1])
        ]
        assert_summaries_fresh(store, MERCHANT)  # the old days read from their rows

        pages = [
            # later revisions of the old rounds, and new rounds in the old days and after
            [replace(row, revision=2 + page, status="SETTLED") for row in before[page::3]]
            + _rounds(100 + 10 * page, 3, revision=1)
            for page in range(6)
        ]
        built: list[BuildProgress] = []
        if store.engine.dialect.name == "sqlite":  # one writer: the pages between the days
            for number, page in enumerate(pages):
                _tail(writer, number, page)
                if (progress := store.summaries.build_next_day(MERCHANT)) is not None:
                    built.append(progress)
        else:
            committing = threading.Thread(
                target=lambda: [_tail(writer, n, page) for n, page in enumerate(pages)]
            )
            committing.start()
            store.summaries.build_all(MERCHANT, on_day=built.append)
            committing.join()
        store.summaries.build_all(MERCHANT, on_day=built.append)

        assert built[-1].done
        assert [progress.days_left for progress in built] == sorted(
            (progress.days_left for progress in built), reverse=True
        )
        assert store.summaries.build_progress() == []
        assert_summaries_fresh(store, MERCHANT)
        while store.summaries.fold(MERCHANT):
            pass
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM summary_deltas")).scalar_one() == 0
        assert_summaries_fresh(store, MERCHANT)
    finally:
        writer.close()
        store.close()
