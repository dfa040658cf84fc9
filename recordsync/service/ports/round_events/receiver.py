"""The receiver of round-end notifications: ``POST /v1/round-events`` on its own port.

``RoundEventReceiver.handle`` turns one request into one reply, with its I/O injected (the
merchants' secrets, the store, the wake-up, the clock), so every decision is testable without
a socket; ``asgi_app`` and ``EventsServer`` put it on the wire.

The server is uvicorn (h11), driving a raw ASGI app.  ASGI hands over the request target
exactly as received (``raw_path`` and ``query_string`` bytes), which is what the signature
covers (spec: Authentication, Signature: "the raw request target ... not decoded"), and
uvicorn is a maintained, widely deployed server that parses HTTP/1.1 for us (framing,
keep-alive, malformed requests).  A WSGI server would hand over a decoded ``PATH_INFO``.
It runs its event loop in one thread of the daemon; the blocking part of a request (the
warehouse insert) runs in the loop's thread pool, of ``EventsLimits.workers`` threads.  The
port's deadlines and connection cap are in ``connections``: strangers holding sockets open
cannot keep the platform out, nor take threads from the sync.  Nor memory: what the head
alone decides (``RoundEventReceiver.screen``: the route, steps 1 and 2 of the verification,
the signature's form) is refused on the event loop before a byte of the body is read, and
the bodies read before their signature is verified share
``EventsLimits.unverified_body_bytes`` (past it, 503 with Retry-After).  Refusals are
counted one by one and logged once per reason and interval (``refusals``).

Reply fast, never call the platform while the platform waits: a request is verified, stored
and answered, and the tail is only *asked* to read now (its own job reads, inside its budget).
If the warehouse cannot store the event, the answer is 503 with Retry-After (the platform
retries): an event is never acknowledged unless it is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Self

import structlog
import uvicorn

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.core.round_events import RoundEvent, RoundEventReceipt
from recordsync.core.secret import Secret
from recordsync.metrics.round_events import EventOutcome, RoundEventMetrics
from recordsync.service.ports.round_events.connections import (
    DEFAULT_LIMITS,
    BodyAllowance,
    EventsLimits,
    guarded_h11,
)
from recordsync.service.ports.round_events.refusals import RefusalLog
from recordsync.service.ports.round_events.signature import (
    DEPENDENCY_UNAVAILABLE,
    MAX_BODY_BYTES,
    PAYLOAD_TOO_LARGE,
    REQUEST_TIMEOUT,
    SERVER_BUSY,
    Refusal,
    Request,
    accepted_body,
    check_head,
    check_route,
    error_body,
    parse_event,
    verify,
)

log = structlog.get_logger("recordsync.events")

RETRY_AFTER_SECONDS: Final = 5  # a warehouse outage: the platform comes back in 5 s
_JSON: Final = (b"content-type", b"application/json")


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    retry_after: int | None = None
    close: bool = False  # the request was not read to its end: the connection cannot go on

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [_JSON, (b"content-length", str(len(self.body)).encode())]
        if self.retry_after is not None:
            headers.append((b"retry-after", str(self.retry_after).encode()))
        if self.close:
            headers.append((b"connection", b"close"))
        return headers


class RoundEventReceiver:
    """Verifies, stores and answers one notification; wakes the merchant's tail."""

    def __init__(
        self,
        *,
        secrets: Callable[[str], Sequence[Secret] | None],
        store: Callable[[RoundEvent], RoundEventReceipt],
        wake: Callable[[RoundEvent], None],
        metrics: RoundEventMetrics | None = None,
        clock: Callable[[], float] = time.time,
        request_ids: Callable[[], str] = lambda: str(uuid.uuid4()),
        refusal_log: RefusalLog | None = None,
    ) -> None:
        """``secrets(merchant_id)``: the secrets a callback of that merchant may be signed
        with (None or empty: not a configured merchant), asked on the event loop's thread
        too, so it must not block; ``store`` raises ``WarehouseUnavailableError`` when the
        warehouse is down; ``wake`` is called for every newly stored event (not for a
        repeat)."""
        self._refusal_log = RefusalLog() if refusal_log is None else refusal_log
        self._secrets = secrets
        self._store = store
        self._wake = wake
        self._metrics = metrics
        self._clock = clock
        self._request_ids = request_ids

    def handle(self, request: Request, *, started: float | None = None) -> Reply:
        started = time.perf_counter() if started is None else started
        request_id = self._request_ids()
        merchant_id = self._configured(request)
        try:
            check_route(request)
            verify(request, secrets=self._secrets, now=self._clock())
            assert merchant_id is not None
            event = parse_event(request, merchant_id)
            receipt = self._stored(event)
        except Refusal as refusal:
            self._refused(request, refusal, merchant_id, started)
            return Reply(refusal.status, error_body(refusal, request_id), refusal.retry_after)
        if not receipt.duplicate and event.acted_on:
            self._wake(event)
        outcome = EventOutcome.DUPLICATE if receipt.duplicate else EventOutcome.ACCEPTED
        if self._metrics is not None:
            self._metrics.received(merchant_id, outcome, None, time.perf_counter() - started)
        log.debug(
            "round_event_duplicate" if receipt.duplicate else "round_event_accepted",
            merchant_id=merchant_id,
            event_id=event.event_id,
            round_id=event.round_id,
            type=event.type,
            request_id=request_id,
        )
        return Reply(200, accepted_body(event.event_id, receipt.accepted_at, request_id))

    def screen(self, head: Request, *, started: float, close: bool) -> Reply | None:
        """What the head alone decides (the route, steps 1 and 2 of the verification, the
        signature's form): the refusal, or None when the body is worth reading.  Called on
        the event loop before a byte of the body is read; ``close`` when a body follows
        (it is never read then, so the connection cannot go on)."""
        try:
            check_route(head)
            check_head(head, secrets=self._secrets, now=self._clock())
        except Refusal as refusal:
            self._refused(head, refusal, self._configured(head), started)
            return Reply(refusal.status, error_body(refusal, self._request_ids()), close=close)
        return None

    def busy(self, head: Request, *, started: float) -> Reply:
        """The port holds as many unverified bodies as it may (``EventsLimits``): 503 with
        Retry-After before a byte of this body is read; the platform retries then."""
        refusal = Refusal(
            503,
            SERVER_BUSY,
            "too many notifications are being received; retry later",
            retryable=True,
            retry_after=RETRY_AFTER_SECONDS,
        )
        self._refused(head, refusal, self._configured(head), started)
        body = error_body(refusal, self._request_ids())
        return Reply(refusal.status, body, refusal.retry_after, close=True)

    def too_large(self, request: Request, *, started: float) -> Reply:
        """The body passed 1 MiB (spec: Limits, "Body size"): 413 before anything else, and
        the connection is closed (the rest of the body is not read)."""
        refusal = Refusal(413, PAYLOAD_TOO_LARGE, f"the body is larger than {MAX_BODY_BYTES} bytes")
        self._refused(request, refusal, self._configured(request), started)
        return Reply(refusal.status, error_body(refusal, self._request_ids()), close=True)

    def timed_out(self, request: Request, *, started: float, seconds: float) -> Reply:
        """The body did not arrive within ``seconds`` of the head: 408, and the connection is
        closed (what is left of the body would be read as the next request)."""
        refusal = Refusal(408, REQUEST_TIMEOUT, f"the body did not arrive within {seconds:g} s")
        self._refused(request, refusal, self._configured(request), started)
        return Reply(refusal.status, error_body(refusal, self._request_ids()), close=True)

    def _configured(self, request: Request) -> str | None:
        """The merchant the request names when it is one of ours (a bounded label, safe to
        log), verified or not; None otherwise."""
        claimed = request.header("x-merchant-id")
        return claimed if claimed is not None and self._secrets(claimed) else None

    def _stored(self, event: RoundEvent) -> RoundEventReceipt:
        try:
            return self._store(event)
        except WarehouseUnavailableError as exc:
            log.warning(
                "round_event_not_stored",
                merchant_id=event.merchant_id,
                event_id=event.event_id,
                error=str(exc),
                action=f"answered 503, Retry-After {RETRY_AFTER_SECONDS}: the platform retries",
            )
            raise Refusal(
                503,
                DEPENDENCY_UNAVAILABLE,
                "the warehouse is unavailable; retry later",
                retryable=True,
                retry_after=RETRY_AFTER_SECONDS,
            ) from None

    def _refused(
        self, request: Request, refusal: Refusal, merchant_id: str | None, started: float
    ) -> None:
        if self._metrics is not None:
            self._metrics.received(
                merchant_id, EventOutcome.REFUSED, refusal.code, time.perf_counter() - started
            )
        # The merchant named only when it is one of ours; never a stranger's header value.
        self._refusal_log.refused(
            status=refusal.status,
            code=refusal.code,
            message=refusal.message,
            merchant_id=merchant_id,
            method=request.method,
            size=len(request.body),
        )


