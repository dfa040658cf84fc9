"""Commands as an operator runs them, through the CLI's own ``main`` in this process: the code a
shell runs, without an interpreter's start per call (about 1 s each on a loaded machine)."""

from __future__ import annotations

import contextlib
import io
import signal
from dataclasses import dataclass
from pathlib import Path

import structlog

from recordsync import cli, logs


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def recordsync_cli(config: Path, *args: str) -> Ran:
    """``recordsync --config CONFIG ARGS``, its output captured.  What ``main`` sets
    process-wide (the log, the signal handlers of the graceful commands) is put back after
    each call."""
    out, err = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["--config", str(config), *args])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        logs.reset_logging()
        structlog.reset_defaults()
    return Ran(code, out.getvalue(), err.getvalue())


def merchant(config: Path, *args: str) -> Ran:
    """``recordsync --config CONFIG merchant ARGS``, its output captured."""
    return recordsync_cli(config, "merchant", *args)
