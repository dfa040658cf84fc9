"""SIGINT and SIGTERM stop the work from a thread of their own: a signal that lands while the
main thread writes a log line never waits for the lock that very write holds (an
interrupted backfill hung for ever).  Where every step is its own transaction they end the
block at once, one line and 128 + the signal (``end_on_signals``)."""

from __future__ import annotations

import io
import os
import signal
import time

import pytest
import structlog

from recordsync.core.errors import CommandInterruptedError
from recordsync.core.stopping import Stopper
from recordsync.logs import configure_logging
from recordsync.service.signals import end_on_signals, stop_on_signals


class SignallingStream(io.StringIO):
    """A log stream that raises SIGINT at this process in the middle of its first write,
    while the log writer's lock is held: where an operator's Ctrl-C can always land."""

    def __init__(self) -> None:
        super().__init__()
        self.signalled = False

    def write(self, text: str) -> int:
        if not self.signalled:
            self.signalled = True
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs before this call returns
        return super().write(text)


@pytest.mark.timeout(30)  # the old handler hung here for ever
def test_a_signal_inside_a_log_write_stops_the_work_and_the_write_ends():
    stream = SignallingStream()
    configure_logging(stream=stream, log_format="json")
    stopper = Stopper()
    with stop_on_signals(stopper) as signals:
        structlog.get_logger("recordsync.test").info("a_line_being_written")
        assert stopper.wait(10)  # the watcher stopped it; the old handler hung in the write
        assert signals.signals == [signal.SIGINT]
    lines = stream.getvalue().splitlines()
    assert '"a_line_being_written"' in lines[0]
    assert any('"stopping"' in line for line in lines)


def test_a_signal_before_the_handler_took_over_is_acted_on():
    configure_logging(stream=io.StringIO(), log_format="json")
    stopper = Stopper()
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        from recordsync.core import early_signals  # noqa: PLC0415 - the CLI installs it first

        early_signals.install()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0)  # the remembered signal is queued by now
        with stop_on_signals(stopper) as signals:
            assert stopper.wait(10)
            assert signals.signals == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)


# -- end_on_signals: the commands whose every step is its own transaction --------------------


def signalled_in_block(signum, reached):
    with end_on_signals("run it again"):
        os.kill(os.getpid(), signum)  # the handler runs before this call returns
        reached.append("after the signal")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_ends_the_block_where_it_is_with_the_signals_exit_code(signum):
    reached = []
    with pytest.raises(CommandInterruptedError) as ended:
        signalled_in_block(signum, reached)
    assert reached == []
    assert ended.value.exit_code == 128 + signum
    assert str(ended.value) == f"interrupted by {signal.Signals(signum).name}: run it again"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_a_signal_remembered_before_the_block_ends_it_as_it_starts():
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        from recordsync.core import early_signals  # noqa: PLC0415 - the CLI installs it first

        early_signals.install()
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(CommandInterruptedError) as ended, end_on_signals("nothing changed"):
            pytest.fail("the block ran")
        assert ended.value.exit_code == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
