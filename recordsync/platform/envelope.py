"""What a platform answer means (spec: Errors, "Envelope"; Outcome rules 3).  Pure: no I/O.

Success is HTTP 2xx with ``{"data": ..., "request_id": ...}``; failure is
``{"error": {"code", "message", "retryable", "details"}, "request_id": ...}``; exactly one of
``data`` and ``error``.  ``decode`` returns the data or raises the error of
``recordsync.core.errors`` that tells the caller what to do next.  It branches on the status and
``error.code``, never on ``error.message`` (spec: "Branch on error.code, never on message").

How strict, and why:

- 2xx and 4xx answers must be valid envelopes (content type ``application/json``, optionally
  ``; charset=utf-8``; a JSON object with a ``request_id`` string and exactly one member);
  anything else is ``ProtocolError`` (retryable: usually a truncated or garbled answer, and a
  page that did not parse never advances a cursor).  A member whose value is ``null`` counts
  as absent.  ``error.code`` is required; ``message``, ``retryable`` and ``details`` may be
  absent but must have their types when present.
- 3xx, 429 and 5xx are classified by status alone: a redirect is never followed whatever its
  body says, a 429 must pause the shared budget even when a proxy wrote its body, and every
  5xx is retried anyway.  A valid envelope still contributes its code, message and request_id.
- Unknown fields are ignored (spec: Versioning 3).
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Final, NoReturn

import orjson

from recordsync.core.errors import (
    AuthenticationError,
    ClockSkewError,
    CursorExpiredError,
    PlatformError,
    ProjectionLagError,
    ProtocolError,
    RateLimitedError,
    RequestRejectedError,
    ServerError,
    UnexpectedRedirectError,
)

DEFAULT_RETRY_AFTER: Final = 1.0
# A Retry-After beyond this is treated as this: a buggy or hostile value must not freeze the
# whole merchant's sync for days.  An hour is far above anything a rate limit needs.
MAX_RETRY_AFTER: Final = 3600.0

_MESSAGE_LIMIT: Final = 300

CLOCK_SKEW_MESSAGE: Final = (
    "the platform rejected the request as expired (REQUEST_EXPIRED): the local clock is "
    "probably off by more than 300 s from the platform's; check that NTP is running and synced"
)


@dataclass(frozen=True, slots=True)
class OutOfRangeNumber:
    """A JSON number no 64-bit float holds (``1e400``), kept as the text sent.

    Legal JSON (RFC 8259 sets no range) that orjson refuses; the answer is read again by
    ``_wide_document`` and such a number becomes this value, which no field of the spec accepts: the
    item holding it is quarantined with its field named, an unknown member holding it is
    ignored (Versioning 3), instead of the whole page failing on every retry.
    """

    text: str

    def __str__(self) -> str:
        return self.text


def _wide_float(text: str) -> float | OutOfRangeNumber:
    """A float as orjson reads it when one holds the number (``1e-400`` is 0.0 there too)."""
    value = float(text)
    return value if math.isfinite(value) else OutOfRangeNumber(text)


def _wide_int(text: str) -> int | float | OutOfRangeNumber:
    """An integer as orjson reads it: an int within 64 bits, a float beyond (so a field
    sees the same value whichever decoder read its page), ``OutOfRangeNumber`` past a float."""
    if len(text) <= _INT_DIGITS:
        value = int(text)
        if _INT_MIN <= value <= _INT_MAX:
            return value
    return _wide_float(text)


_INT_DIGITS: Final = 20  # "-9223372036854775808" and "18446744073709551615" have 20 and 20
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1


def _not_json(token: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` are Python's, not JSON (RFC 8259, section 6)."""
    raise ValueError(f"{token} is not a JSON value")


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful answer: the envelope's ``data`` and its ``request_id``."""

    data: Any
    request_id: str
    body: bytes | None = None  # the bytes ``data`` was read from, where a page needs them


@dataclass(frozen=True, slots=True)
class _Failure:
    code: str | None
    message: str | None
    request_id: str | None
    problem: str | None  # why the body is not a valid error envelope, when it is not


def decode(
    endpoint: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: Callable[[], float] = time.time,
) -> Any:
    """The ``data`` of a successful answer, or raise the matching ``PlatformError``."""
    return decode_reply(endpoint, status, headers, body, now=now).data


