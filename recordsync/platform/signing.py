"""Request signing (spec: Authentication, Signature), shared by the client and the simulator.

The signing string is five LF-terminated lines followed directly by the raw body:
X-Timestamp, METHOD, raw request target, Idempotency-Key (or empty), If-Match (or empty).
The key is the UTF-8 bytes of the secret; the signature is lowercase hex HMAC-SHA256.

The request target is built here once (``build_target``) and the very same string is both
signed and put on the wire: nothing downstream may re-encode or reorder it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from urllib.parse import quote

# RFC 3986 unreserved characters stay as they are; everything else, including ':' '+' '/'
# and space, is percent-encoded so no proxy or library has a reason to rewrite the target.
_UNRESERVED = "-._~"


def encode_component(value: str) -> str:
    return quote(value, safe=_UNRESERVED)


def build_target(path: str, params: Iterable[tuple[str, str]] = ()) -> str:
    """Path plus ``?query`` only when a query exists, parameters in the order given."""
    query = "&".join(f"{encode_component(k)}={encode_component(v)}" for k, v in params)
    return f"{path}?{query}" if query else path


def signing_string(
    *,
    timestamp: str,
    method: str,
    target: str,
    idempotency_key: str | None = None,
    if_match: str | None = None,
    body: bytes = b"",
) -> bytes:
    head = "".join(
        f"{line}\n"
        for line in (timestamp, method.upper(), target, idempotency_key or "", if_match or "")
    )
    return head.encode("utf-8") + body


def sign(
    secret: str,
    *,
    timestamp: str,
    method: str,
    target: str,
    idempotency_key: str | None = None,
    if_match: str | None = None,
    body: bytes = b"",
) -> str:
    message = signing_string(
        timestamp=timestamp,
        method=method,
        target=target,
        idempotency_key=idempotency_key,
        if_match=if_match,
        body=body,
    )
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def signatures_match(expected: str, received: str) -> bool:
    """Constant-time comparison, as the spec asks of every verifier."""
    return hmac.compare_digest(expected.encode("ascii"), received.encode("ascii", "replace"))


def format_timestamp(unix_seconds: float) -> str:
    """X-Timestamp: Unix seconds as a 10-digit decimal string."""
    return f"{int(unix_seconds):010d}"
