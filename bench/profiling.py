"""Where the time goes: py-spy samples a running benchmark, this sums the samples by layer.

py-spy (``pip install py-spy``; a bench-only tool) samples every thread of a process from the
outside, C extensions and released-GIL database calls included, at a fixed rate, without
changing what it measures much.  ``py_spy`` records our own process while a block runs;
``summarise`` reads the raw ("collapsed stacks") output and attributes each sample to the
first layer found walking from the innermost frame outwards.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

# (layer, substrings of "function (file" that belong to it), tried in this order per frame.
LAYERS: Final = (
    ("warehouse: commit", ("do_commit (",)),
    # PyMySQL's escaping builds the MariaDB statement's literals (mariadb_pages.py): encoding
    # in pure Python, though it sits in the driver's package.
    ("warehouse: rows encoded for the driver", ("pymysql/converters.py",)),
    (
        "warehouse: driver executes the statement",
        (
            "do_executemany (",
            "do_execute (",
            "psycopg/",
            "psycopg_binary/",
            "pymysql/",
            "sqlite3/",
        ),
    ),
    (
        "warehouse: rows encoded for the driver",
        (
            "warehouse/pages/staging.py",
            "warehouse/pages/mariadb.py",
            "warehouse/pages/postgres/copy.py",
            "warehouse/pages/upsert.py",
            "warehouse/pages/revisions.py",
            "warehouse/types.py",
            "warehouse/values.py",
        ),
    ),
    ("warehouse: transaction and bookkeeping", ("warehouse/", "sqlalchemy/")),
    ("parse + validate (models, money, times)", ("models.py", "money.py", "times.py")),
    ("envelope + JSON decode (orjson)", ("envelope.py",)),
    ("HTTP (httpx, httpcore, h11, socket)", ("httpx/", "httpcore/", "h11/", "socket.py")),
    ("client: signing, budget, retries", ("client.py", "signing.py", "budget.py", "retry.py")),
    ("sync engine", ("sync/",)),
)
OTHER: Final = "other (scheduler, logging, threads)"
# A sample whose innermost frame is one of these is a thread waiting, not working: for the
# writer lock (the engine's commit lock; py-spy counts a lock wait as active), a queue, an
# event or the thread pool.  The engine (the sync modules that orchestrate, as opposed to the
# pure plan, drift and resilience ones) itself computes next to nothing.
WAITING: Final = "waiting (writer lock, queues, idle workers)"
_ENGINE: Final = ("engine", "context", "jobs", "anchor", "snapshot", "tail", "drift_check")
_WAIT_FRAMES: Final = (
    "threading.py",
    "thread.py",
    "queue.py",
    "stopping.py",
    *(f"sync/{name}.py" for name in _ENGINE),
)


def available() -> bool:
    return shutil.which("py-spy", path=str(Path(sys.executable).parent)) is not None


@contextlib.contextmanager
def py_spy(
    output: Path, *, rate: int = 250, pid: int | None = None, gil: bool = False
) -> Iterator[None]:
    """Sample this process (or ``pid``) while the block runs; raw collapsed stacks go to
    ``output``.  ``gil``: only the thread holding the GIL (Python's own CPU, no waits)."""
    executable = shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if executable is None:
        raise RuntimeError("py-spy is not installed in this venv: pip install py-spy")
    process = subprocess.Popen(  # noqa: S603 - the profiler, on our own pid
        [
            executable,
            "record",
            "--pid",
            str(os.getpid() if pid is None else pid),
            "--format",
            "raw",
            "--rate",
            str(rate),
            "--threads",
            *(("--gil",) if gil else ()),
            "--output",
            str(output),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # let it attach before the measured work starts
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        process.wait(timeout=60)


def layer_of(stack: list[str]) -> str:
    if any(needle in stack[-1] for needle in _WAIT_FRAMES):
        return WAITING
    for frame in reversed(stack):
        for layer, needles in LAYERS:
            if any(needle in frame for needle in needles):
                return layer
    return OTHER


def summarise(path: Path) -> list[tuple[str, float]]:
    """(layer, share of the working samples), largest first; waiting last, as a share of all."""
    counts: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        if not stack or not number.isdigit():
            continue
        counts[layer_of(stack.split(";"))] += int(number)
    waiting = counts.pop(WAITING, 0)
    working = sum(counts.values()) or 1
    shares = [(layer, count / working) for layer, count in counts.most_common()]
    return [*shares, (f"{WAITING}, of all samples", waiting / ((working + waiting) or 1))]
