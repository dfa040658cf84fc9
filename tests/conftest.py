"""Fixtures shared by every test; the database ones live in dbfixtures.py and, for the tests
that stop and start a server, private_servers.py (see their docstrings)."""

import sys
from collections.abc import Iterator

import pytest
import structlog
from dbfixtures import warehouse, warehouse_url
from hypothesis import settings
from private_servers import private_server
from serverturns import servers_turn

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
    "private_server",
    "reset_logging",
    "take_turns_at_the_servers",
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that restart the servers first, each alone: at the start rather than among
    the last, where a worker's long test could keep them waiting for its end."""
    items.sort(key=lambda item: item.get_closest_marker("restarts_services") is None)


@pytest.fixture(autouse=True)
def take_turns_at_the_servers(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that restarts the database servers runs while no other worker runs one."""
    # Every test takes its turn, even one that never reaches the servers: with the others'
    # tests running beside the restart tests, a fresh-clone run counted one rate-limit
    # violation in the daemon restart test (its cause is not found yet; the session note
    # of 2026-11-28 says what is known), so they run alone again, as they always had.
    exclusive = request.node.get_closest_marker("restarts_services") is not None
    with servers_turn(exclusive=exclusive):
        yield
