"""What a round-end notification request means: pure decisions, no sockets, no database.

The checks run exactly in the spec's order (Authentication, "Callback verification"):

1. the secrets are found by ``X-Merchant-Id`` among the configured merchants, else
   401 AUTHENTICATION_FAILED;
2. ``X-Timestamp`` is within 300 s of our clock either way, else 401 REQUEST_EXPIRED;
3. the HMAC-SHA256 over the signing string (timestamp, ``POST``, the raw path and query as
   received, the Idempotency-Key, an empty If-Match line, then the raw body bytes) equals
   ``X-Signature`` for the current secret or, during the overlap after a rotation, the
   previous one (Key rotation), compared in constant time, else 401 AUTHENTICATION_FAILED.

Steps 1 and 2 and the form of ``X-Signature`` need only the head (``check_head``): the port
refuses on them before it reads a byte of the body, and runs step 3 once the body is in
(``check_signature``).  Only then is the body parsed (Events, "Round end"): a UTF-8 JSON
object with ``event_id``, ``external_player_id``, ``currency``, ``round_id``, ``type`` and
``occurred_at`` (RFC 3339), ``parent_round_id`` optional, other members ignored; ``event_id``
equal to the Idempotency-Key.
Anything else is 400 VALIDATION_FAILED.  Messages name the rule broken, never a secret, a
signature, or more than a short prefix of what was sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from recordsync.core.errors import InvalidRecordError
from recordsync.core.round_events import RoundEvent
from recordsync.core.secret import Secret
from recordsync.core.times import parse_time
from recordsync.platform.signing import sign, signatures_match

PATH: Final = "/v1/round-events"
MAX_BODY_BYTES: Final = 1024 * 1024  # spec: Limits, "Body size"
CLOCK_SKEW_SECONDS: Final = 300  # spec: Limits, "Clock skew"

AUTHENTICATION_FAILED: Final = "AUTHENTICATION_FAILED"
REQUEST_EXPIRED: Final = "REQUEST_EXPIRED"
VALIDATION_FAILED: Final = "VALIDATION_FAILED"
# The spec names no code for 413 ("Code accompanying 413: not shown"): ours says what it is.
PAYLOAD_TOO_LARGE: Final = "PAYLOAD_TOO_LARGE"
# Nor one for 408: the body did not arrive in time (a slow client, or one holding the port).
REQUEST_TIMEOUT: Final = "REQUEST_TIMEOUT"
# Nor one for a receiver that holds as many unverified bodies as it may: 503, retry later.
SERVER_BUSY: Final = "SERVER_BUSY"
RESOURCE_NOT_FOUND: Final = "RESOURCE_NOT_FOUND"
METHOD_NOT_ALLOWED: Final = "METHOD_NOT_ALLOWED"
DEPENDENCY_UNAVAILABLE: Final = "DEPENDENCY_UNAVAILABLE"

_TIMESTAMP = re.compile(r"[0-9]{10}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
_IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_REQUIRED: Final = ("event_id", "external_player_id", "currency", "round_id", "type")
# The columns' widths (warehouse schema): a longer value is refused, not cut.
_MAX_LENGTH: Final = {
    "external_player_id": 255,
    "round_id": 255,
    "parent_round_id": 255,
    "currency": 64,
    "type": 64,
}


@dataclass(frozen=True, slots=True)
class Refusal(Exception):  # noqa: N818 - a refusal is an answer, not an error of ours
    """An error reply: status, the spec's error code, a diagnostic message."""

    status: int
    code: str
    message: str
    retryable: bool = False
    retry_after: int | None = None  # seconds, sent as Retry-After


