"""Fixtures shared by every test; the database ones live in dbfixtures.py (see its docstring)."""

import sys
from collections.abc import Iterator

import pytest
import structlog
from dbfixtures import warehouse, warehouse_url
from hypothesis import settings
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

__all__ = ["reset_logging", "take_turns_at_the_servers", "warehouse", "warehouse_url"]


@pytest.fixture(autouse=True)
def reset_logging() -> Iterator[None]:
    """Each test starts and ends with structlog's defaults, no process-wide log fields and
    the standard library's logging, warnings and exception hooks as they were."""
    yield
    logs.reset_logging()
    structlog.reset_defaults()
    logs.process_context.clear()


# Where every test may reach the database servers without saying so in its parameters.
_SERVER_FOLDERS = frozenset({"e2e", "deploy"})
_SERVER_MODULES = frozenset({"test_round_event_outage.py"})
_SERVERS = frozenset({"postgres", "mariadb"})


def _reaches_the_servers(item: pytest.Item) -> bool:
    """Whether a restart of the database servers could break the test: its backend is
    PostgreSQL or MariaDB, or it lives where tests start daemons against them.  The others
    (pure code, SQLite) go on while a restart test runs, instead of idling the workers for
    the five minutes the restarts take."""
    if item.get_closest_marker("postgres") or item.get_closest_marker("mariadb"):
        return True
    callspec = getattr(item, "callspec", None)
    backend = callspec.params.get("warehouse_url") if callspec is not None else None
    if backend is not None:
        return backend in _SERVERS
    return item.path.parent.name in _SERVER_FOLDERS or item.path.name in _SERVER_MODULES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that restart the servers first: they run alone, so run while the workers
    still have tests that never reach the servers to go on with, not last with nothing
    beside them."""
    items.sort(key=lambda item: item.get_closest_marker("restarts_services") is None)


@pytest.fixture(autouse=True)
def take_turns_at_the_servers(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that restarts the database servers runs while no other worker runs one."""
    exclusive = request.node.get_closest_marker("restarts_services") is not None
    if not exclusive and not _reaches_the_servers(request.node):
        yield
        return
    with servers_turn(exclusive=exclusive):
        yield
