"""The read commands start without the daemon's parts: every probe's ``status --check``, each
cron ``report`` and every process a test starts pays for what it imports before its first
query (the daemon, the platform client and Alembic were 0.4 s of ``status``'s 0.9 s)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = (
    "alembic",
    "httpx",
    "uvicorn",
    "apscheduler",
    "recordsync.service.daemon",
    "recordsync.platform.client",
    "recordsync.sync.engine",
)


@pytest.mark.parametrize("entry", ["show_status", "show_report"])
def test_a_read_command_imports_none_of_the_daemons_parts(entry: str) -> None:
    probe = (
        "import sys\n"
        "from recordsync import service\n"
        f"service.{entry}\n"
        f"print(' '.join(name for name in {HEAVY!r} if name in sys.modules))\n"
    )
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed probe
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""


def test_the_daemon_entry_point_still_resolves() -> None:
    from recordsync import service  # noqa: PLC0415 - imported as the CLI does

    assert callable(service.run_daemon)
    with pytest.raises(AttributeError, match="no_such_entry"):
        service.no_such_entry  # noqa: B018 - the lookup is the test
