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
cannot keep the platform out, nor take threads from the sync.

Reply fast, never call the platform while the platform waits: a request is verified, stored
and answered, and the tail is only *asked* to read now (its own job reads, inside its budget).
If the warehouse cannot store the event, the answer is 503 with Retry-After (the platform
retries): an event is never acknowledged unless it is stored.
"""

from __future__ import annotations

import asyncio
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
from recordsync.metrics import EventOutcome, RoundEventMetrics
from recordsync.service.round_events.connections import DEFAULT_LIMITS, EventsLimits, guarded_h11
from recordsync.service.round_events.signature import (
    DEPENDENCY_UNAVAILABLE,
    MAX_BODY_BYTES,
    PAYLOAD_TOO_LARGE,
    REQUEST_TIMEOUT,
    Refusal,
    Request,
    accepted_body,
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
    ) -> None:
        """``secrets(merchant_id)``: the secrets a callback of that merchant may be signed
        with (None or empty: not a configured merchant); ``store`` raises
        ``WarehouseUnavailableError`` when the warehouse is down; ``wake`` is called for every
        newly stored event (not for a repeat)."""
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

    def too_large(self, request: Request, *, started: float) -> Reply:
        """The body passed 1 MiB (spec: Limits, "Body size"): 413 before anything else."""
        refusal = Refusal(413, PAYLOAD_TOO_LARGE, f"the body is larger than {MAX_BODY_BYTES} bytes")
        self._refused(request, refusal, self._configured(request), started)
        return Reply(refusal.status, error_body(refusal, self._request_ids()))

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
        log.warning(
            "round_event_refused",
            status=refusal.status,
            code=refusal.code,
            reason=refusal.message,
            merchant_id=merchant_id,
            method=request.method[:10],
            bytes=len(request.body),
        )


# -- the ASGI app and the server -------------------------------------------------------------


def asgi_app(
    receiver: RoundEventReceiver, *, body_timeout: float = DEFAULT_LIMITS.body_timeout
) -> Callable[..., Any]:
    """A raw ASGI app for ``receiver``: reads the body (at most 1 MiB, within
    ``body_timeout`` seconds of the head), hands the request to a worker thread, sends the
    reply uncompressed.  A client gone before its body ended gets no reply and is not a
    request: nothing is verified, counted or logged above debug for it."""

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
        try:
            body = await asyncio.wait_for(_read_body(receive, headers), body_timeout)
        except TimeoutError:
            body = _Unread.TIMED_OUT
        if body is _Unread.GONE:
            log.debug("round_event_abandoned", reason="the client closed before its body ended")
            return
        request = Request(
            scope["method"], target, headers, body if isinstance(body, bytes) else b""
        )
        started = time.perf_counter()
        if body is _Unread.TOO_LARGE:
            reply = receiver.too_large(request, started=started)
        elif body is _Unread.TIMED_OUT:
            reply = receiver.timed_out(request, started=started, seconds=body_timeout)
        else:
            reply = await asyncio.to_thread(receiver.handle, request, started=started)
        await send(
            {"type": "http.response.start", "status": reply.status, "headers": reply.headers()}
        )
        await send({"type": "http.response.body", "body": reply.body})

    return app


class _Unread(enum.Enum):
    """Why there is no body to verify."""

    TOO_LARGE = enum.auto()
    TIMED_OUT = enum.auto()
    GONE = enum.auto()


async def _read_body(receive: Any, headers: dict[str, list[str]]) -> bytes | _Unread:
    declared = headers.get("content-length", ["0"])[0]
    # ASCII digits only ("²" is a digit to str.isdigit, not to int), and a length past any
    # body's refused by its digits before int() (which refuses more than 4,300 of them).
    if (
        declared.isascii()
        and declared.isdigit()
        and (len(declared) > len(str(MAX_BODY_BYTES)) or int(declared) > MAX_BODY_BYTES)
    ):
        return _Unread.TOO_LARGE  # refused on the declared length, before a byte is read
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


class EventsServer:
    """``app`` served by uvicorn on ``host:port`` in a thread of its own; a context manager.

    The socket is bound at ``start`` (so a port in use fails the start, in the caller's
    thread); port 0 takes a free one, read back from ``port``.  ``limits`` bound the
    connections and threads (give ``app`` the same ``body_timeout``).
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
            # A backstop only: uvicorn counts idle and closing connections too and answers the
            # next request 503 at its limit; the guard keeps the open ones at max_connections.
            limit_concurrency=2 * limits.max_connections,
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
