"""Fixtures shared by every test; the database ones live in dbfixtures.py and, for the tests
that stop and start a server, private_servers.py (see their docstrings)."""

import sys
from collections.abc import Iterator

import pytest
import structlog
from hypothesis import settings
from support.dbfixtures import databases_dropped_at_the_end, warehouse, warehouse_url
from support.leftovers import kill_left_behind
from support.private_servers import private_server

from recordsync import logs

# The simulator most tests run in this process stamps a request's arrival in its handler thread,
# which must first get the GIL from the engine's threads; at Python's default 5 ms switch
# interval that wait reaches tens of milliseconds on a loaded machine (three workers on two
# cores), so two requests the client spaced correctly may be stamped closer than they arrived
# and counted as a rate-limit violation that no platform would see.  1 ms, as the simulator's
# own process uses (recordsync/sim/__main__.py), keeps the stamp within a few.
sys.setswitchinterval(0.001)

# No per-example deadline: the suite runs three workers on two cores beside database servers,
# and an example that takes 200 ms there is slow, not wrong (a pure quoting property failed
# once in a full run and passed on its own, replaying the same examples).  Speed is measured
# in bench/, never asserted here.
settings.register_profile("recordsync", deadline=None)
settings.load_profile("recordsync")

__all__ = [
    "databases_dropped_at_the_end",
    "no_process_left_behind",
    "private_server",
    "reset_logging",
    "warehouse",
    "warehouse_url",
]


@pytest.fixture(autouse=True)
def reset_logging() -> Iterator[None]:
    """Each test starts and ends with structlog's defaults, no process-wide log fields and
    the standard library's logging, warnings and exception hooks as they were."""
    yield
    logs.reset_logging()
    structlog.reset_defaults()
    logs.process_context.clear()


@pytest.fixture(autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """A command or daemon a test started and did not stop is killed when the test ends."""
    yield
    kill_left_behind()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first (the restart tests, 15-75 s each, among them): with longest first,
    the workers end together instead of one finishing a long test alone at the end.  They
    all land in the first worker's block and the others steal them while running the short
    ones, which also mixes the load: a block of slow tests for every worker ran them all at
    once, and the tests that time a takeover or an answer failed."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
