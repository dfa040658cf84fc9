"""One line per reason per interval, counting the occurrences it stands for."""

from __future__ import annotations

from recordsync.core.log_throttle import LogThrottle


def test_the_first_of_a_reason_is_due_and_the_rest_are_counted_into_its_next_line():
    now = [0.0]
    lines: LogThrottle[str] = LogThrottle(60.0, clock=lambda: now[0])
    assert lines.due("a") == 1
    assert lines.due("a") is None
    assert lines.due("b") == 1  # another reason has its own interval
    now[0] = 59.9
    assert lines.due("a") is None
    now[0] = 60.0
    assert lines.due("a") == 3  # the two counted, and this one
    assert lines.due("a") is None
    now[0] = 200.0
    assert lines.due("a") == 2
    assert lines.due("b") == 1
