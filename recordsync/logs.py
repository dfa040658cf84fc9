"""structlog configuration: JSON lines for machines, readable lines for people.

JSON when stdout is not a terminal (systemd, Kubernetes) or ``RECORDSYNC_LOG_FORMAT=json``;
console rendering on a terminal.  A last line of defence drops any field whose name says it
holds a credential, so a careless ``log.info(..., headers=...)`` cannot leak the secret.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

_SENSITIVE = ("secret", "signature", "password", "authorization", "x-signature")


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


def configure_logging(
    *, level: str = "info", log_format: str | None = None, stream: TextIO | None = None
) -> None:
    stream = stream or sys.stdout
    use_json = log_format == "json" or (log_format is None and not stream.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            process_context,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_credentials,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        # One write per line, its newline included (WriteLogger; print() writes the newline
        # apart): with an unbuffered stream (PYTHONUNBUFFERED, usual in containers) each is a
        # write of its own, and a line the standard library's logging writes to stderr from
        # another thread (APScheduler's job errors) could land between a JSON line and its
        # newline, breaking both for a log shipper.
        logger_factory=structlog.WriteLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    # APScheduler logs through the standard library; keep its chatter (job added, skipped
    # because the previous run is still going) out of the operators' stream.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
