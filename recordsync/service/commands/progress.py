"""A live display for people at a terminal (rich); plain log lines everywhere else.

Shows the snapshot windows (done of total, records), the tail (changes applied), and one
line of vital signs: records per second, how much of the shared rate budget the pages use,
and how far the tail is behind the platform (now minus the last ``projection_as_of``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Self

from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from recordsync.core.state import Window
from recordsync.sync.events import SyncObserver

RATE_WINDOW_SECONDS = 5.0


class RichProgress(SyncObserver):
    """Windows done of total per job, records written, and the sync's vital signs."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[records]:>9,} records"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.live = Live(Group(self.progress, self), console=console, refresh_per_second=4)
        self._clock = clock
        self._wall_clock = wall_clock
        self._tasks: dict[str, TaskID] = {}
        self._records: dict[str, int] = {}
        self._lock = threading.Lock()
        self._pages: deque[tuple[float, int]] = deque()  # (when, records) of recent pages
        self._projection_as_of: datetime | None = None
        self._budget: tuple[int, float] | None = None

    def __enter__(self) -> Self:
        self.live.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.live.stop()

    def __rich__(self) -> Text:
        """The vitals line under the bars, rendered at every refresh."""
        with self._lock:
            return Text(self.vitals(self._clock()), style="dim")

    def show_budget(self, requests: int, seconds: float) -> None:
        """The budget's size, to show how much of it the pages use."""
        self._budget = (requests, seconds)

    def windows_planned(self, job: str, total: int, done: int) -> None:
        self.planned(job, "snapshot" if job == "rebuild" else "backfill", total, done)

    def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
        self.page(job, records, done=done)

    def tail_page(
        self,
        changes: int,
        *,
        has_more: bool,
        projection_as_of: datetime | None,
        last_sequence: str | None,
    ) -> None:
        self.tail(None, changes, projection_as_of)

    def for_merchant(self, merchant_id: str) -> SyncObserver:
        """An observer of one merchant's sync, its bars labelled with the merchant (several
        merchants side by side in one display)."""
        return _MerchantProgress(self, merchant_id)

    def planned(self, key: str, label: str, total: int, done: int) -> None:
        with self._lock:
            if key not in self._tasks:
                self._tasks[key] = self.progress.add_task(label, total=total, records=0)
            self.progress.update(self._tasks[key], total=total, completed=done)

    def page(self, key: str, records: int, *, done: bool) -> None:
        with self._lock:
            task = self._tasks.get(key)
            if task is not None:
                self._records[key] = self._records.get(key, 0) + records
                self.progress.update(task, advance=1 if done else 0, records=self._records[key])
            self._page(records)

    def tail(
        self, merchant_id: str | None, changes: int, projection_as_of: datetime | None
    ) -> None:
        key = f"tail:{merchant_id}"
        with self._lock:
            self._records[key] = self._records.get(key, 0) + changes
            if projection_as_of is not None:
                self._projection_as_of = projection_as_of
            if key not in self._tasks:
                label = "tail" if merchant_id is None else f"{merchant_id} tail"
                self._tasks[key] = self.progress.add_task(label, total=None, records=0)
            self.progress.update(self._tasks[key], records=self._records[key])
            self._page(changes)

    def _page(self, records: int) -> None:
        now = self._clock()
        self._pages.append((now, records))
        while self._pages and self._pages[0][0] < now - RATE_WINDOW_SECONDS:
            self._pages.popleft()

    def vitals(self, now: float) -> str:
        """One line: records per second, share of the rate budget used, tail delay."""
        span = max(now - self._pages[0][0], 1.0) if self._pages else 1.0
        per_second = sum(count for _, count in self._pages) / span
        parts = [f"{per_second:,.0f} records/s"]
        if self._budget is not None:
            requests, seconds = self._budget
            used = len(self._pages) / span / (requests / seconds)
            parts.append(f"budget {min(used, 1.0):.0%} of {requests}/{seconds:g}s")
        if self._projection_as_of is not None:
            behind = (self._wall_clock() - self._projection_as_of).total_seconds()
            parts.append(f"tail {max(behind, 0.0):.1f}s behind")
        return " · ".join(parts)


class _MerchantProgress(SyncObserver):
    """One merchant's view of a shared ``RichProgress``."""

    def __init__(self, display: RichProgress, merchant_id: str) -> None:
        self._display = display
        self._merchant_id = merchant_id

    def windows_planned(self, job: str, total: int, done: int) -> None:
        kind = "snapshot" if job == "rebuild" else "backfill"
        label = f"{self._merchant_id} {kind}"
        self._display.planned(f"{self._merchant_id}:{job}", label, total, done)

    def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
        self._display.page(f"{self._merchant_id}:{job}", records, done=done)

    def tail_page(
        self,
        changes: int,
        *,
        has_more: bool,
        projection_as_of: datetime | None,
        last_sequence: str | None,
    ) -> None:
        self._display.tail(self._merchant_id, changes, projection_as_of)
