"""The cost of kept fields on the hot path, in process: a records page from its bytes to its
commit into SQLite (parse, plan, write), per record, without and with unknown members.

Alternates the two pages many times and keeps each one's best run, so a loaded machine
(other processes sharing the cores) disturbs the comparison as little as it can.

    .venv/bin/python bench/drift_cost.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from recordsync.core.state import REBUILD_JOB, Window, WindowPage
from recordsync.platform.parsing import usual_records_page
from recordsync.warehouse import Warehouse

PAGE = 1000
T0 = datetime(2026, 3, 1, tzinfo=UTC)
DRIFT = (
    b',"channel":"mobile","tax_amount":12345678901234567890123456.0042,'
    b'"jackpot":{"pool":"1.50","tiers":[1,2]}'
)


def _body(*, drift: bool, offset: int) -> bytes:
    items = []
    for n in range(PAGE):
        record = {
            "record_id": f"r{offset + n:09d}",
            "revision": 1,
            "player_id": "player-1",
            "game_id": "game-1",
            "currency": "EUR",
            "round_id": f"round-{n}",
            "parent_round_id": None,
            "bet_amount": "10.00",
            "refund_amount": "0",
            "payout_amount": "25.50",
            "net_amount": "15.50",
            "status": "SETTLED",
            "created_at": "2026-02-28T10:00:00.000Z",
            "settled_at": "2026-02-28T10:00:05.000Z",
            "updated_at": "2026-02-28T10:00:05.000Z",
        }
        text = orjson.dumps(record)
        items.append(text[:-1] + DRIFT + b"}" if drift else text)
    return (
        b'{"data":{"items":[' + b",".join(items) + b'],"has_more":true,"next_cursor":"c",'
        b'"snapshot_watermark":"w"},"request_id":"q"}'
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = Warehouse.connect(f"sqlite:///{Path(folder) / 'cost.db'}")
        store.migrate()
        window = Window(T0 - timedelta(days=1), T0)
        store.state.start_rebuild(
            "m",
            change_cursor="c0",
            anchor_at=T0,
            history_from=window.start,
            snapshot_to=window.end,
            windows=[window],
        )
        best = {False: float("inf"), True: float("inf")}
        parse_best = {False: float("inf"), True: float("inf")}
        offset = 0
        for _ in range(args.rounds):
            for drift in (False, True):
                body = _body(drift=drift, offset=offset)
                offset += PAGE
                began = time.perf_counter()
                page = usual_records_page(body)
                parsed = time.perf_counter()
                assert page is not None
                store.pages.commit_window_pages(
                    "m",
                    [
                        WindowPage(
                            REBUILD_JOB,
                            window,
                            records=page.records,
                            rejected=[],
                            next_cursor=f"c{offset}",
                            cursor_issued_at=T0,
                            done=False,
                            position="p",
                        )
                    ],
                )
                ended = time.perf_counter()
                best[drift] = min(best[drift], ended - began)
                parse_best[drift] = min(parse_best[drift], parsed - began)
        store.close()
    for drift in (False, True):
        label = "with drift (3 unknown members)" if drift else "without drift"
        print(
            f"{label:32s} parse {parse_best[drift] / PAGE * 1e6:6.1f} us/record, "
            f"parse+commit {best[drift] / PAGE * 1e6:6.1f} us/record, "
            f"{PAGE / best[drift]:9,.0f} records/s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
