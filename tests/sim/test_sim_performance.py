"""Fast enough for the benchmarks: pages of 1000 records per second over loopback."""

from __future__ import annotations

import time
from datetime import timedelta

from sim.sim_platform import sim_now, small_config

from recordsync.sim.data import generate_history
from recordsync.times import format_time

NOW_MS = 1_767_225_600_000


def test_a_hundred_thousand_records_build_in_well_under_ten_seconds():
    started = time.perf_counter()
    history = generate_history(seed=1, history_days=2, rounds_per_day=50_000, now_ms=NOW_MS)
    elapsed = time.perf_counter() - started

    assert history.columns.record_count == 100_000
    assert elapsed < 10


def test_records_and_changes_serve_at_least_20_pages_of_1000_per_second(start_sim):
    sim, platform = start_sim(small_config(history_days=1, rounds_per_day=40_000))
    end = sim_now(sim)

    started = time.perf_counter()
    pages = list(platform.records_chain(end - timedelta(hours=24), end, limit=1000))
    records_rate = len(pages) / (time.perf_counter() - started)

    params = [("since", format_time(end - timedelta(hours=24))), ("limit", "1000")]
    started = time.perf_counter()
    for _ in range(40):
        page = platform.data("/v1/record-changes", params)
        assert len(page["items"]) == 1000
        params = [("cursor", page["next_cursor"]), ("limit", "1000")]
    changes_rate = 40 / (time.perf_counter() - started)

    assert sum(len(p["items"]) for p in pages) == 40_000
    assert records_rate >= 20, records_rate
    assert changes_rate >= 20, changes_rate
