"""The client's own share of the ingest, alone: envelope + JSON decode, then page parsing and
validation, per record, on real simulator pages (bytes as they come off the socket).

No HTTP, no database, one thread: the steadiest of the figures, so a change to ``envelope``,
``models``, ``money`` or ``times`` shows here first.  The minimum of several rounds is kept
(the machine is shared; the minimum is the least disturbed round).

    .venv/bin/python bench/parse.py [--size tiny|full]
"""

from __future__ import annotations

import time
from typing import Final

import harness
import orjson

from recordsync.platform.envelope import decode_reply
from recordsync.platform.parsing import parse_records_page, usual_records_page
from recordsync.sim import SimConfig, Simulator
from recordsync.sim.store import RecordFilter

SIZES: Final = {"tiny": (20, 3), "full": (100, 7)}  # pages of 1000 records, rounds
HEADERS: Final = {"content-type": "application/json"}


def bodies(pages: int) -> list[bytes]:
    """Record pages exactly as the simulator sends them (its envelope around its items)."""
    sim = Simulator(SimConfig(history_days=1, rounds_per_day=pages * 1000))
    store = sim.store
    now_ms = sim.now_ms()
    where = RecordFilter(now_ms - 2 * 86_400_000, now_ms + 1)
    watermark = store.watermark()
    found: list[bytes] = []
    after = None
    while True:
        page = store.records(where, watermark=watermark, after=after, limit=1000)
        data = b'{"items":[' + b",".join(page.items) + b'],"next_cursor":"c","has_more":true,'
        data += b'"snapshot_watermark":"1","projection_as_of":"2026-01-01T00:00:00.000Z"}'
        found.append(b'{"data":' + data + b',"request_id":"r-' + str(len(found)).encode() + b'"}')
        if not page.has_more:
            return found
        after = page.last_key


def best_of(rounds: int, work: list[bytes], step: object) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for body in work:
            step(body)  # type: ignore[operator]
        best = min(best, time.perf_counter() - started)
    return best


def main() -> int:
    args = harness.arguments(__doc__.splitlines()[0])
    pages, rounds = SIZES[args.size]
    report = harness.Report("envelope and parsing alone", args.size)
    report.header()
    work = bodies(pages)
    count = sum(len(orjson.loads(body)["data"]["items"]) for body in work)
    report.note(f"{count:,} records in {len(work)} pages, best of {rounds} rounds")

    def decode(body: bytes) -> object:
        return decode_reply("records", 200, HEADERS, body)

    def parse(body: bytes) -> object:
        reply = decode_reply("records", 200, HEADERS, body)
        return parse_records_page(reply.data, request_id=reply.request_id)

    def client_path(body: bytes) -> object:
        # What the client does: the page from the bytes (msgspec), else the orjson path.
        return usual_records_page(body) or parse(body)

    best_of(1, work, parse)  # warm up: imports, caches, the allocator
    loads = best_of(rounds, work, orjson.loads)
    enveloped = best_of(rounds, work, decode)
    parsed = best_of(rounds, work, parse)
    direct = best_of(rounds, work, client_path)
    report.add("orjson.loads alone, per record", loads / count * 1e6, "us")
    report.add("envelope (decode_reply), per record", enveloped / count * 1e6, "us")
    report.add("envelope + parse + validate, per record", parsed / count * 1e6, "us")
    report.add("  that is, records/s on one core", count / parsed, "rec/s")
    report.add(
        "the client's path: from the bytes (msgspec), per record", direct / count * 1e6, "us"
    )
    report.add("  that is, records/s on one core", count / direct, "rec/s")
    return report.finish(check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
