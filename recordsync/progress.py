"""A progress bar for people at a terminal (rich); plain log lines everywhere else."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from recordsync.state import Window
from recordsync.sync.events import SyncObserver


class RichProgress(SyncObserver):
    """Windows done of total per job, and records and changes written, live on the terminal."""

    def __init__(self, console: Console | None = None) -> None:
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
        self._tasks: dict[str, TaskID] = {}
        self._records: dict[str, int] = {}
        self._lock = threading.Lock()
        self._tail: TaskID | None = None
        self._changes = 0

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.progress.stop()

    def windows_planned(self, job: str, total: int, done: int) -> None:
        with self._lock:
            if job not in self._tasks:
                label = "snapshot" if job == "rebuild" else "backfill"
                self._tasks[job] = self.progress.add_task(label, total=total, records=0)
            self.progress.update(self._tasks[job], total=total, completed=done)

    def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
        with self._lock:
            task = self._tasks.get(job)
            if task is None:
                return
            self._records[job] = self._records.get(job, 0) + records
            self.progress.update(task, advance=1 if done else 0, records=self._records[job])

    def tail_page(
        self,
        changes: int,
        *,
        has_more: bool,
        projection_as_of: datetime | None,
        last_sequence: str | None,
    ) -> None:
        with self._lock:
            self._changes += changes
            if self._tail is None:
                self._tail = self.progress.add_task("tail", total=None, records=0)
            self.progress.update(self._tail, records=self._changes)
