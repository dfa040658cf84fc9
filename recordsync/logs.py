"""structlog configuration: JSON lines for machines, readable lines for people.

JSON when stdout is not a terminal (systemd, Kubernetes) or ``RECORDSYNC_LOG_FORMAT=json``;
console rendering on a terminal.  A last line of defence drops any field whose name says it
holds a credential, so a careless ``log.info(..., headers=...)`` cannot leak the secret.
"""

from __future__ import annotations

import logging
import sys
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
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_credentials,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