# -- the ASGI app and the server -------------------------------------------------------------


def asgi_app(
    receiver: RoundEventReceiver, *, limits: EventsLimits = DEFAULT_LIMITS
) -> Callable[..., Any]:
    """A raw ASGI app for ``receiver``.  On the head alone: a declared body over 1 MiB is 413,
    and what ``receiver.screen`` refuses is answered before a byte of the body is read.  Then
    the body takes its share of ``limits.unverified_body_bytes`` (or is answered 503), is
    read (at most 1 MiB, within ``limits.body_timeout`` of the head), and the request goes
    to a worker thread; the reply is sent uncompressed.  A client gone before its body ended
    gets no reply and is not a request: nothing is verified, counted or logged above debug
    for it."""
    allowance = BodyAllowance(limits.unverified_body_bytes)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; nothing else is served
        query = scope.get("query_string", b"")
        target = scope.get("raw_path") or scope["path"].encode()
        if query:
            target += b"?" + query
        headers: dict[str, list[str]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        head = Request(scope["method"], target, headers, b"")
        declared = _declared_length(headers)
        started = time.perf_counter()
        if declared is _Unread.TOO_LARGE:
            reply: Reply | None = receiver.too_large(head, started=started)
            await _discard_body(receive, limits.body_timeout)
        else:
            reply = receiver.screen(head, started=started, close=declared != 0)
        if reply is None:
            assert not isinstance(declared, _Unread)
            size = MAX_BODY_BYTES if declared is None else declared
            if not allowance.take(size):
                reply = receiver.busy(head, started=started)
            else:
                try:
                    reply = await _read_and_handle(receiver, head, receive, limits.body_timeout)
                finally:
                    allowance.give(size)
        if reply is None:
            return
        await send(
            {"type": "http.response.start", "status": reply.status, "headers": reply.headers()}
        )
        await send({"type": "http.response.body", "body": reply.body})

    return app


async def _read_and_handle(
    receiver: RoundEventReceiver, head: Request, receive: Any, body_timeout: float
) -> Reply | None:
    """The reply once the body is in (None: the client went away first)."""
    try:
        body = await asyncio.wait_for(_read_body(receive), body_timeout)
    except TimeoutError:
        body = _Unread.TIMED_OUT
    if body is _Unread.GONE:
        log.debug("round_event_abandoned", reason="the client closed before its body ended")
        return None
    started = time.perf_counter()
    if body is _Unread.TOO_LARGE:
        await _discard_body(receive, body_timeout)
        return receiver.too_large(head, started=started)
    if body is _Unread.TIMED_OUT:
        return receiver.timed_out(head, started=started, seconds=body_timeout)
    assert isinstance(body, bytes)
    request = Request(head.method, head.target, head.headers, body)
    return await asyncio.to_thread(receiver.handle, request, started=started)


class _Unread(enum.Enum):
    """Why there is no body to verify."""

    TOO_LARGE = enum.auto()
    TIMED_OUT = enum.auto()
    GONE = enum.auto()


def _declared_length(headers: dict[str, list[str]]) -> int | _Unread | None:
    """The body's declared length; None when it declares none (chunked); TOO_LARGE past 1 MiB,
    refused before a byte is read."""
    values = headers.get("content-length")
    if not values:
        return None
    declared = values[0]
    # ASCII digits only ("²" is a digit to str.isdigit, not to int), and a length past any
    # body's refused by its digits before int() (which refuses more than 4,300 of them).
    if not (declared.isascii() and declared.isdigit()):
        return None  # h11 refuses such a head before the app sees it
    if len(declared) > len(str(MAX_BODY_BYTES)) or int(declared) > MAX_BODY_BYTES:
        return _Unread.TOO_LARGE
    return int(declared)


async def _read_body(receive: Any) -> bytes | _Unread:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return _Unread.GONE
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return _Unread.TOO_LARGE
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


# A body over the limit is read on (and thrown away) up to this much before its 413 is sent:
# answered and closed with the body's bytes still unread, the kernel resets the connection and
# the sender can lose the answer (seen on loopback: 1 MiB and 2 bytes, the 413's body lost).
# Nothing is kept, so memory stays flat; past this much, or the body's time limit, the
# connection closes at once: a sender that far over the limit is owed no answer.
_DISCARDED_AT_MOST: Final = 2 * MAX_BODY_BYTES


async def _discard_body(receive: Any, seconds: float) -> None:
    async def discard() -> None:
        size = 0
        while size <= _DISCARDED_AT_MOST:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(discard(), seconds)


class EventsServer:
    """``app`` served by uvicorn on ``host:port`` in a thread of its own; a context manager.

    The socket is bound at ``start`` (so a port in use fails the start, in the caller's
    thread); port 0 takes a free one, read back from ``port``.  ``limits`` bound the
    connections and threads (give ``app`` the same ``limits``).
    """

    def __init__(
        self,
        app: Callable[..., Any],
        *,
        host: str,
        port: int,
        limits: EventsLimits = DEFAULT_LIMITS,
    ) -> None:
        self._limits = limits
        self._config = uvicorn.Config(
            app,
            host=host,
            port=port,
            http=guarded_h11(limits),
            loop="asyncio",
            lifespan="off",
            log_config=None,  # its records reach the daemon's one log stream (recordsync.logs)
            access_log=False,  # a line per request: the receiver logs what it refuses
            server_header=False,
            proxy_headers=False,  # the signature covers what arrived, whoever forwarded it
            timeout_keep_alive=limits.keep_alive,
            timeout_graceful_shutdown=5,
            h11_max_incomplete_event_size=limits.max_head_bytes,
            # No limit of uvicorn's own: it counts the connections closed by the guard until the
            # loop's next turn, so a burst of strangers accepted in one turn (more than the cap)
            # made it answer the platform's next notification 503 on a connection the guard
            # had kept.  The guard alone bounds the open connections, and with them the tasks
            # (one request at a time per connection).
            limit_concurrency=None,
        )
        self._server = uvicorn.Server(self._config)
        self._host = host
        self._port = port
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._socket is not None, "not started"
        return int(self._socket.getsockname()[1])

    def start(self) -> None:
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Inherited by every accepted connection, before its handshake sets the window: what
        # one read can take from a connection, so what a head refused unread leaves behind.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._limits.receive_buffer)
        try:
            sock.bind((self._host, self._port))
        except OSError:
            sock.close()
            raise
        sock.listen(self._limits.backlog)
        sock.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        self._socket = sock
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._serve(sock)),
            name="round-events-http",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                raise RuntimeError("the round-events server did not start within 10 s")
            time.sleep(0.01)

    async def _serve(self, sock: socket.socket) -> None:
        workers = ThreadPoolExecutor(self._limits.workers, thread_name_prefix="round-events")
        asyncio.get_running_loop().set_default_executor(workers)  # asyncio.run shuts it down
        await self._server.serve(sockets=[sock])

    def stop(self) -> None:
        """Finish the requests in hand (a few seconds at most), then close; safe twice."""
        thread, self._thread = self._thread, None
        self._server.should_exit = True
        if thread is not None:
            thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