@dataclass(frozen=True, slots=True)
class Request:
    """One request as received: the raw target (path and query bytes, undecoded), headers
    with lower-case names (a name sent twice keeps every value), the raw body."""

    method: str
    target: bytes
    headers: Mapping[str, Sequence[str]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The header's one value; None when absent or sent more than once."""
        values = self.headers.get(name, ())
        return values[0] if len(values) == 1 else None


def check_route(request: Request) -> None:
    path = request.target.partition(b"?")[0]
    if path != PATH.encode():
        raise Refusal(404, RESOURCE_NOT_FOUND, "no such resource; events go to POST " + PATH)
    if request.method != "POST":
        raise Refusal(405, METHOD_NOT_ALLOWED, f"{PATH} takes POST only")


@dataclass(frozen=True, slots=True)
class Claim:
    """What a request's head claims, steps 1 and 2 passed and the signature well formed: only
    step 3, over the body, remains."""

    merchant_id: str
    secrets: Sequence[Secret]
    timestamp: str
    signature: str
    target: str


def check_head(
    request: Request,
    *,
    secrets: Callable[[str], Sequence[Secret] | None],
    now: float,
) -> Claim:
    """Steps 1 and 2, and the form of ``X-Signature``: everything the head alone decides, so
    that a stranger is refused before a byte of the body is read (the body is not looked
    at); raises ``Refusal`` (401)."""
    merchant_id = request.header("x-merchant-id")
    accepted = None if merchant_id is None else secrets(merchant_id)
    if merchant_id is None or not accepted:
        raise Refusal(401, AUTHENTICATION_FAILED, "unknown merchant (X-Merchant-Id)")
    timestamp = request.header("x-timestamp")
    if (
        timestamp is None
        or _TIMESTAMP.fullmatch(timestamp) is None
        or abs(now - int(timestamp)) > CLOCK_SKEW_SECONDS
    ):
        raise Refusal(
            401,
            REQUEST_EXPIRED,
            f"X-Timestamp must be Unix seconds within {CLOCK_SKEW_SECONDS} s of our clock",
        )
    received = request.header("x-signature")
    try:
        target = request.target.decode("utf-8")
    except UnicodeDecodeError:
        target = None
    if received is None or _SIGNATURE.fullmatch(received) is None or target is None:
        raise Refusal(401, AUTHENTICATION_FAILED, "signature mismatch")
    return Claim(merchant_id, tuple(accepted), timestamp, received, target)


def check_signature(request: Request, claim: Claim) -> str:
    """Step 3: the merchant whose secret signed ``request``'s head and body; raises
    ``Refusal`` (401) otherwise."""
    matches = [
        signatures_match(
            sign(
                secret.reveal(),
                timestamp=claim.timestamp,
                method=request.method,
                target=claim.target,
                idempotency_key=request.header("idempotency-key"),
                if_match=None,  # this endpoint takes no If-Match: its line is empty
                body=request.body,
            ),
            claim.signature,
        )
        for secret in claim.secrets  # every secret is tried: no early exit tells which matched
    ]
    if not any(matches):
        raise Refusal(401, AUTHENTICATION_FAILED, "signature mismatch")
    return claim.merchant_id


def verify(
    request: Request,
    *,
    secrets: Callable[[str], Sequence[Secret] | None],
    now: float,
) -> str:
    """The merchant whose secret signed ``request``; raises ``Refusal`` (401) otherwise."""
    return check_signature(request, check_head(request, secrets=secrets, now=now))


@dataclass(frozen=True, slots=True)
class _Number:
    """A JSON number, kept as its text: no member of the event is a number, so none is
    converted (``1e400`` is no float overflow, a 5000-digit integer no ``int`` limit)."""

    text: str


def _not_json(token: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` are Python's, not JSON (RFC 8259, section 6)."""
    raise ValueError(f"{token} is not a JSON value")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a member appears twice")
    return dict(pairs)


def _invalid(message: str) -> Refusal:
    return Refusal(400, VALIDATION_FAILED, message)


def parse_event(request: Request, merchant_id: str) -> RoundEvent:
    """The notification in a verified request's body; raises ``Refusal`` (400) otherwise."""
    body = _json_object(request)
    values = _strings(body)
    event_id = values["event_id"]
    if _IDEMPOTENCY_KEY.fullmatch(event_id) is None:
        raise _invalid("event_id: 1-128 characters of A-Z a-z 0-9 . _ : -")
    if request.header("idempotency-key") != event_id:
        raise _invalid("Idempotency-Key must equal event_id")
    try:
        occurred_at = parse_time(body.get("occurred_at"), field="occurred_at")
    except InvalidRecordError as exc:
        raise _invalid(f"occurred_at: required, an RFC 3339 time ({exc.reason})") from None
    return RoundEvent(
        event_id=event_id,
        merchant_id=merchant_id,
        round_id=values["round_id"],
        parent_round_id=values.get("parent_round_id"),
        external_player_id=values["external_player_id"],
        currency=values["currency"],
        type=values["type"],
        occurred_at=occurred_at,
    )


def _json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object: declared JSON, not compressed, UTF-8 without a BOM, no
    member twice (spec: Authentication, "Request format")."""
    content_type = (request.header("content-type") or "").partition(";")[0].strip().lower()
    if content_type != "application/json":
        raise _invalid("Content-Type must be application/json")
    if (request.header("content-encoding") or "identity").strip().lower() != "identity":
        raise _invalid("compressed bodies are not accepted")
    try:
        text = request.body.decode("utf-8")
        if text.startswith("\ufeff"):
            raise _invalid("the body must be UTF-8 without a byte order mark")
        body = json.loads(
            text,
            object_pairs_hook=_no_duplicate_keys,
            parse_int=_Number,
            parse_float=_Number,
            parse_constant=_not_json,
        )
    except (UnicodeDecodeError, ValueError):
        raise _invalid("the body must be a UTF-8 JSON object") from None
    except RecursionError:
        # Nesting deeper than the interpreter's recursion limit (a 1 MiB body may hold half
        # a million brackets): the decoder stops cleanly, and the sender is told why.
        raise _invalid("the body nests too deeply to be a round-end notification") from None
    if not isinstance(body, dict):
        raise _invalid("the body must be a JSON object")
    return body


def _strings(body: dict[str, Any]) -> dict[str, str]:
    """The required string members, and parent_round_id when present; other members are
    ignored (the platform may add some: spec, Versioning)."""
    values: dict[str, str] = {}
    for name in _REQUIRED:
        value = body.get(name)
        if not isinstance(value, str) or not value:
            raise _invalid(f"{name}: required, a non-empty string")
        values[name] = value
    parent = body.get("parent_round_id")
    if parent is not None:
        if not isinstance(parent, str) or not parent:
            raise _invalid("parent_round_id: a non-empty string when present")
        values["parent_round_id"] = parent
    for name, limit in _MAX_LENGTH.items():
        if len(values.get(name, "")) > limit:
            raise _invalid(f"{name}: longer than {limit} characters")
    for name, value in values.items():
        # JSON escapes can spell what no warehouse stores: a NUL (PostgreSQL refuses it in
        # text) or half of a surrogate pair (not encodable as UTF-8).  Refused here, they are
        # a 400 for the sender instead of a failed insert (a 500) on every retry.
        if "\x00" in value:
            raise _invalid(f"{name}: contains a NUL character")
        if not value.isascii() and _LONE_SURROGATE.search(value) is not None:
            raise _invalid(f"{name}: contains an unpaired surrogate (\\ud800-\\udfff)")
    return values


# -- replies (spec: Errors, "Envelope") ----------------------------------------------------------


def format_accepted_at(value: datetime) -> str:
    """RFC 3339, UTC, six fraction digits and ``Z`` (spec: Conventions, Time)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def accepted_body(event_id: str, accepted_at: datetime, request_id: str) -> bytes:
    """The 200 reply: ``data`` with exactly event_id and accepted_at, and ``request_id``; the
    platform decodes it strictly, so there is no other member."""
    return orjson.dumps(
        {
            "data": {"event_id": event_id, "accepted_at": format_accepted_at(accepted_at)},
            "request_id": request_id,
        }
    )


def error_body(refusal: Refusal, request_id: str) -> bytes:
    return orjson.dumps(
        {
            "error": {
                "code": refusal.code,
                "message": refusal.message,
                "retryable": refusal.retryable,
            },
            "request_id": request_id,
        }
    )
