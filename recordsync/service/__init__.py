"""What makes a process out of the parts: the commands' bodies, the daemon's lease terms, the
health and metrics server, the metric adapters, the progress display, and signals.

It builds the platform client, the warehouse and the sync engine from the settings
(``app``) and runs them; the CLI only parses and calls the entry points below.
"""

from recordsync.service.backfill import run_backfill, run_resync
from recordsync.service.control import pause_merchant, resume_merchant
from recordsync.service.daemon import run_daemon
from recordsync.service.demo import run_demo
from recordsync.service.dry_run import dry_run_range, dry_run_reset
from recordsync.service.merchant_state import export_state, import_state, show_state
from recordsync.service.report import show_report
from recordsync.service.reset import run_reset
from recordsync.service.runtime import warn_settings
from recordsync.service.schema import migrate
from recordsync.service.status import show_status
from recordsync.service.verify import run_verify

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
