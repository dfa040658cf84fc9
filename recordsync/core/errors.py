"""The one exception hierarchy of recordsync, grouped by what the caller does next.

- ``ConfigurationError``: fix the configuration, then start again (exit code 2).
- ``RetryableError``: wait (backoff with jitter, or Retry-After) and send the same request again.
- ``CursorExpiredError``: recover as the spec says (restart the window, or rebuild).
- ``FatalPlatformError``: stop and tell a person; sending again will not help.
- ``InvalidRecordError``: skip the record and quarantine it with the reason.
- ``LeaseSupersededError``: another process holds the merchant now; stop syncing it.
- ``LeaseUnconfirmedError``: this process cannot confirm its lease: stop syncing it, now.

Every platform error carries the HTTP status, ``error.code``, ``retryable`` and ``request_id``
so callers branch on the code, never on the message (spec: Errors).  Messages never contain the
secret or a signature: they are built only from the endpoint, status, code and the server's own
diagnostic message.
"""

from __future__ import annotations


class RecordSyncError(Exception):
    """Base of every error recordsync raises on purpose."""


class ConfigurationError(RecordSyncError):
    """A setting is missing or invalid; the operator must fix it."""


class SchemaVersionError(ConfigurationError):
    """The warehouse's schema is not the one this version of recordsync reads and writes.

    Behind: someone must run ``recordsync migrate``.  Ahead, or unknown: a newer recordsync
    migrated it, so this one must be upgraded.  Waiting fixes neither, so it is never retried.
    """


class PermissionDeniedError(ConfigurationError):
    """The warehouse refused this database account a statement (a grant it lacks): another
    account, or another grant, is the fix; waiting is not (docs/operations.md, "Who may run
    what")."""


class WarehouseUnavailableError(RecordSyncError):
    """The warehouse cannot be reached now; wait and try again."""


class SchemaLockLostError(RecordSyncError):
    """The schema lock an upgrade held is gone (its session ended): stop before the next
    revision, for another migrator may now run the same DDL; not tried again by itself."""


class LeaseSupersededError(RecordSyncError):
    """Another holder took the merchant over: this process must stop syncing that merchant.

    Raised by a fenced warehouse write whose lease epoch (``expected``) is no longer the
    merchant's (``found``; None when the merchant was never leased).  The write was rolled
    back, nothing of it stored; retrying is wrong, since the new holder now writes the merchant.
    """

    def __init__(self, merchant_id: str, *, expected: int, found: int | None) -> None:
        self.merchant_id = merchant_id
        self.expected = expected
        self.found = found
        super().__init__(
            f"lease of merchant {merchant_id!r} superseded: this holder's epoch is {expected}, "
            f"the warehouse's is {found}; stop syncing the merchant"
        )


class LeaseUnconfirmedError(RecordSyncError):
    """This process could not confirm, recently enough, that it still holds the merchant's
    lease (the database unreachable, the network cut, this process paused): the lease may pass
    to another process any moment, so it sends nothing more for the merchant until it holds it
    again (self-fencing reads)."""

    def __init__(self, merchant_id: str) -> None:
        self.merchant_id = merchant_id
        super().__init__(
            f"the lease of merchant {merchant_id!r} is not confirmed: nothing more is sent for "
            "it until this process holds it again"
        )


