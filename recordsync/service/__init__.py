"""What makes a process out of the parts, in three rooms: the commands' bodies
(``commands/``), the daemon (``daemon/``) and its listening ports (``ports/``), with what they
share beside them (``runtime``: a merchant's client and engines built one way; ``secrets``,
``signals``, ``readiness``).  The CLI only parses and calls the entry points below.
"""

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
