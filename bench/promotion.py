"""Promoting a kept field on a big warehouse while the sync writes: how long it takes, how
long the writer waited at most for one page, and whether the column equals the members.

A fresh warehouse gets ``--rows`` records (half carrying a 30-digit ``tax`` member, in
``extra_fields``) through the page writer, then ``fields promote tax --type decimal`` runs
while a writer thread keeps committing pages of 100 new revisions (with and without the
member) as fast as it can, the way a tail catching up writes.  Printed: the promotion's time
and rate, each live page's commit time before, during and after it (the longest is how long
the sync stopped at most), and every row of both tables checked against its members.  No
platform is involved: a promotion never asks it for anything (``fields`` reads no platform
setting at all).

    .venv/bin/python bench/promotion.py [--rows 1000000] [--backend postgres|mariadb|sqlite]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import harness
from sqlalchemy import text

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.core.extra_fields import members
from recordsync.core.models import Record, RecordChange
from recordsync.core.state import REBUILD_JOB, TailPage, Window, WindowPage
from recordsync.warehouse import Warehouse

MERCHANT = "bench-promotion"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
PAGE = 1000


def _record(n: int, revision: int) -> Record:
    extra = f'{{"tax":1234567890123456789012345.{n % 10000:04d}}}' if n % 2 else None
    return Record(
        record_id=f"r{n:09d}",
        revision=revision,
        player_id="p",
        game_id="g",
        currency="EUR",
        round_id=f"x{n}",
        parent_round_id=None,
        bet_amount=Decimal("1.00"),
        refund_amount=Decimal(0),
        payout_amount=Decimal(0),
        net_amount=Decimal("-1.00"),
        status="OPEN",
        created_at=T0,
        settled_at=None,
        updated_at=T0 + timedelta(seconds=revision),
        extra_fields=extra,
    )


def _figures(label: str, waits: list[float]) -> str:
    if not waits:
        return f"{label}: no page"
    return (
        f"{label}: {len(waits):,} pages, median {statistics.median(waits) * 1000:.1f} ms, "
        f"longest {max(waits) * 1000:.0f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backend", choices=harness.BACKENDS, default="postgres")
    args = parser.parse_args()
    with harness.database(args.backend) as url:
        store = Warehouse.connect(url, keep_revisions=True)
        store.migrate()
        window = Window(T0 - timedelta(days=1), T0)
        store.state.start_rebuild(
            MERCHANT,
            change_cursor="c0",
            anchor_at=T0,
            history_from=window.start,
            snapshot_to=window.end,
            windows=[window],
        )
        started = time.perf_counter()
        for first in range(0, args.rows, PAGE):
            batch = [_record(n, 1) for n in range(first, min(first + PAGE, args.rows))]
            store.pages.commit_window_pages(
                MERCHANT,
                [
                    WindowPage(
                        REBUILD_JOB,
                        window,
                        records=batch,
                        rejected=[],
                        next_cursor=f"c{first}",
                        cursor_issued_at=T0,
                        done=False,
                        position=str(first),
                    )
                ],
            )
        print(f"loaded {args.rows:,} records in {time.perf_counter() - started:.1f} s")
        stop = threading.Event()
        phase = ["before"]
        waits: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        failures: list[float] = []

        def live() -> None:  # the sync: pages of new revisions, as the tail writes them
            sequence, n = 0, 0
            while not stop.is_set():
                changes = []
                for _ in range(100):
                    record = _record(n, 2 + sequence // args.rows)
                    changes.append(
                        RecordChange(str(sequence), record.record_id, record.revision, T0, record)
                    )
                    sequence, n = sequence + 1, (n + 7919) % args.rows
                began = time.perf_counter()
                try:
                    store.pages.commit_tail_page(
                        MERCHANT,
                        TailPage(
                            records=[c.record for c in changes],
                            rejected=[],
                            next_cursor=f"t{sequence}",
                            last_sequence=str(sequence - 1),
                            projection_as_of=T0,
                            position="t",
                            changes=changes,
                        ),
                    )
                except WarehouseUnavailableError:  # the sync tries the page again
                    failures.append(time.perf_counter() - began)
                    continue
                waits[phase[0]].append(time.perf_counter() - began)

        writer = threading.Thread(target=live)
        writer.start()
        time.sleep(10.0)  # the writer's pace before any promotion
        phase[0] = "during"
        began = time.perf_counter()
        result = store.fields.promote_field("tax", "decimal")
        took = time.perf_counter() - began
        phase[0] = "after"
        time.sleep(max(10.0, store.promoted_fields.ttl + 0.5))  # the writer fills it too
        stop.set()
        writer.join()
        rows = 2 * args.rows  # records and record_revisions, before the live revisions
        print(
            f"promoted in {took:.1f} s ({rows / took:,.0f} rows/s of both tables): "
            f"{result.filled:,} values filled, {result.unfit} unfit"
        )
        for label in ("before", "during", "after"):
            print(_figures(f"live pages {label} the promotion", waits[label]))
        print(f"live pages that failed (the sync retries them): {len(failures)}")
        print(f"rows whose column differs from their members: {_wrong_rows(store, args.rows)}")
        store.close()
    return 0


def _wrong_rows(store: Warehouse, rows: int) -> int:
    """Rows of both tables whose column is not their member's value, read 10 000 records at a
    time (one read of everything outlasts a session's idle-in-transaction limit)."""
    wrong = 0
    with store.engine.connect() as conn:
        # MariaDB's JSON is its LONGTEXT already (and CAST has no TEXT there).
        extra = "extra_fields" if conn.dialect.name == "mysql" else "CAST(extra_fields AS TEXT)"
        for table in ("records", "record_revisions"):
            for first in range(0, rows, 10_000):
                found = conn.execute(
                    text(
                        f"SELECT tax, {extra} FROM {table} "
                        "WHERE merchant_id = :m AND record_id >= :low AND record_id < :high"
                    ),
                    {"m": MERCHANT, "low": f"r{first:09d}", "high": f"r{first + 10_000:09d}"},
                ).all()
                conn.commit()
                for tax, kept in found:
                    expected = members(kept).get("tax")
                    wrong += (None if tax is None else Decimal(str(tax))) != expected
    return wrong


if __name__ == "__main__":
    raise SystemExit(main())
