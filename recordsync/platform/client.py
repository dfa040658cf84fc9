"""The signed client of the platform's record endpoints (spec: Authentication, Records).

Every request is signed over the exact bytes that go on the wire (spec: Authentication,
Signature): the request target is built once by ``signing.build_target``, the httpx request is
built from it, and if httpx would put anything else on the request line we refuse to send.
Redirects are never followed (the signature covers the target).

Every attempt, retries included, takes a slot of the shared ``RateBudget`` (records and
record-changes share the platform's limit) and carries a fresh X-Timestamp and signature while
the target stays the same (spec: "every retry uses a fresh X-Timestamp and a new signature").
The secret is asked for at every attempt too (a ``SecretProvider``), so a rotated secret signs
the next request without a restart (spec: Authentication, Key rotation).  A client that syncs
under a lease (``hold_under``) asks it before every attempt, again after the budget's wait,
and a last time right before the request's bytes are written to the socket (wire.py): once
the lease is not confirmed, nothing more goes out for the merchant
(``LeaseUnconfirmedError``), so a process cut off or paused past its lease never spends the
new holder's rate limit.
What is retried, and how long to wait, is ``RetryPolicy``'s decision; a 429 pauses the budget
for every caller.  A caller that must not wait out a failure in its thread (a job on a shared
pool, ``core.waiting``) gets the error at once instead: its job's step runner retries it later,
with the thread given back meanwhile.  httpx exceptions become ours in exactly one place,
``_send``.

Nothing here logs or raises header values, signatures or the secret.
"""

from __future__ import annotations

import errno
import random
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Final, Generic, Protocol, Self, TypeVar

import httpx
import structlog

from recordsync.core.errors import (
    AuthenticationError,
    ClockSkewError,
    ConfigurationError,
    InvalidRecordError,
    LeaseUnconfirmedError,
    PlatformError,
    PlatformUnreachableError,
    ProtocolError,
    RateLimitedError,
    ResponseTooLargeError,
    TransportError,
    UnexpectedRedirectError,
)
from recordsync.core.models import (
    DEFAULT_LIMITS,
    GAME_STATUSES,
    Capabilities,
    ChangesPage,
    GamesPage,
    Limits,
    RecordsPage,
)
from recordsync.core.secret import Secret, SecretProvider
from recordsync.core.times import format_time
from recordsync.core.waiting import may_wait
from recordsync.platform.budget import Pace, Priority, RateBudget, default_query_budget
from recordsync.platform.envelope import Reply, decode_reply, is_json_success
from recordsync.platform.parsing import (
    parse_capabilities,
    parse_changes_page,
    parse_games_page,
    parse_records_page,
    usual_records_page,
)
from recordsync.platform.retry import RetryPolicy
from recordsync.platform.signing import build_target, format_timestamp, sign
from recordsync.platform.wire import answer_hook, carrying, settle, wire_transport

CAPABILITIES: Final = "capabilities"
RECORDS: Final = "records"
RECORD_CHANGES: Final = "record-changes"
GAMES: Final = "games"

# The endpoints read as cursor chains through the record budget: only their round trip
# decides how many chains to keep in flight (``pace``).  Capabilities and the catalogue
# answer without the records' work or latency, so a fast first answer from them would
# make a backfill plan for too few chains and cut its windows again and again as the
# average rose to the records' real round trip.
_CHAINED: Final = frozenset({RECORDS, RECORD_CHANGES})

MAX_PAGE_SIZE: Final = 1000  # spec: Conventions, Pagination (1-1000)
# The largest answer body read (after any content decoding); a larger one is refused while it
# streams in.  A page holds at most 1000 items (spec: Limits, Page size): a records page
# is about 0.5 MB, a changes page (each change carries its record) about 0.65 MB, so 64 MiB
# leaves two orders of magnitude for fields the platform may add (Versioning 3) and long
# identifiers or names, while a runaway or hostile answer costs at most that much memory per
# request in flight, not all of it.
DEFAULT_MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
MAX_RECORDS_WINDOW: Final = timedelta(hours=24)  # spec: Limits, Records window

_log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Parsed(Generic[T]):
    """An answer read straight from its bytes, with its request id for the observer."""

    value: T
    request_id: str | None


FastParse = Callable[[bytes], Parsed[T] | None]