class PlatformError(RecordSyncError):
    """An answer (or the lack of one) from the platform API."""

    def __init__(
        self,
        message: str,
        *,
        endpoint: str,
        status: int | None = None,
        code: str | None = None,
        retryable: bool = False,
        request_id: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.status = status
        self.code = code
        self.retryable = retryable
        self.request_id = request_id
        super().__init__(message)

    def __str__(self) -> str:
        parts = [self.args[0] if self.args else type(self).__name__]
        facts = [f"endpoint={self.endpoint}"]
        if self.status is not None:
            facts.append(f"status={self.status}")
        if self.code is not None:
            facts.append(f"code={self.code}")
        if self.request_id is not None:
            facts.append(f"request_id={self.request_id}")
        return f"{parts[0]} ({', '.join(facts)})"


class RetryableError(PlatformError):
    """The same request may succeed later: timeouts, resets, 5xx, 503, 429, malformed pages."""


class TransportError(RetryableError):
    """No HTTP answer: timeout, refused or reset connection."""


class ServerError(RetryableError):
    """A 5xx answer other than the projection-lag 503."""


class ProjectionLagError(RetryableError):
    """503 from records or record-changes: the projection lags; never an empty page."""


class RateLimitedError(RetryableError):
    """429: the shared record budget was exceeded; ``retry_after`` is in seconds."""

    def __init__(
        self,
        message: str,
        *,
        endpoint: str,
        retry_after: float,
        status: int | None = 429,
        code: str | None = None,
        request_id: str | None = None,
    ) -> None:
        self.retry_after = retry_after
        super().__init__(
            message,
            endpoint=endpoint,
            status=status,
            code=code,
            retryable=True,
            request_id=request_id,
        )


class ProtocolError(RetryableError):
    """The answer is not a valid envelope: bad JSON, wrong content type, both or neither member.

    Retryable because a truncated or garbled body is usually a transport accident; the cursor
    is never advanced past a page that did not parse.
    """


class ResponseTooLargeError(ProtocolError):
    """The answer's body is larger than the client reads (``limit`` bytes): refused while it
    streams in, never held whole.  ``size``: the bytes declared or received when it stopped.

    A ``ProtocolError``: retried within the policy's attempts like any answer that is not a
    page, the cursor never advanced past it.
    """

    def __init__(self, message: str, *, endpoint: str, limit: int, size: int) -> None:
        self.limit = limit
        self.size = size
        super().__init__(message, endpoint=endpoint, retryable=True)


class CursorExpiredError(PlatformError):
    """410 CURSOR_EXPIRED: a records cursor older than 24 h or a change start beyond retention."""


class FatalPlatformError(PlatformError):
    """Sending the same request again will not help; a person must act."""


class AuthenticationError(FatalPlatformError):
    """401 AUTHENTICATION_FAILED: unknown merchant id or wrong secret."""


class ClockSkewError(FatalPlatformError):
    """401 REQUEST_EXPIRED: X-Timestamp is more than 300 s away from the platform's clock."""


class RequestRejectedError(FatalPlatformError):
    """Any other 4xx: the request itself is wrong (a bug, or an unsupported parameter)."""


class UnexpectedRedirectError(FatalPlatformError):
    """A 3xx answer: redirects are never followed, since the signature covers the target."""


class PlatformUnreachableError(FatalPlatformError):
    """A one-shot command found no way to the platform for longer than it waits (the name
    does not resolve, the connection is refused, TLS fails): it ends, naming the cause,
    instead of retrying forever.  The daemon never raises it: it keeps trying."""

    @classmethod
    def after(cls, waited: float, cause: PlatformError) -> PlatformUnreachableError:
        """The error of a command that found no way for ``waited`` seconds, ``cause`` last."""
        return cls(
            f"the platform could not be reached for {waited:.0f} s ({cause.args[0]}); "
            "check base_url, the name service and the network "
            "(RECORDSYNC_UNREACHABLE_TIMEOUT sets how long a command tries)",
            endpoint=cause.endpoint,
        )


class CommandInterruptedError(RecordSyncError):
    """A one-shot command was stopped by SIGINT or SIGTERM before it finished: it exits
    128 + the signal's number (130, 143), as a shell reports a process the signal ended, so a
    Kubernetes Job or a systemd one-shot never records a half-done range as a success; the
    message says what happens to the work."""

    def __init__(self, signal_name: str, signum: int, what_now: str) -> None:
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal_name}: {what_now}")


class ShutdownRequestedError(RecordSyncError):
    """A stop was asked for while waiting (budget, backoff, poll): unwind without committing."""


class InvalidRecordError(RecordSyncError):
    """One record (or change) failed validation; it is quarantined, the page goes on."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
