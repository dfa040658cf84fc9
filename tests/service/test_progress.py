"""The demo's vital signs line: records per second, budget share, tail delay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rich.console import Console

from recordsync.core.state import Window
from recordsync.service.commands.progress import RichProgress


def test_vitals_report_rate_budget_use_and_tail_delay() -> None:
    now = [100.0]
    wall = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
    progress = RichProgress(
        Console(file=None, quiet=True), clock=lambda: now[0], wall_clock=lambda: wall
    )
    progress.show_budget(2, 1.0)
    window = Window(wall - timedelta(days=1), wall)
    progress.windows_planned("rebuild", total=2, done=0)
    for second in range(4):
        now[0] = 100.0 + second
        progress.window_page("rebuild", window, 1000, done=False)
        progress.tail_page(
            0, has_more=False, projection_as_of=wall - timedelta(seconds=1.5), last_sequence=None
        )
    # 8 pages (4 snapshot, 4 tail) over 3 s = 2.7 requests/s against a 2/s budget.
    assert progress.vitals(103.0) == "1,333 records/s · budget 100% of 2/1s · tail 1.5s behind"
    assert progress._records["rebuild"] == 4000