def decode_reply(
    endpoint: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: Callable[[], float] = time.time,
) -> Reply:
    """Like ``decode`` but keeps the ``request_id`` (pages carry it for the quarantine)."""
    if 300 <= status < 400:  # noqa: PLR2004 - HTTP status classes
        failure = _read_failure(endpoint, headers, body)
        raise UnexpectedRedirectError(
            f"unexpected redirect (HTTP {status}); redirects are never followed because the "
            "signature covers the exact target: check base_url (scheme, host, path prefix)",
            endpoint=endpoint,
            status=status,
            code=failure.code,
            request_id=failure.request_id,
        )
    if 200 <= status < 300:  # noqa: PLR2004
        return _success(endpoint, status, headers, body)
    raise _error(endpoint, status, headers, body, now)


def is_json_success(status: int, headers: Mapping[str, str]) -> bool:
    """True for a 200 answer with the JSON content type: one a page may be read from directly
    (``parsing.usual_records_page``); any other goes through ``decode_reply``."""
    return status == 200 and _is_json(_header(headers, "content-type"))  # noqa: PLR2004


def _success(endpoint: str, status: int, headers: Mapping[str, str], body: bytes) -> Reply:
    document, request_id = _envelope(endpoint, headers, body)
    has_data = document.get("data") is not None
    has_error = document.get("error") is not None
    if has_error:
        _protocol(endpoint, request_id, f"HTTP {status} answer carries an error member")
    if not has_data:
        _protocol(endpoint, request_id, "answer has neither data nor error")
    return Reply(data=document["data"], request_id=request_id, body=body)


def _error(
    endpoint: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    now: Callable[[], float],
) -> PlatformError:
    failure = _read_failure(endpoint, headers, body)
    code, request_id = failure.code, failure.request_id
    detail = failure.message or failure.problem or "no diagnostic message"
    if status == 429:  # noqa: PLR2004
        return RateLimitedError(
            f"rate limited (HTTP 429): {detail}",
            endpoint=endpoint,
            retry_after=parse_retry_after(headers, now=now),
            code=code,
            request_id=request_id,
        )
    if status >= 500:  # noqa: PLR2004
        cls = ProjectionLagError if status == 503 else ServerError  # noqa: PLR2004
        what = "projection lags" if status == 503 else "server error"  # noqa: PLR2004
        return cls(
            f"{what} (HTTP {status}): {detail}",
            endpoint=endpoint,
            status=status,
            code=code,
            retryable=True,
            request_id=request_id,
        )
    if failure.problem is not None:
        return ProtocolError(
            f"HTTP {status} answer is not a valid error envelope: {failure.problem}",
            endpoint=endpoint,
            status=status,
            request_id=request_id,
        )
    cls_4xx: type[PlatformError]
    message = f"{failure.message or 'no diagnostic message'} (HTTP {status})"
    if status == 401 and code == "REQUEST_EXPIRED":  # noqa: PLR2004
        cls_4xx, message = ClockSkewError, CLOCK_SKEW_MESSAGE
    elif status == 401:  # noqa: PLR2004
        cls_4xx = AuthenticationError
        message = f"authentication failed, check the merchant id and secret: {message}"
    elif status == 410 and code == "CURSOR_EXPIRED":  # noqa: PLR2004
        cls_4xx = CursorExpiredError
        message = f"cursor or change start expired: {message}"
    else:
        cls_4xx = RequestRejectedError
        message = f"request rejected: {message}"
    return cls_4xx(message, endpoint=endpoint, status=status, code=code, request_id=request_id)


def _read_failure(endpoint: str, headers: Mapping[str, str], body: bytes) -> _Failure:
    """The error envelope's facts, or why there is no valid one (never raises)."""
    try:
        document, request_id = _envelope(endpoint, headers, body)
    except ProtocolError as exc:
        return _Failure(None, None, exc.request_id, str(exc.args[0]))
    error = document.get("error")
    if document.get("data") is not None:
        return _Failure(None, None, request_id, "error answer carries a data member")
    if not isinstance(error, dict):
        return _Failure(None, None, request_id, "error member is missing or not an object")
    code = error.get("code")
    if not isinstance(code, str) or not code:
        return _Failure(None, None, request_id, "error.code is missing or not a string")
    message = error.get("message")
    for name, expected in (("message", str), ("retryable", bool), ("details", dict)):
        value = error.get(name)
        if value is not None and not isinstance(value, expected):
            return _Failure(code, None, request_id, f"error.{name} has the wrong type")
    return _Failure(code, _clip(message) if isinstance(message, str) else None, request_id, None)


