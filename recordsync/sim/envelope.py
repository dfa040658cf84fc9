"""The response envelope and the simulator's API errors (spec: Errors).

Success is ``{"data": ..., "request_id": ...}``, failure ``{"error": {code, message, retryable,
details}, "request_id": ...}``: exactly one of data and error.  Every response carries a unique
request_id.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from dataclasses import dataclass, field

import orjson

JSON = "application/json"


@dataclass
class ApiError(Exception):
    """An error answer; raised anywhere in request handling, printed once by the service."""

    status: int
    code: str
    message: str
    retryable: bool = False
    details: dict[str, object] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


class RequestIds:
    """Unique request ids: a random prefix per simulator and a counter."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(4)
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            number = next(self._counter)
        return f"sim-{self._prefix}-{number:010d}"


def success_body(data: bytes, request_id: str, extra: bytes = b"") -> bytes:
    """``data`` is already JSON; ``extra`` is more members (``,"name":value``) or nothing."""
    return b'{"data":' + data + extra + b',"request_id":"' + request_id.encode() + b'"}'


def error_body(error: ApiError, request_id: str) -> bytes:
    return orjson.dumps(
        {
            "error": {
                "code": error.code,
                "message": error.message,
                "retryable": error.retryable,
                "details": error.details,
            },
            "request_id": request_id,
        }
    )
