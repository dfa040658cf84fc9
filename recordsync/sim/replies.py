"""How the platform reads a merchant's reply to a round-end notification: strictly (pure, no I/O).

Spec: Callbacks implemented by the merchant, "Responses are decoded strictly: content type
application/json, not compressed, request_id required, no fields beyond those listed, no
redirects"; Events, Round end, "The merchant replies 200 with data event_id and accepted_at";
Errors, the envelope.  So an acceptance is exactly::

    200  Content-Type: application/json  (no Content-Encoding)
    {"data": {"event_id": <the event's id>, "accepted_at": <RFC 3339>}, "request_id": <string>}

Anything else is not an acceptance and the event is sent again.  ``read_reply`` names every
way a reply departs from that (its *deviations*), so the simulator's statistics can show a
receiver's mistakes kind by kind; a refusal (4xx, 5xx) is no deviation when it is the spec's
error envelope, only when its body is not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Final

from recordsync.core.errors import InvalidRecordError
from recordsync.core.times import parse_time

# Deviation kinds, as counted in ``EventStats.deviations``.
STATUS: Final = "status"  # a 1xx/2xx other than 200 (the spec says 200)
REDIRECT: Final = "redirect"  # a 3xx: the platform follows no redirects
CONTENT_TYPE: Final = "content_type"  # not application/json
COMPRESSED: Final = "compressed"  # a Content-Encoding other than identity
NOT_JSON: Final = "not_json"  # not a UTF-8 JSON object (or a repeated member name)
MISSING_MEMBER: Final = "missing_member"  # data, data.event_id, data.accepted_at or request_id
EXTRA_MEMBER: Final = "extra_member"  # a member beyond those the spec lists
WRONG_EVENT_ID: Final = "wrong_event_id"  # data.event_id is not the event's id
BAD_ACCEPTED_AT: Final = "bad_accepted_at"  # data.accepted_at is not an RFC 3339 time
BAD_REQUEST_ID: Final = "bad_request_id"  # request_id is not a non-empty string
ERROR_ENVELOPE: Final = "error_envelope"  # a 4xx/5xx whose body is not the spec's envelope
DEVIATION_KINDS: Final = (
    STATUS,
    REDIRECT,
    CONTENT_TYPE,
    COMPRESSED,
    NOT_JSON,
    MISSING_MEMBER,
    EXTRA_MEMBER,
    WRONG_EVENT_ID,
    BAD_ACCEPTED_AT,
    BAD_REQUEST_ID,
    ERROR_ENVELOPE,
)

_OK: Final = 200
_FIRST_REDIRECT: Final = 300
_FIRST_ERROR: Final = 400
_ACCEPTANCE_MEMBERS: Final = frozenset({"data", "request_id"})
_DATA_MEMBERS: Final = frozenset({"event_id", "accepted_at"})
_ERROR_MEMBERS: Final = frozenset({"error", "request_id"})
_ERROR_FIELDS: Final = frozenset({"code", "message", "retryable", "details"})
_ERROR_REQUIRED: Final = frozenset({"code", "message", "retryable"})


@dataclass(frozen=True, slots=True)
class Reply:
    """What came back: the status, headers (names in lower case) and the raw, undecoded body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class Verdict:
    """``accepted``: a clean acceptance of this event; ``deviations``: each kind once."""

    accepted: bool
    deviations: tuple[str, ...] = ()
    accepted_at: str | None = None


class _DuplicateMemberError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise _DuplicateMemberError("a member name repeats")
    return dict(pairs)


def _json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, or None: UTF-8 without BOM, no repeated member names."""
    try:
        value = json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError):  # JSONDecodeError and repeats are ValueErrors
        return None
    return value if isinstance(value, dict) else None


def is_json_content_type(value: str | None) -> bool:
    """``application/json``, with at most a ``charset=utf-8`` parameter."""
    if value is None:
        return False
    media, *params = (part.strip().lower() for part in value.split(";"))
    return media == "application/json" and all(
        param.replace(" ", "") == "charset=utf-8" for param in params
    )


def read_reply(reply: Reply, event_id: str) -> Verdict:
    """Decide whether ``reply`` accepts the event ``event_id`` and how it departs from the spec."""
    status = reply.status
    if _FIRST_REDIRECT <= status < _FIRST_ERROR:
        return Verdict(accepted=False, deviations=(REDIRECT,))
    if status >= _FIRST_ERROR:
        document = _json_object(reply.body) if _plain_json(reply) else None
        envelope = document is not None and _is_error_envelope(document)
        return Verdict(accepted=False, deviations=() if envelope else (ERROR_ENVELOPE,))
    found = [] if status == _OK else [STATUS]
    if _compressed(reply):
        # The bytes are not JSON as they stand and the platform does not inflate them.
        return Verdict(accepted=False, deviations=(*found, COMPRESSED))
    if not is_json_content_type(reply.headers.get("content-type")):
        found.append(CONTENT_TYPE)
    document = _json_object(reply.body)
    if document is None:
        return Verdict(accepted=False, deviations=(*found, NOT_JSON))
    accepted_at = _check_acceptance(document, event_id, found)
    ok = not found
    return Verdict(accepted=ok, deviations=tuple(found), accepted_at=accepted_at if ok else None)


def _compressed(reply: Reply) -> bool:
    return reply.headers.get("content-encoding", "identity").strip().lower() not in {"", "identity"}


def _plain_json(reply: Reply) -> bool:
    return not _compressed(reply) and is_json_content_type(reply.headers.get("content-type"))


def _check_acceptance(document: dict[str, Any], event_id: str, found: list[str]) -> str | None:
    """Append the deviations of an acceptance body to ``found``; its accepted_at if readable."""
    if set(document) - _ACCEPTANCE_MEMBERS:
        found.append(EXTRA_MEMBER)
    request_id = document.get("request_id")
    data = document.get("data")
    missing = request_id is None or not isinstance(data, dict)
    if request_id is not None and (not isinstance(request_id, str) or not request_id):
        found.append(BAD_REQUEST_ID)
    accepted_at = None
    if isinstance(data, dict):
        if set(data) - _DATA_MEMBERS and EXTRA_MEMBER not in found:
            found.append(EXTRA_MEMBER)
        missing = missing or not set(data) >= _DATA_MEMBERS
        if "event_id" in data and data["event_id"] != event_id:
            found.append(WRONG_EVENT_ID)
        if "accepted_at" in data:
            accepted_at = data["accepted_at"]
            try:
                parse_time(accepted_at, field="accepted_at")
            except InvalidRecordError:
                found.append(BAD_ACCEPTED_AT)
                accepted_at = None
    if missing:
        found.append(MISSING_MEMBER)
    return accepted_at


def _is_error_envelope(document: dict[str, Any]) -> bool:
    """``{"error": {code, message, retryable[, details]}, "request_id"}`` and nothing else."""
    error = document.get("error")
    request_id = document.get("request_id")
    return (
        set(document) == _ERROR_MEMBERS
        and isinstance(error, dict)
        and _ERROR_REQUIRED <= set(error) <= _ERROR_FIELDS
        and isinstance(error["code"], str)
        and isinstance(error["message"], str)
        and isinstance(error["retryable"], bool)
        and isinstance(error.get("details", {}), dict)
        and isinstance(request_id, str)
        and bool(request_id)
    )


def retry_after_seconds(value: str | None, *, now: float) -> float | None:
    """Retry-After as seconds from ``now`` (Unix seconds): delay-seconds or an HTTP-date."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)
