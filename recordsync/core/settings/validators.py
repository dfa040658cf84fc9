"""How a setting's text is read, and what its error line says it should have been.

A ``Kind`` pairs a parser with the words of the error line (``RECORDSYNC_X: 'text' is not
<hint>``); the settings share one kind per rule (a wait, a port, a count), so that a rule and
its words are written once however many settings follow it.  A parser raises ``ValueError``
(or ``InvalidRecordError``, the times' own) for a text it refuses; the reader turns that into
the setting's line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Generic, TypeVar

from recordsync.core.times import parse_time

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Kind(Generic[T]):
    """How a setting's text is read, and what the error line says it should have been."""

    parse: Callable[[str], T]
    hint: str


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


def _lease(value: str) -> int:
    """Whole seconds (the servers' session timeouts are), at least 2: the pooled sessions'
    bounds are half the lease (``warehouse.timeouts.writes``), and none may be 0 (no bound)."""
    number = int(value)
    if number < 2:  # noqa: PLR2004 - the least lease whose half is a whole second
        raise ValueError(value)
    return number


def _port(value: str) -> int:
    number = int(value)
    if not 0 <= number <= 65535:  # noqa: PLR2004 - the TCP port range
        raise ValueError(value)
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0:  # NaN too
        raise ValueError(value)
    return number


def _positive_finite_float(value: str) -> float:
    """A wait: positive and finite (an infinite one would never read again)."""
    number = _positive_float(value)
    if math.isinf(number):
        raise ValueError(value)
    return number


def _non_negative_float(value: str) -> float:
    number = float(value)
    if not number >= 0:  # NaN too
        raise ValueError(value)
    return number


def _boolean(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError(value)


def _time(value: str) -> datetime:
    return parse_time(value, field="history_from")


def _http_url(value: str) -> str:
    """The platform's base URL, without the trailing slash the paths are joined with."""
    if not value.startswith(("http://", "https://")):
        raise ValueError(value)
    return value.rstrip("/")


def _header_value(value: str) -> str:
    """A value sent in a header: printable ASCII, so no request is refused for it."""
    if not (value.isascii() and value.isprintable()):
        raise ValueError(value)
    return value


def choice(*allowed: str) -> Kind[str]:
    """One of ``allowed``, in any case: the lower-case word."""

    def parse(value: str) -> str:
        lowered = value.strip().lower()
        if lowered not in allowed:
            raise ValueError(value)
        return lowered

    *first, last = allowed
    hint = f"{first[0]} or {last}" if len(first) == 1 else f"one of {', '.join(allowed)}"
    return Kind(parse, hint)


SECONDS: Final = Kind(_positive_float, "a positive number of seconds")
WAIT: Final = Kind(_positive_finite_float, "a positive number of seconds")  # finite, too
SECONDS_OR_OFF: Final = Kind(_non_negative_float, "seconds (0 turns it off)")
SECONDS_OR_NONE: Final = Kind(_non_negative_float, "seconds (>= 0)")
DAYS_OR_EVER: Final = Kind(_non_negative_float, "days (0 keeps every revision)")
POSITIVE: Final = Kind(_positive_float, "a positive number")
COUNT: Final = Kind(_positive_int, "a positive integer")
CONNECTIONS: Final = Kind(_non_negative_int, "a whole number of connections (0: sized for you)")
LEASE: Final = Kind(_lease, "a whole number of seconds, at least 2")
PORT: Final = Kind(_port, "a port 0-65535")
PORT_OR_OFF: Final = Kind(_port, "a port 0-65535 (0: off)")
BOOLEAN: Final = Kind(_boolean, "true or false")
TEXT: Final = Kind(str, "text")
LOG_LEVEL: Final = choice("debug", "info", "warning", "error")
LOG_FORMAT: Final = choice("json", "console")
# A merchant's own keys (read apart: required, or defaulted from the top level).
MERCHANT_ID: Final = Kind(_header_value, "printable ASCII (a header value)")
BASE_URL: Final = Kind(_http_url, "an http(s) URL")
TIME: Final = Kind(_time, "an RFC3339 time")
