"""The windows of one job still to read, shared by its snapshot workers: who reads which
window, how many chains are in flight and wanted, how many pages are left, and the cuts and
carries that hand a window's rest to more chains (``window_chain``).  One lock guards it all;
nothing here does I/O.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime

from recordsync.core.state import (
    Window,
    WindowProgress,
)
from recordsync.core.stopping import Stopper
from recordsync.core.times import MILLISECOND
from recordsync.platform.budget import Pace
from recordsync.sync.plan import hand_out_order
from recordsync.sync.windows import (
    carry_over,
    chains_needed,
    resplit_parts,
)


class PendingWindows:
    """The windows of one job still to read, shared by its worker jobs in hand-out order.

    Workers take windows until none is left; a chain that re-splits the rest of its window
    (``windows.resplit``) offers the new pieces here, and more workers are started for them
    (``spawn``, set by ``schedule_snapshot``), up to ``most_workers``.  ``done`` is set when
    the last worker finds nothing left to read.

    ``on_progress`` is told ``(total, finished)`` under the lock whenever either changes, so
    its reports can never arrive out of order: reported after the lock, a cut's count taken
    before another chain's window ended could land after it and set the progress back (the
    metric then ended at 3 of 4 windows done for a job that was done).
    """

    def __init__(
        self,
        pending: Sequence[WindowProgress],
        workers: int,
        *,
        total: int | None = None,
        most_workers: int | None = None,
    ) -> None:
        self.queue: deque[WindowProgress] = deque(hand_out_order(pending))
        self.workers = workers
        self.most_workers = max(workers, most_workers or workers)
        self.total = len(pending) if total is None else total
        self.finished = self.total - len(pending)
        self.running = 0  # workers started and not yet finished
        self.in_flight = 0  # windows taken by a worker and not finished
        self.reserved = 0  # windows a chain is cutting from its own, not yet queued
        self.abandoned = False
        self.spawn: Callable[[int], None] | None = None
        self.on_progress: Callable[[int, int], None] | None = None
        # Set by ``schedule_snapshot``: the job's stop, and who hears that its last worker ended.
        self.stopper: Stopper | None = None
        self.on_end: Callable[[], None] | None = None
        # Moving average of a page's time from its parsed answer to its chain's next request:
        # its wait for the writer and its commit.  It is part of every chain's cycle,
        # so chains_needed counts it (the commit alone, 0.1 s here, left out the wait behind
        # another chain's commit: 0.3 s a page in all, and one chain too few, 1b).
        self.work_seconds: float | None = None
        # Each window being read: (pages read, milliseconds covered, pages left) as its chain
        # last reported them, None before its first page; what the cuts share out.
        self.reading: dict[Window, tuple[float, float, float] | None] = {}
        self.done = threading.Event()
        self.lock = threading.Lock()

    def start(self) -> int:
        with self.lock:
            self.running += self.workers
        return self.workers

    def take(self) -> WindowProgress | None:
        """The next window to read, or None: this worker ends (the last one sets ``done``)."""
        with self.lock:
            if self.queue:
                self.in_flight += 1
                item = self.queue.popleft()
                self.reading[item.window] = None
                return item
            self.running -= 1
            ended = self.running == 0
            if ended and not self.abandoned:
                self.done.set()
        if ended:
            self._ended()
        return None

    def window_finished(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.finished += 1
            self._progressed()

    def _progressed(self) -> None:
        """Report the progress; under the lock (see the class docstring)."""
        if self.on_progress is not None:
            self.on_progress(self.total, self.finished)

    def worker_stopped(self, *, reading: bool) -> None:
        """A worker ends without finishing (a stop or an error): the job is not done."""
        with self.lock:
            self.abandoned = True
            self.running -= 1
            if reading:
                self.in_flight -= 1
            ended = self.running == 0
        if ended:
            self._ended()

    @property
    def wants_budget(self) -> bool:
        """Workers are reading (or waiting to read on) and the job was not stopped: the tail
        leaves the budget to them (``demand``)."""
        stopper = self.stopper
        return self.running > 0 and not (stopper is not None and stopper.stopped)

    def _ended(self) -> None:
        if self.on_end is not None:
            self.on_end()

    def committed(self, window: Window, seconds: float, *, finished: bool) -> None:
        """A page of ``window`` was answered ``seconds`` ago and is committed; ``finished``:
        its last."""
        with self.lock:
            if finished:
                self.reading.pop(window, None)
            previous = self.work_seconds
            self.work_seconds = seconds if previous is None else previous + (seconds - previous) / 4

    def report(self, window: Window, *, read: float, covered_ms: float, left: float) -> None:
        """A chain committed a page of ``window``: ``read`` pages so far over ``covered_ms``
        of it, about ``left`` pages to go (0: it is done)."""
        with self.lock:
            if left > 0:
                self.reading[window] = (read, covered_ms, left)
            else:
                self.reading.pop(window, None)

    def pages_left(self, window: Window) -> float:
        """What ``window``'s chain has left to read: as it last reported, or for a window not
        measured yet its length at the density measured so far (infinite before any: the
        job's first pages go in the order they ask).  Its requests' rank in the budget."""
        with self.lock:
            report = self.reading.get(window)
            if report is not None:
                return report[2]
            per_ms = self._pages_per_ms()
            if per_ms <= 0:
                return math.inf
            return per_ms * ((window.end - window.start) / MILLISECOND)

    def _pages_per_ms(self) -> float:
        """The density the chains measured so far (0 before any report); under the lock."""
        reports = [item for item in self.reading.values() if item is not None]
        read = sum(item[0] for item in reports)
        covered = sum(item[1] for item in reports)
        return read / covered if covered > 0 else 0.0

    def pages_elsewhere(self, window: Window) -> float:
        """The pages left to read outside ``window``: what the other chains reported, and
        for windows not yet measured (queued, or just taken) their length at the density
        the chains measured so far."""
        with self.lock:
            per_ms = self._pages_per_ms()
            unmeasured = [item.window for item in self.queue]
            unmeasured += [key for key, item in self.reading.items() if item is None]
            return sum(
                item[2] for key, item in self.reading.items() if item is not None and key != window
            ) + per_ms * sum(
                (piece.end - piece.start) / MILLISECOND for piece in unmeasured if piece != window
            )

    def chains_wanted(self, pace: Pace) -> int | None:
        """Chains that keep the budget busy at the measured round trip (None: not measured)."""
        if pace.round_trip is None:
            return None
        return chains_needed(
            requests=pace.requests,
            seconds=pace.seconds,
            margin=pace.margin,
            round_trip=pace.round_trip,
            work=self.work_seconds or 0.0,
        )

    def grow(self, wanted: int) -> None:
        """Start workers for queued windows while fewer run than ``wanted`` chains: a job
        of more windows than configured workers (a week at 3 s) needs them, not cuts."""
        with self.lock:
            started = min(min(wanted, self.most_workers) - self.running, len(self.queue))
            self.running += max(started, 0)
        if started > 0 and self.spawn is not None:
            self.spawn(started)

    def reserve(self, wanted: int, pages_left: float, others_left: float) -> int:
        """Into how many windows this chain cuts the rest of its own; the new ones count as
        queued at once, so two chains deciding together do not both cut for the same gap
        (``offer`` or ``release`` settles the reservation)."""
        with self.lock:
            parts = resplit_parts(
                wanted=wanted,
                in_flight=self.in_flight,
                queued=len(self.queue) + self.reserved,
                pages_left=pages_left,
                others_left=others_left,
            )
            self.reserved += parts - 1
            return parts

    def release(self, parts: int) -> None:
        with self.lock:
            self.reserved -= parts - 1

    def offer(
        self, window: Window, cut: Sequence[Window], pieces: Sequence[WindowProgress]
    ) -> None:
        """A chain's ``window`` was cut into the windows ``cut``, read on by that chain but
        ``pieces``, which are queued, with new workers for them where allowed."""
        with self.lock:
            self.reading.pop(window, None)
            self.reading[cut[0]] = None
            self.reserved -= len(pieces)
            self.queue.extend(pieces)
            self.total += len(cut)
            self.finished += 1  # the window that was cut ends where its pieces begin
            started = min(len(pieces), self.most_workers - self.running)
            self.running += max(started, 0)
            self._progressed()
        if started > 0 and self.spawn is not None:
            self.spawn(started)

    def claim_following(
        self, window: Window, read_up_to: datetime, wanted: int
    ) -> tuple[WindowProgress, Window] | None:
        """The queued window that starts where ``window`` ends, taken off the queue, and the
        window joining it to the rest of ``window`` (``windows.carry_over``), for this chain
        to read on in (``carry_into`` or ``unclaim`` settles it).  None when there is no such
        unread window, when the two would not fit in 24 h, or when without it fewer windows
        than the ``wanted`` chains would be left to read.  Decided under the lock, so that no
        other worker sees the queue without the window unless it is carried."""
        with self.lock:
            if self.in_flight + len(self.queue) + self.reserved - 1 < wanted:
                return None
            for item in self.queue:
                if (
                    item.window.start == window.end
                    and item.cursor is None
                    and not item.done
                    and item.records == 0
                ):
                    joined = carry_over(window, item.window, read_up_to)
                    if joined is None:
                        return None
                    self.queue.remove(item)
                    return item, joined
            return None

    def unclaim(self, item: WindowProgress) -> None:
        """The carry was not committed: the window is queued again (this chain's worker takes
        windows until none is left, so it is read even if every other worker has ended)."""
        with self.lock:
            self.queue.appendleft(item)

    def carry_into(self, window: Window, joined: Window) -> None:
        """``window``'s chain reads on in ``joined``, its rest and the window it claimed."""
        with self.lock:
            self.reading.pop(window, None)
            self.reading[joined] = None
            self.finished += 1  # the window ends where the joined one begins
            self._progressed()
