"""What makes a process out of the parts, in three rooms: the commands' bodies
(``commands/``), the daemon (``daemon/``) and its listening ports (``ports/``), with what they
share beside them (``runtime``: a merchant's client and engines built one way; ``secrets``,
``signals``, ``readiness``).  The CLI only parses and calls the entry points below.

Each entry point is imported on first use: a command pays only for its own room (``status``
needs neither the daemon nor the platform client, whose imports cost more than its query),
and every process a test, a probe or cron starts starts sooner.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from recordsync.service.commands.backfill import run_backfill, run_resync
    from recordsync.service.commands.control import pause_merchant, resume_merchant
    from recordsync.service.commands.demo import run_demo
    from recordsync.service.commands.dry_run import dry_run_range, dry_run_reset
    from recordsync.service.commands.merchant_state import export_state, import_state, show_state
    from recordsync.service.commands.report import show_report
    from recordsync.service.commands.reset import run_reset
    from recordsync.service.commands.schema import migrate
    from recordsync.service.commands.status import show_status
    from recordsync.service.commands.verify import run_verify
    from recordsync.service.daemon.run import run_daemon
    from recordsync.service.runtime import warn_settings

_HOMES: _typing.Final = {
    "run_backfill": "recordsync.service.commands.backfill",
    "run_resync": "recordsync.service.commands.backfill",
    "pause_merchant": "recordsync.service.commands.control",
    "resume_merchant": "recordsync.service.commands.control",
    "run_demo": "recordsync.service.commands.demo",
    "dry_run_range": "recordsync.service.commands.dry_run",
    "dry_run_reset": "recordsync.service.commands.dry_run",
    "export_state": "recordsync.service.commands.merchant_state",
    "import_state": "recordsync.service.commands.merchant_state",
    "show_state": "recordsync.service.commands.merchant_state",
    "show_report": "recordsync.service.commands.report",
    "run_reset": "recordsync.service.commands.reset",
    "migrate": "recordsync.service.commands.schema",
    "show_status": "recordsync.service.commands.status",
    "run_verify": "recordsync.service.commands.verify",
    "run_daemon": "recordsync.service.daemon.run",
    "warn_settings": "recordsync.service.runtime",
}

__all__ = [
    "dry_run_range",
    "dry_run_reset",
    "export_state",
    "import_state",
    "migrate",
    "pause_merchant",
    "resume_merchant",
    "run_backfill",
    "run_daemon",
    "run_demo",
    "run_reset",
    "run_resync",
    "run_verify",
    "show_report",
    "show_state",
    "show_status",
    "warn_settings",
]


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value
    return value
