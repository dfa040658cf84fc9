"""The commands that sync pages run with the collector tuned for it (service.collector)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from recordsync.service import tune_collector
from recordsync.service.collector import YOUNG_THRESHOLD


@pytest.fixture
def collector_restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.usefixtures("collector_restored")
def test_the_young_generation_waits_longer_and_start_up_objects_are_frozen() -> None:
    _young, middle, oldest = gc.get_threshold()
    tune_collector()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, oldest)
    assert gc.get_freeze_count() > 0


# The probe runs a command that stops at its settings (none are given), after the tuning.
PROBE = (
    "import gc, sys, recordsync.cli as cli; before = gc.get_threshold()[0]; "
    "cli.main(sys.argv[1:]); print(before, gc.get_threshold()[0], gc.get_freeze_count() > 0)"
)
SPAN = ["--from", "2024-01-01T00:00:00Z", "--to", "2024-01-02T00:00:00Z"]


@pytest.mark.parametrize(
    ("command", "tuned"),
    [(["backfill", *SPAN], True), (["run"], True), (["verify", *SPAN], True), (["status"], False)],
    ids=["backfill", "run", "verify", "status"],
)
def test_only_the_commands_that_sync_tune_the_collector(
    command: list[str], tuned: bool, tmp_path: Path
) -> None:
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("RECORDSYNC_")
    }
    done = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-c", PROBE, *command],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
        cwd=tmp_path,
    )
    before, after, frozen = done.stdout.split()[-3:]
    assert (after, frozen) == ((str(YOUNG_THRESHOLD), "True") if tuned else (before, "False"))