def _envelope(endpoint: str, headers: Mapping[str, str], body: bytes) -> tuple[dict[str, Any], str]:
    """The parsed top-level object and its request_id, or ``ProtocolError``."""
    content_type = _header(headers, "content-type")
    if not _is_json(content_type):
        shown = "none" if content_type is None else repr(_clip(content_type, 80))
        _protocol(endpoint, None, f"content type is {shown}, expected application/json")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        document = _wide_document(endpoint, body)
    if not isinstance(document, dict):
        _protocol(endpoint, None, "body is not a JSON object")
    request_id = document.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        _protocol(endpoint, None, "request_id is missing or not a string")
    return document, request_id


def _wide_document(endpoint: str, body: bytes) -> Any:
    """The answer orjson refused, read again by Python's own decoder, or ``ProtocolError``.

    orjson reads numbers as 64-bit values and refuses ``1e400`` or an integer of 310 digits,
    legal JSON (RFC 8259 sets no range): the whole page would fail on every retry.  Python's
    decoder reads them (``OutOfRangeNumber``) and otherwise refuses what orjson refuses
    (NaN and Infinity through ``_not_json``, text that is not UTF-8, nesting beyond the
    interpreter's recursion limit) but for one thing: an escaped unpaired surrogate
    (``"\\ud800"``), which no warehouse stores, so that is looked for and refused here.
    """
    try:
        document = json.loads(
            body.decode("utf-8"),
            parse_int=_wide_int,
            parse_float=_wide_float,
            parse_constant=_not_json,
        )
    except (UnicodeDecodeError, ValueError) as exc:
        detail = str(exc)
    except RecursionError:
        detail = "nested too deeply to be read"  # orjson stops at 1024 levels
    else:
        if not _has_unpaired_surrogate(document):
            return document
        detail = "a string holds an unpaired surrogate"
    raise ProtocolError(
        f"invalid envelope: body is not valid JSON ({len(body)} bytes): {_clip(detail, 160)}",
        endpoint=endpoint,
    )


def _has_unpaired_surrogate(document: Any) -> bool:
    """True when a key or string of ``document`` is not encodable as UTF-8 (no recursion:
    the document may nest as deeply as the decoder went)."""
    texts: list[str] = []
    pending = [document]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            texts.extend(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    try:
        "".join(texts).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _protocol(endpoint: str, request_id: str | None, problem: str) -> NoReturn:
    raise ProtocolError(f"invalid envelope: {problem}", endpoint=endpoint, request_id=request_id)


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    media_type, *params = (part.strip() for part in content_type.split(";"))
    if media_type.lower() != "application/json":
        return False
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() != "charset" or value.strip().strip('"').lower() != "utf-8":
            return False
    return True


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup that works for ``httpx.Headers`` and plain dicts alike."""
    value = headers.get(name)
    if value is not None:
        return value
    for key, candidate in headers.items():
        if key.lower() == name:
            return candidate
    return None


def parse_retry_after(headers: Mapping[str, str], *, now: Callable[[], float] = time.time) -> float:
    """Retry-After in seconds: delta-seconds or an HTTP-date (RFC 9110, 10.2.3).

    An HTTP-date is measured against the answer's own ``Date`` header when it has one, so the
    local clock's error does not matter; otherwise against ``now``.  Absent or unparseable
    gives ``DEFAULT_RETRY_AFTER``; the result is clamped to ``[0, MAX_RETRY_AFTER]``.
    """
    raw = _header(headers, "retry-after")
    if raw is None:
        return DEFAULT_RETRY_AFTER
    raw = raw.strip()
    if raw.isascii() and raw.isdigit():
        return min(float(raw), MAX_RETRY_AFTER)
    until = _http_date(raw)
    if until is None:
        return DEFAULT_RETRY_AFTER
    reference = _http_date(_header(headers, "date") or "")
    seconds = until - (reference if reference is not None else now())
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _http_date(value: str) -> float | None:
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:  # "-0000": RFC 9110 dates are GMT anyway
        parsed = parsed.replace(tzinfo=UTC)
    seconds = parsed.timestamp()
    return seconds if math.isfinite(seconds) else None


def _clip(text: str, limit: int = _MESSAGE_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
