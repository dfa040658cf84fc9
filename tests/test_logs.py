"""The daemon's log stream: one JSON object a line, whatever else writes to the same file."""

from __future__ import annotations

import io
import json

import structlog

from recordsync.logs import configure_logging


class CountedWrites(io.StringIO):
    """A stream that keeps every write call, as an unbuffered file would issue them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


def test_each_log_line_is_one_write_with_its_newline() -> None:
    stream = CountedWrites()
    configure_logging(stream=stream, log_format="json")
    log = structlog.get_logger("recordsync.test")
    log.info("first", merchant_id="m-1")
    log.warning("second", count=2)
    assert len(stream.calls) == 2
    for call in stream.calls:
        assert call.endswith("\n")
        assert call.count("\n") == 1
        json.loads(call)
