"""Promoting a kept field on a big warehouse while the sync writes: how long it takes, how
long the writer waited at most for one page, and whether the column equals the members.

A fresh PostgreSQL (or SQLite) warehouse gets ``--rows`` records (half carrying a 30-digit
``tax`` member, in ``extra_fields``) through the page writer, then ``fields promote tax
--type decimal`` runs while a writer thread keeps committing pages of new revisions (with and
without the member).  No platform is involved: a promotion never asks it for anything.

    .venv/bin/python bench/promotion.py [--rows 1000000] [--backend postgres|sqlite]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

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


def _url(backend: str, folder: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{folder / 'promotion.db'}"
    import psycopg  # noqa: PLC0415

    name = f"bench_promotion_{int(time.time())}"
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=test", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"postgresql://postgres@127.0.0.1/{name}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = Warehouse.connect(_url(args.backend, Path(folder)), keep_revisions=True)
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
        waits: list[float] = []
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
                waits.append(time.perf_counter() - began)

        writer = threading.Thread(target=live)
        writer.start()
        began = time.perf_counter()
        result = store.fields.promote_field("tax", "decimal")
        took = time.perf_counter() - began
        time.sleep(store.promoted_fields.ttl + 0.5)
        stop.set()
        writer.join()
        print(f"promoted in {took:.1f} s: {result.filled:,} values filled, {result.unfit} unfit")
        print(
            f"live pages meanwhile: {len(waits):,}, longest {max(waits):.3f} s, "
            f"median {sorted(waits)[len(waits) // 2]:.4f} s, failed {len(failures)}"
        )
        wrong = 0
        with store.engine.connect() as conn:
            for table in ("records", "record_revisions"):
                # Read whole first: comparing row by row inside the read outlasts the
                # session's idle-in-transaction limit.
                rows = conn.execute(
                    text(f"SELECT tax, CAST(extra_fields AS TEXT) FROM {table}")
                ).all()
                for tax, extra in rows:
                    expected = members(extra).get("tax")
                    got = None if tax is None else Decimal(str(tax))
                    wrong += got != expected
        print(f"rows whose column differs from their members: {wrong}")
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
