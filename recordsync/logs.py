"""structlog configuration: JSON lines for machines, readable lines for people.

JSON when stdout is not a terminal (systemd, Kubernetes) or ``RECORDSYNC_LOG_FORMAT=json``;
console rendering on a terminal.  A last line of defence drops any field whose name says it
holds a credential, so a careless ``log.info(..., headers=...)`` cannot leak the secret.

One stream: a log shipper reading JSON lines breaks on the first line that is not one, so
everything else the process writes goes through the same processors and the same writer as
structlog's own events: the standard library's records (uvicorn's, APScheduler's job
tracebacks, alembic's, httpx's), Python warnings, and an exception that nothing caught, in
the main thread or any other.  A traceback becomes the ``exception`` field of its line.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections.abc import Callable, MutableMapping
from types import TracebackType
from typing import Any, Final, TextIO

import structlog

_SENSITIVE = ("secret", "signature", "password", "authorization", "x-signature")
# The libraries' info and debug records are chatter (httpx logs every request, uvicorn its
# banner, alembic its dialect): only their warnings and errors reach the operators' stream.
LIBRARY_LEVEL: Final = logging.WARNING

log = structlog.get_logger("recordsync.logs")


def redact_credentials(
    _logger: object, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key in list(event_dict):
        if any(word in key.lower() for word in _SENSITIVE):
            event_dict[key] = "[redacted]"
    return event_dict


class ProcessContext:
    """Fields every event of this process carries (merchant_id, phase).

    Process-wide on purpose: the sync runs in scheduler and worker threads, which do not
    inherit ``contextvars``, and an operator filtering logs by merchant must never miss an
    event because it came from another thread.
    """

    def __init__(self) -> None:
        self._fields: dict[str, Any] = {}
        self._lock = threading.Lock()

    def update(self, **fields: Any) -> None:
        with self._lock:
            self._fields = {**self._fields, **fields}

    def clear(self) -> None:
        with self._lock:
            self._fields = {}

    def __call__(
        self, _logger: object, _method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in self._fields.items():
            event_dict.setdefault(key, value)
        return event_dict


process_context = ProcessContext()


def json_lines(log_format: str | None, stream: TextIO | None = None) -> bool:
    """Whether the log on ``stream`` (stdout) is JSON lines: asked for, or by default when it
    is not a terminal.  A command whose log shares stdout ends with a plain line only when it
    is not, so that a log shipper reads nothing but JSON."""
    return log_format == "json" or (log_format is None and not (stream or sys.stdout).isatty())


def configure_logging(
    *, level: str = "info", log_format: str | None = None, stream: TextIO | None = None
) -> None:
    """Render structlog's events, the standard library's records, warnings and uncaught
    exceptions as lines on ``stream`` (stdout by default); safe to call again (the previous
    configuration is replaced, never stacked)."""
    stream = stream or sys.stdout
    use_json = json_lines(log_format, stream)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        # A traceback on a terminal shows no local variables: one may hold a secret's text
        # (invariant 8), which structlog's default rich traceback would print.
        else structlog.dev.ConsoleRenderer(
            colors=stream.isatty(),
            exception_formatter=structlog.dev.RichTracebackFormatter(show_locals=False),
        )
    )
    common: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        process_context,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *common,
            redact_credentials,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        # One write per line, its newline included (WriteLogger; print() writes the newline
        # apart): with an unbuffered stream (PYTHONUNBUFFERED, usual in containers) each is a
        # write of its own, and a line written from another thread could land between a JSON
        # line and its newline, breaking both for a log shipper.  WriteLoggers of one file
        # share one lock, which the standard library's handler below takes too.
        logger_factory=structlog.WriteLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            *common,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),  # a record's ``extra=`` as fields, redacted below
            redact_credentials,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    _installed.replace(_Hooks(_WriteHandler(stream, formatter), level))


def reset_logging() -> None:
    """Undo ``configure_logging``'s hooks into the standard library, warnings and uncaught
    exceptions (tests; structlog's own defaults come back with ``structlog.reset_defaults``)."""
    _installed.replace(None)


class _WriteHandler(logging.Handler):
    """A standard library handler that writes each rendered record as structlog does: one
    write, its newline included, under the lock structlog's own writes to ``stream`` take."""

    def __init__(self, stream: TextIO, formatter: logging.Formatter) -> None:
        super().__init__()
        self.setFormatter(formatter)
        self._out = structlog.WriteLogger(stream)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._out.msg(self.format(record))
        except Exception:  # noqa: BLE001 - logging's own contract: never raise from emit
            self.handleError(record)


class _Hooks:
    """What ``configure_logging`` puts in place of the standard library's defaults; ``remove``
    puts back what ``add`` replaced."""

    def __init__(self, handler: _WriteHandler, level: str) -> None:
        self._handler = handler
        # Libraries at warning and above; at "error", their warnings go too.
        self._root_level = max(LIBRARY_LEVEL, logging.getLevelNamesMapping()[level.upper()])
        self._replaced: tuple[int, Callable[..., None], Callable[..., Any], Callable[..., Any]]

    def add(self) -> None:
        root = logging.getLogger()
        self._replaced = (root.level, warnings.showwarning, sys.excepthook, threading.excepthook)
        root.addHandler(self._handler)
        root.setLevel(self._root_level)
        warnings.showwarning = _log_warning
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_thread_uncaught

    def remove(self) -> None:
        """Put back what ``add`` replaced, where it is still ours (a hook installed after it,
        by a test runner say, stays)."""
        root = logging.getLogger()
        root.removeHandler(self._handler)
        level, showwarning, excepthook, thread_excepthook = self._replaced
        root.setLevel(level)
        if warnings.showwarning is _log_warning:
            warnings.showwarning = showwarning
        if sys.excepthook is _log_uncaught:
            sys.excepthook = excepthook
        if threading.excepthook is _log_thread_uncaught:
            threading.excepthook = thread_excepthook


class _Installed:
    """The hooks in place: one set at a time, replaced whole."""

    def __init__(self) -> None:
        self._hooks: _Hooks | None = None
        self._lock = threading.Lock()

    def replace(self, hooks: _Hooks | None) -> None:
        with self._lock:
            if self._hooks is not None:
                self._hooks.remove()
            self._hooks = hooks
            if hooks is not None:
                hooks.add()


_installed = _Installed()


def _log_warning(  # noqa: PLR0917 - warnings.showwarning's signature
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,  # noqa: ARG001 - warnings.showwarning's signature
    line: str | None = None,  # noqa: ARG001 - the source line: the location says enough
) -> None:
    """``warnings.showwarning``: a warning is an event of its own, not two lines of text."""
    log.warning(
        "python_warning",
        category=category.__name__,
        message=str(message),
        where=f"{filename}:{lineno}",
    )


def _log_uncaught(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    """``sys.excepthook``: the exception that ends the process, as one line."""
    log.critical("uncaught_exception", thread="MainThread", exc_info=(exc_type, exc, tb))


def _log_thread_uncaught(args: threading.ExceptHookArgs) -> None:
    """``threading.excepthook``: a thread that dies of an exception, as one line (the
    process goes on, as it did with Python's default hook)."""
    if args.exc_type is SystemExit:
        return  # a thread's sys.exit() is a normal end, as for the default hook
    exc = args.exc_value if args.exc_value is not None else args.exc_type()
    name = args.thread.name if args.thread is not None else None
    log.error("uncaught_exception", thread=name, exc_info=(args.exc_type, exc, args.exc_traceback))
