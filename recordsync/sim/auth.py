"""Request authentication, in the order the spec gives for verifiers (spec: Authentication).

1. find the secret by X-Merchant-Id, else 401 AUTHENTICATION_FAILED (the API finds the
   merchant, each merchant has an ``Authenticator`` of its own; ``check`` confirms the id);
2. X-Timestamp is 10 digits within 300 seconds of the simulator's clock, else 401
   REQUEST_EXPIRED;
3. recompute the signature over the raw request target exactly as received and the raw body,
   compare in constant time, else 401 AUTHENTICATION_FAILED.

During a key rotation both the current and the previous secret are accepted (spec:
Authentication, Key rotation): ``rotate`` starts the overlap, ``retire`` ends it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Final

from recordsync.core.secret import Secret
from recordsync.platform.signing import sign, signatures_match
from recordsync.sim.envelope import ApiError

MAX_SKEW_SECONDS: Final = 300
_TIMESTAMP: Final = re.compile(r"[0-9]{10}")
_SIGNATURE: Final = re.compile(r"[0-9a-f]{64}")


def _failed(message: str) -> ApiError:
    return ApiError(401, "AUTHENTICATION_FAILED", message)


def unknown_merchant() -> ApiError:
    """Step 1 failed: no merchant has this X-Merchant-Id."""
    return _failed("unknown merchant")


class Authenticator:
    """One merchant's secrets: the current one first, then the previous one during a rotation."""

    def __init__(self, merchant_id: str, secrets: tuple[Secret, ...]) -> None:
        self._merchant_id = merchant_id
        self._secrets = secrets
        self._rotation = threading.Lock()

    def rotate(self, new_secret: Secret) -> None:
        """Accept ``new_secret`` and the current secret; an older previous one is dropped.

        The platform overlaps two secrets, not more: rotating again during an overlap ends
        the older one.
        """
        with self._rotation:
            self._secrets = (new_secret, self._secrets[0])

    def current(self) -> str:
        """The newest secret: the one the platform signs its callbacks with.

        The spec does not say which secret signs callbacks during an overlap, only that the
        merchant accepts both (spec: Key rotation); the newest is the one that still works
        once the old is retired, so a receiver sees old-then-new signatures.
        """
        return self._secrets[0].reveal()

    def retire(self) -> None:
        """End the overlap: only the newest secret is accepted from now on."""
        with self._rotation:
            self._secrets = self._secrets[:1]

    def check(
        self,
        *,
        headers: Mapping[str, str],
        method: str,
        target: str,
        body: bytes,
        now: float,
    ) -> str:
        """The authenticated merchant id, or ``ApiError`` 401."""
        merchant = headers.get("x-merchant-id")
        if merchant != self._merchant_id:
            raise unknown_merchant()
        timestamp = headers.get("x-timestamp") or ""
        if _TIMESTAMP.fullmatch(timestamp) is None or abs(int(timestamp) - now) > MAX_SKEW_SECONDS:
            raise ApiError(
                401, "REQUEST_EXPIRED", "X-Timestamp is missing or more than 300 s from now"
            )
        received = headers.get("x-signature") or ""
        if _SIGNATURE.fullmatch(received) is None:
            raise _failed("X-Signature must be 64 lowercase hex characters")
        matched = False
        # No early exit: the same work whichever secret matches.  The tuple is read once
        # (a rotation swaps it whole), so a request never sees half a rotation.
        for secret in self._secrets:
            expected = sign(
                secret.reveal(),
                timestamp=timestamp,
                method=method,
                target=target,
                idempotency_key=headers.get("idempotency-key"),
                if_match=headers.get("if-match"),
                body=body,
            )
            matched |= signatures_match(expected, received)
        if not matched:
            raise _failed("signature mismatch")
        return merchant