class ClientObserver(Protocol):
    """Hook for metrics: told about every attempt, retry and 429.  Must not raise."""

    def on_response(
        self,
        endpoint: str,
        status: int | None,
        code: str | None,
        seconds: float,
        request_id: str | None,
    ) -> None: ...

    def on_retry(self, endpoint: str, reason: str, delay: float) -> None: ...

    def on_rate_limited(self, endpoint: str, retry_after: float) -> None: ...


class NullObserver:
    """The default observer: ignores everything."""

    def on_response(
        self,
        endpoint: str,
        status: int | None,
        code: str | None,
        seconds: float,
        request_id: str | None,
    ) -> None:
        pass

    def on_retry(self, endpoint: str, reason: str, delay: float) -> None:
        pass

    def on_rate_limited(self, endpoint: str, retry_after: float) -> None:
        pass


class PlatformClient:
    """Reads capabilities, record snapshots and the change stream of one merchant."""

    def __init__(
        self,
        *,
        base_url: str,
        merchant_id: str,
        secret: Secret | SecretProvider,
        budget: RateBudget | None = None,
        query_budget: RateBudget | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        verify: bool | str = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
        observer: ClientObserver | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        unreachable_after: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``unreachable_after``: once no attempt has found a way to the platform (a
        ``TransportError`` at every attempt since) for that many seconds, requests are not
        tried again, and a capabilities read that finds no way ends with
        ``PlatformUnreachableError``: a one-shot command gives up on an unreachable platform
        after that long (``sync.resilience``), not after its requests' retries as well."""
        self._origin, self._base_path = _split_base_url(base_url)
        if max_response_bytes < 1:
            raise ConfigurationError("max_response_bytes must be at least 1")
        self._max_response_bytes = max_response_bytes
        if not merchant_id or not merchant_id.isascii() or not merchant_id.isprintable():
            raise ConfigurationError("merchant_id must be a non-empty printable ASCII string")
        self._merchant_id = merchant_id
        # Several merchants' clients log in one process: each event names its merchant.
        self._log = _log.bind(merchant_id=merchant_id)
        self._secret = secret
        self._budget = budget or RateBudget(
            DEFAULT_LIMITS.record_requests, DEFAULT_LIMITS.record_seconds
        )
        # The query endpoints (the game catalogue) have their own limit, never the record
        # budget (spec: Capabilities, limits.query_requests per query_seconds).
        self._query_budget = query_budget or default_query_budget(sleep=sleep)
        self._clock = clock
        self._sleep = sleep
        self._retry = retry or RetryPolicy()
        self._unreachable_after = unreachable_after
        self._monotonic = monotonic
        # Since when no attempt has found a way to the platform (None: the last one did).
        self._unreachable_since: float | None = None
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._observer: ClientObserver = observer or NullObserver()
        self._limits = DEFAULT_LIMITS
        self._round_trip: float | None = None
        self._first_round_trip: float | None = None  # the capabilities call's
        self._lease: Callable[[], bool] | None = None
        tls = _tls(verify=verify)
        self._http = httpx.Client(
            # Requests are stamped for the budget when they are written (wire.py).
            transport=transport or wire_transport(verify=tls),
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            follow_redirects=False,
            verify=tls,
        )

    @property
    def budget(self) -> RateBudget:
        return self._budget

    def hold_under(self, lease: Callable[[], bool] | None) -> None:
        """Send only while ``lease()`` says the merchant's lease is confirmed (None: always)."""
        self._lease = lease

    def _check_lease(self) -> None:
        if self._lease is not None and not self._lease():
            raise LeaseUnconfirmedError(self._merchant_id)

    @property
    def query_budget(self) -> RateBudget:
        return self._query_budget

    def pace(self) -> Pace:
        """The budget's terms and the recent round trip of a request (sent to answered, a
        moving average), so the snapshot can keep enough chains in flight.  Before any record
        request was answered, the capabilities call's round trip stands in for it (it leaves
        out the platform's work on a page: an estimate from below)."""
        budget = self._budget
        round_trip = self._round_trip if self._round_trip is not None else self._first_round_trip
        return Pace(budget.requests, budget.seconds, budget.margin, round_trip)

    def __repr__(self) -> str:
        base_url = self._origin + self._base_path
        return f"PlatformClient(base_url={base_url!r}, merchant_id={self._merchant_id!r})"

    # -- endpoints ------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        """``GET /v1/capabilities``; not counted against the record budget (spec: Limits)."""

        def parse(reply: Reply) -> Capabilities:
            try:
                return parse_capabilities(reply.data)
            except InvalidRecordError as exc:
                raise ProtocolError(
                    f"malformed capabilities: {exc.reason}",
                    endpoint=CAPABILITIES,
                    request_id=reply.request_id,
                ) from None

        return self._get(CAPABILITIES, "/v1/capabilities", [], parse, priority=None)

    def apply_capabilities(self) -> Limits:
        """Read the platform's limits and resize the budget to them.

        When capabilities cannot be read, keep the last known limits (at first the spec's
        default of 2 per 1 s) and log ``capabilities_unavailable``: the sync can still run.
        A wrong secret, a skewed clock or a redirect propagate: nothing else would work either.
        """
        try:
            limits = self.capabilities().limits
        except (AuthenticationError, ClockSkewError, UnexpectedRedirectError):
            raise
        except PlatformError as exc:
            unreachable = self._unreachable_left()
            if isinstance(exc, TransportError) and unreachable and unreachable[1] <= 0:
                raise PlatformUnreachableError.after(unreachable[0], exc) from exc
            self._log.warning(
                "capabilities_unavailable",
                error=type(exc).__name__,
                status=exc.status,
                code=exc.code,
                request_id=exc.request_id,
                record_requests=self._limits.record_requests,
                record_seconds=self._limits.record_seconds,
            )
            limits = self._limits
        self._budget.resize(limits.record_requests, limits.record_seconds)
        if limits.query_requests is not None and limits.query_seconds is not None:
            self._query_budget.resize(limits.query_requests, limits.query_seconds)
        self._limits = limits
        return limits

    def records_first(
        self,
        created_from: datetime,
        created_to: datetime,
        *,
        limit: int,
        priority: Priority = Priority.SNAPSHOT,
        rank: float = 0.0,
    ) -> RecordsPage:
        """First page of the snapshot of ``[created_from, created_to)`` (spec: Records);
        ``rank``: its place among waiters of the same priority (``RateBudget.acquire``)."""
        for name, value in (("created_from", created_from), ("created_to", created_to)):
            if value.tzinfo is None:
                raise ValueError(f"{name} must be timezone-aware")
            if value.microsecond % 1000:
                # The endpoint takes milliseconds; truncating an end would leave a gap.
                raise ValueError(f"{name} has sub-millisecond precision: {value.isoformat()}")
        if not timedelta(0) < created_to - created_from <= MAX_RECORDS_WINDOW:
            raise ValueError("the records window must be longer than 0 and at most 24 hours")
        params = [
            ("created_from", format_time(created_from)),
            ("created_to", format_time(created_to)),
            ("limit", _limit(limit)),
        ]
        return self._get(
            RECORDS,
            "/v1/records",
            params,
            _records_page,
            priority=priority,
            rank=rank,
            fast=_usual_records_page,
        )

    def records_next(
        self,
        cursor: str,
        *,
        limit: int,
        priority: Priority = Priority.SNAPSHOT,
        rank: float = 0.0,
    ) -> RecordsPage:
        """Next page of a snapshot: with a cursor only ``limit`` may be sent (spec: Records)."""
        params = [("cursor", _cursor(cursor)), ("limit", _limit(limit))]
        return self._get(
            RECORDS,
            "/v1/records",
            params,
            _records_page,
            priority=priority,
            rank=rank,
            fast=_usual_records_page,
        )

    def changes(
        self,
        *,
        cursor: str | None = None,
        since: datetime | None = None,
        from_now: bool = False,
        limit: int = 1000,
        priority: Priority = Priority.TAIL,
    ) -> ChangesPage:
        """One page of ``GET /v1/record-changes``: exactly one of cursor, since, from_now."""
        starts = (cursor is not None) + (since is not None) + bool(from_now)
        if starts != 1:
            raise ValueError("give exactly one of cursor, since and from_now")
        params: list[tuple[str, str]]
        if cursor is not None:
            params = [("cursor", _cursor(cursor))]
        elif since is not None:
            if since.tzinfo is None:
                raise ValueError("since must be timezone-aware")
            params = [("since", format_time(since))]
        else:
            params = [("from_now", "true")]
        params.append(("limit", _limit(limit)))
        return self._get(
            RECORD_CHANGES, "/v1/record-changes", params, _changes_page, priority=priority
        )

    def games(
        self,
        *,
        cursor: str | None = None,
        status: str | None = None,
        limit: int = MAX_PAGE_SIZE,
        priority: Priority = Priority.BACKGROUND,
    ) -> GamesPage:
        """One page of ``GET /v1/games`` (spec: Endpoints, Games), under the query budget.

        The cursor is bound to the status filter, so a following page sends the same
        ``status`` again; a cursor older than 24 h answers 410 (``CursorExpiredError``).
        """
        if status is not None and status not in GAME_STATUSES:
            raise ValueError(f"status must be one of {sorted(GAME_STATUSES)}, got {status!r}")
        params: list[tuple[str, str]] = []
        if status is not None:
            params.append(("status", status))
        if cursor is not None:
            params.append(("cursor", _cursor(cursor)))
        params.append(("limit", _limit(limit)))
        return self._get(
            GAMES,
            "/v1/games",
            params,
            _games_page,
            priority=priority,
            budget=self._query_budget,
        )

    def close(self) -> None:
        """Close the connections; safe to call twice."""
        self._http.close()

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- one request, with retries ----------------------------------------------------------

    def _get(
        self,
        endpoint: str,
        path: str,
        params: list[tuple[str, str]],
        parse: Callable[[Reply], T],
        *,
        priority: Priority | None,
        budget: RateBudget | None = None,
        rank: float = 0.0,
        fast: FastParse[T] | None = None,
    ) -> T:
        """Send until success or the policy gives up; ``priority=None``: outside any budget.

        ``budget``: the record budget unless told (the query endpoints pass theirs).  ``fast``
        reads a successful answer straight from its bytes (the records pages, the hot path),
        or says None and ``parse`` reads it through the envelope, which tells what is wrong.
        """
        target = build_target(self._base_path + path, params)
        chosen = None if priority is None else (budget or self._budget)
        attempt = 0
        while True:
            attempt += 1
            started = self._monotonic()
            try:
                answer = self._attempt(endpoint, target, priority, chosen, rank=rank, fast=fast)
                self._unreachable_since = None  # an answer: the platform is reachable
                return parse(answer) if isinstance(answer, Reply) else answer.value
            except PlatformError as error:
                if not isinstance(error, TransportError):
                    self._unreachable_since = None
                elif self._unreachable_since is None:
                    self._unreachable_since = started
                self._after_failure(endpoint, error, attempt, chosen)

    def _unreachable_left(self) -> tuple[float, float] | None:
        """(seconds no attempt has found a way to the platform, seconds left of
        ``unreachable_after``); None without that bound, or when the platform answered last."""
        since = self._unreachable_since
        if self._unreachable_after is None or since is None:
            return None
        waited = self._monotonic() - since
        return waited, self._unreachable_after - waited

    def _after_failure(
        self, endpoint: str, error: PlatformError, attempt: int, budget: RateBudget | None
    ) -> None:
        """Raise ``error`` when it must not be retried; otherwise wait as the policy says,
        never past ``unreachable_after`` of no way to the platform."""
        decision = self._retry.decide(error, attempt, self._rng)
        if isinstance(error, RateLimitedError):
            self._observer.on_rate_limited(endpoint, error.retry_after)
            self._log.warning(
                "platform_rate_limited",
                endpoint=endpoint,
                retry_after=error.retry_after,
                attempt=attempt,
                request_id=error.request_id,
            )
            if budget is not None:
                budget.pause(decision.pause)
        if not decision.retry or not may_wait():
            raise error
        delay = decision.delay
        unreachable = self._unreachable_left()
        if unreachable is not None:
            if unreachable[1] <= 0:
                raise error
            delay = min(delay, unreachable[1])  # one more attempt when the time is up
        if budget is None:
            # Outside the budget nobody else waits for us: the caller itself honours the pause.
            delay = max(delay, decision.pause)
        self._observer.on_retry(endpoint, decision.reason, delay)
        self._log.info(
            "platform_retry",
            endpoint=endpoint,
            reason=decision.reason,
            attempt=attempt,
            delay=round(delay, 3),
            request_id=error.request_id,
            status=error.status,
            code=error.code,
        )
        if delay > 0:
            self._sleep(delay)

    def _attempt(
        self,
        endpoint: str,
        target: str,
        priority: Priority | None,
        budget: RateBudget | None,
        *,
        rank: float,
        fast: FastParse[T] | None,
    ) -> Reply | Parsed[T]:
        # A new request per attempt: the same target, fresh headers, nothing shared with the
        # previous attempt (the transport may still hold on to that one).
        request = self._http.build_request(
            "GET", self._origin + target, headers={"Accept": "application/json"}
        )
        check_sent_verbatim(request.url.raw_path, target, endpoint=endpoint)
        self._check_lease()
        slot = None if priority is None or budget is None else budget.acquire(priority, rank=rank)
        handed = False
        try:
            self._check_lease()  # again: the budget's wait may have outlasted the lease
            # Fresh timestamp and signature for every attempt, taken after the budget wait.
            timestamp = format_timestamp(self._clock())
            request.headers["X-Merchant-Id"] = self._merchant_id
            request.headers["X-Timestamp"] = timestamp
            request.headers["X-Signature"] = sign(
                self._current_secret().reveal(), timestamp=timestamp, method="GET", target=target
            )
            started = time.perf_counter()
            handed = True
            try:
                # The slot is stamped when the request's bytes are on the socket (wire.py);
                # its answer's head coming back proves it arrived, so the budget may count
                # from then (budget.py), not from when the whole body has been read.  The
                # lease is asked a last time right before that write (wire.py).
                gate = None if self._lease is None else self._check_lease
                with carrying(slot, gate):
                    response, body = self._send(
                        endpoint, request, answered=None if slot is None else answer_hook(slot)
                    )
            except LeaseUnconfirmedError:
                handed = False  # held back at the socket: nothing of it went out
                raise
            except PlatformError:
                self._observer.on_response(
                    endpoint, None, None, time.perf_counter() - started, None
                )
                raise
        finally:
            if slot is not None:
                if handed:
                    settle(slot)  # may have gone out: counted, whatever happened to it
                else:
                    slot.cancel()  # never handed to the transport: the place is given back
        seconds = time.perf_counter() - started
        if endpoint in _CHAINED:
            previous = self._round_trip
            self._round_trip = seconds if previous is None else previous + (seconds - previous) / 4
        elif endpoint == CAPABILITIES and self._first_round_trip is None:
            # The first request of every run: how far the platform is, before any page was
            # asked for, so that a short job can start as wide as its latency needs.
            self._first_round_trip = seconds
        status = response.status_code
        if fast is not None and is_json_success(status, response.headers):
            # The hot path: the page straight from the bytes, or None and the usual path below.
            parsed = fast(body)
            if parsed is not None:
                self._observer.on_response(endpoint, status, None, seconds, parsed.request_id)
                return parsed
        try:
            reply = decode_reply(endpoint, response.status_code, response.headers, body)
        except PlatformError as error:
            self._observer.on_response(
                endpoint, response.status_code, error.code, seconds, error.request_id
            )
            raise
        self._observer.on_response(endpoint, response.status_code, None, seconds, reply.request_id)
        return reply

    def _current_secret(self) -> Secret:
        """The secret to sign this attempt with: a fixed one, or the provider's current one."""
        if isinstance(self._secret, Secret):
            return self._secret
        return self._secret.current()

    def _send(
        self,
        endpoint: str,
        request: httpx.Request,
        *,
        answered: Callable[[], None] | None = None,
    ) -> tuple[httpx.Response, bytes]:
        """The answer and its body; the one place where httpx exceptions become ours.
        ``answered`` is called as soon as the answer's status line and headers are in,
        before its body is read; a body above ``max_response_bytes`` is refused as it comes
        (``ResponseTooLargeError``), never read whole first.

        The platform decides on a request before it answers it, so the head of the answer
        is proof of arrival, and a page's body (a few hundred kilobytes, read while other
        chains parse and commit theirs) can take milliseconds more that the budget would
        otherwise count as the request's: at 0 ms latency every pair of requests is spaced
        by one second plus that (``bench/budget_utilisation.py``).

        Messages name the exception class only: httpx and h11 messages may quote header
        values, and the signature is one of them.
        """
        try:
            response = self._http.send(request, stream=True)
            try:
                if answered is not None:
                    answered()
                body = self._read_body(endpoint, response)
            finally:
                response.close()
        except httpx.TimeoutException as exc:
            raise TransportError(
                f"timed out ({type(exc).__name__})", endpoint=endpoint, retryable=True
            ) from exc
        except (httpx.ProtocolError, httpx.DecodingError) as exc:
            # A truncated or garbled answer (RemoteProtocolError, bad gzip): a malformed reply.
            raise ProtocolError(
                f"malformed HTTP answer ({type(exc).__name__})", endpoint=endpoint, retryable=True
            ) from exc
        except httpx.TransportError as exc:
            raise TransportError(
                f"no answer ({type(exc).__name__}{_why_no_answer(exc, request.url.host)})",
                endpoint=endpoint,
                retryable=True,
            ) from exc
        return response, body

    def _read_body(self, endpoint: str, response: httpx.Response) -> bytes:
        """The body, decoded, chunk by chunk until it passes the limit: then refused, with the
        rest left unread (closing the answer drops the connection)."""
        limit = self._max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared[:20]) > limit:
            raise ResponseTooLargeError(
                f"answer refused: its Content-Length is {declared[:20]} bytes, "
                f"more than the {limit} bytes read at most",
                endpoint=endpoint,
                limit=limit,
                size=int(declared[:20]),
            )
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > limit:
                raise ResponseTooLargeError(
                    f"answer refused: its body passed the {limit} bytes read at most "
                    f"({size} bytes received when it was stopped)",
                    endpoint=endpoint,
                    limit=limit,
                    size=size,
                )
            chunks.append(chunk)
        return b"".join(chunks)


