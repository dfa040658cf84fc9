"""The daemon's log stream: one JSON object a line, whatever else writes to the same file."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import warnings

import pytest
import structlog

from recordsync.logs import configure_logging, process_context


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


SECRET = "s3cr3t-value-never-shown"


def json_lines(stream: CountedWrites) -> list[dict[str, object]]:
    """Each write as the one JSON object it must be, its newline included."""
    for call in stream.calls:
        assert call.endswith("\n")
        assert call.count("\n") == 1, call
    return [json.loads(call) for call in stream.calls]


def configured() -> CountedWrites:
    """JSON on a counted stream, and a credential among the process's fields: every source
    must come out with it redacted."""
    stream = CountedWrites()
    configure_logging(stream=stream, log_format="json")
    process_context.update(merchant_id="m-1", signature=SECRET)
    return stream


def assert_redacted(stream: CountedWrites, event: dict[str, object]) -> None:
    assert event["merchant_id"] == "m-1"
    assert event["signature"] == "[redacted]"
    assert SECRET not in stream.getvalue()


def test_a_standard_library_error_with_its_traceback_is_one_json_line() -> None:
    stream = configured()
    try:
        raise ValueError("the cause")  # noqa: TRY301 - a traceback to log
    except ValueError:
        logging.getLogger("apscheduler.executors.workers").exception(
            'Job "%s" raised an exception', "g1:snapshot-1", extra={"authorization": SECRET}
        )
    (event,) = json_lines(stream)
    assert event["event"] == 'Job "g1:snapshot-1" raised an exception'
    assert event["logger"] == "apscheduler.executors.workers"
    assert event["level"] == "error"
    assert "timestamp" in event
    assert str(event["exception"]).startswith("Traceback (most recent call last):")
    assert "ValueError: the cause" in str(event["exception"])
    assert event["authorization"] == "[redacted]"
    assert_redacted(stream, event)


def test_a_python_warning_is_one_json_line() -> None:
    stream = configured()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("an old way", DeprecationWarning, stacklevel=1)
    (event,) = json_lines(stream)
    assert event["event"] == "python_warning"
    assert (event["level"], event["category"], event["message"]) == (
        "warning",
        "DeprecationWarning",
        "an old way",
    )
    assert str(event["where"]).startswith(__file__)
    assert_redacted(stream, event)


def test_an_exception_that_ends_a_thread_is_one_json_line() -> None:
    stream = configured()

    def boom() -> None:
        raise RuntimeError("the thread's bug")

    thread = threading.Thread(target=boom, name="worker-7")
    thread.start()
    thread.join()
    (event,) = json_lines(stream)
    assert (event["event"], event["level"], event["thread"]) == (
        "uncaught_exception",
        "error",
        "worker-7",
    )
    assert "RuntimeError: the thread's bug" in str(event["exception"])
    assert_redacted(stream, event)


def test_an_exception_that_ends_the_process_is_one_json_line() -> None:
    stream = configured()
    try:
        raise KeyError("missing")  # noqa: TRY301 - what Python hands its excepthook
    except KeyError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    (event,) = json_lines(stream)
    assert (event["event"], event["level"]) == ("uncaught_exception", "critical")
    assert "KeyError: 'missing'" in str(event["exception"])
    assert_redacted(stream, event)


@pytest.mark.parametrize(
    ("logger", "level", "shown"),
    [
        ("httpx", logging.INFO, False),
        ("apscheduler.scheduler", logging.INFO, False),
        ("apscheduler.scheduler", logging.WARNING, True),
        ("uvicorn.error", logging.WARNING, True),
        ("alembic.runtime.migration", logging.INFO, False),
    ],
    ids=["httpx-info", "apscheduler-info", "apscheduler-warning", "uvicorn-warning", "alembic"],
)
def test_libraries_speak_at_warning_and_above(logger: str, level: int, shown: bool) -> None:
    stream = CountedWrites()
    configure_logging(stream=stream, log_format="json", level="debug")
    logging.getLogger(logger).log(level, "something")
    assert len(json_lines(stream)) == (1 if shown else 0)


def test_configuring_again_replaces_the_previous_stream() -> None:
    first, second = CountedWrites(), CountedWrites()
    configure_logging(stream=first, log_format="json")
    configure_logging(stream=second, log_format="json")
    logging.getLogger("uvicorn.error").warning("once")
    assert first.calls == []
    assert len(json_lines(second)) == 1


def test_a_traceback_on_a_terminal_shows_no_local_variable() -> None:
    # A local may hold a secret's text (a file just read): a console traceback must not print
    # it, as rich's tracebacks do with their locals shown.
    stream = io.StringIO()
    configure_logging(stream=stream, log_format="console")

    def read_secret() -> None:
        text = "s3cr3t-value-never-printed"
        raise ValueError(f"unreadable ({len(text)} characters)")

    try:
        read_secret()
    except ValueError:
        structlog.get_logger("recordsync.test").exception("secret_file_unreadable")
    shown = stream.getvalue()
    assert "unreadable (26 characters)" in shown
    assert "s3cr3t-value-never-printed" not in shown