def _why_no_answer(exc: BaseException, host: str) -> str:
    """The cause an operator can act on, from the OS error under httpx's ("no
    answer (ConnectError)" never said that the name did not resolve).  Only the host, which
    the configuration names anyway, and fixed words: never an exception's own text."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, socket.gaierror):
            return f": the name {host!r} does not resolve"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f": TLS failed, the certificate of {host!r} is not trusted"
        if isinstance(cause, ssl.SSLError):
            return f": TLS failed with {host!r}"
        if isinstance(cause, ConnectionRefusedError):
            return f": {host!r} refused the connection"
        if isinstance(cause, OSError) and cause.errno in _UNREACHABLE_ERRNOS:
            return f": no route to {host!r}"
        cause = cause.__cause__ or cause.__context__
    return ""


_UNREACHABLE_ERRNOS = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH})


def check_sent_verbatim(raw_path: bytes, target: str, *, endpoint: str) -> None:
    """Refuse to send when the request line would carry other bytes than the signed target.

    Signing one target and sending another would fail every request (or worse, pass a proxy's
    rewrite unnoticed), so nothing is sent (spec: Authentication, Signature: "sign the exact
    bytes sent").  httpx keeps a target built by ``signing.build_target`` as it is today;
    this holds the client to that should httpx ever normalise it.
    """
    if raw_path != target.encode("ascii"):
        raise ConfigurationError(
            f"{endpoint}: httpx would not send the signed request target verbatim; "
            "check base_url for characters that need percent-encoding"
        )


def _usual_records_page(body: bytes) -> Parsed[RecordsPage] | None:
    page = usual_records_page(body)
    return None if page is None else Parsed(page, page.request_id)


def _records_page(reply: Reply) -> RecordsPage:
    return parse_records_page(
        reply.data, endpoint=RECORDS, request_id=reply.request_id, body=reply.body
    )


def _changes_page(reply: Reply) -> ChangesPage:
    return parse_changes_page(
        reply.data, endpoint=RECORD_CHANGES, request_id=reply.request_id, body=reply.body
    )


def _games_page(reply: Reply) -> GamesPage:
    return parse_games_page(reply.data, endpoint=GAMES, request_id=reply.request_id)


def _limit(limit: int) -> str:
    if isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit!r}")
    return str(limit)


def _cursor(cursor: str) -> str:
    if not cursor or len(cursor) > 4096:  # noqa: PLR2004 - spec: Limits, Cursor length
        raise ValueError("a cursor is a non-empty string of at most 4096 characters")
    return cursor


def _split_base_url(base_url: str) -> tuple[str, str]:
    """``(scheme://host[:port], /path/prefix)``: the prefix is kept as httpx will send it."""
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL as exc:
        raise ConfigurationError(f"base_url is not a valid URL: {exc}") from None
    if url.scheme not in {"http", "https"} or not url.host:
        raise ConfigurationError("base_url must be an absolute http or https URL")
    if url.query or url.fragment or url.userinfo:
        raise ConfigurationError("base_url must not carry a query, fragment or credentials")
    origin = f"{url.scheme}://{url.netloc.decode('ascii')}"
    return origin, url.raw_path.decode("ascii").rstrip("/")


def _tls(*, verify: bool | str) -> bool | ssl.SSLContext:
    """``verify=<CA bundle path>`` becomes an SSL context (httpx 0.28 deprecates the path)."""
    if isinstance(verify, bool):
        return verify
    try:
        return ssl.create_default_context(cafile=verify)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"cannot load the CA bundle {verify!r}: {exc}") from None
