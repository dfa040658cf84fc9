"""A small HTTP/1.x server whose threads and connections are bounded, for the probe port.

The standard library's ``ThreadingHTTPServer`` starts a thread per connection and leaves it
blocked reading the request head for as long as the client likes: a thousand half-sent
heads were a thousand threads, and each reset one printed a traceback on stderr.  Here one
thread (``name``) accepts and reads request heads without blocking, for every connection at
once, under a deadline and a size limit; only a complete head reaches one of ``workers``
threads, which answers it and closes the connection (one request per connection: probes and
scrapes open a new one each time).  So a client that never finishes its head holds a socket
for ``head_timeout`` at most and never a thread.  At ``max_connections`` a new connection
closes the oldest one still sending its head; when every connection has its head in (queued
for a worker or being answered), the newcomer is closed at once.  Broken connections are
dropped with a debug log line, never a traceback.

``respond`` is called on a worker thread with the parsed head and returns the answer; a
request with a body is answered without reading it (the probe endpoints take none).
"""

from __future__ import annotations

import contextlib
import queue
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

import structlog

_log = structlog.get_logger(__name__)

_HEAD_END: Final = re.compile(rb"\r?\n\r?\n")
_TICK_S: Final = 0.1  # how late a head deadline or a stop may be noticed


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """Deadlines and bounds; the reasons for the probe port's are in ``health``."""

    head_timeout: float
    write_timeout: float
    max_connections: int
    workers: int
    max_head_bytes: int
    backlog: int = 2048  # connections queued by the kernel (see round_events.connections)


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    target: str
    headers: Mapping[str, str]  # lower-case names; a repeated name keeps its last value


@dataclass(frozen=True, slots=True)
class Answer:
    status: HTTPStatus
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


def parse_head(raw: bytes) -> RequestHead | None:
    """The request line and header fields of a complete head, or None when it is not
    HTTP/1.x."""
    lines = raw.replace(b"\r\n", b"\n").split(b"\n")
    request_line = lines[0].split(b" ")
    if len(request_line) != 3 or not request_line[2].startswith(b"HTTP/1."):  # noqa: PLR2004
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            return None
        headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
    method, target = request_line[0].decode("latin-1"), request_line[1].decode("latin-1")
    return RequestHead(method, target, headers)


def encode_answer(answer: Answer) -> bytes:
    head = (
        f"HTTP/1.1 {answer.status.value} {answer.status.phrase}\r\n"
        f"Content-Type: {answer.content_type}\r\n"
        f"Content-Length: {len(answer.body)}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + answer.body


_BAD_REQUEST: Final = Answer(HTTPStatus.BAD_REQUEST, b"bad request\n")
_FAILED: Final = Answer(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n")


class _Pending:
    """A connection whose head is still arriving."""

    __slots__ = ("deadline", "head")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.head = bytearray()


class BoundedHTTPServer:
    """Serves ``respond`` on the bound, listening socket ``listener`` until ``stop``."""

    def __init__(
        self,
        listener: socket.socket,
        respond: Callable[[RequestHead], Answer],
        limits: HttpLimits,
        *,
        name: str,
    ) -> None:
        listener.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        self._listener = listener
        self._respond = respond
        self._limits = limits
        self._name = name
        self._selector = selectors.DefaultSelector()
        self._pending: dict[socket.socket, _Pending] = {}  # oldest first
        self._heads: queue.SimpleQueue[tuple[socket.socket, bytes] | None] = queue.SimpleQueue()
        self._answering = 0  # connections queued for or held by a worker
        self._answering_lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._threads = [threading.Thread(target=self._read_heads, name=self._name, daemon=True)]
        self._threads += [
            threading.Thread(target=self._answer, name=f"{self._name}-{n}", daemon=True)
            for n in range(self._limits.workers)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float) -> None:
        """Stop accepting, drop the heads still arriving, let the workers finish; safe twice."""
        self._stopping.set()
        for _ in range(self._limits.workers):
            self._heads.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []
        self._listener.close()

    # -- the reading thread ---------------------------------------------------------------------

    def _read_heads(self) -> None:
        while not self._stopping.is_set():
            for key, _events in self._selector.select(_TICK_S):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj in self._pending:  # not evicted by an accept of this round
                    assert isinstance(key.fileobj, socket.socket)
                    self._receive(key.fileobj)
            self._expire(time.monotonic())
        for conn in list(self._pending):
            self._drop(conn, "stopping")
        self._selector.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # the client reset before we accepted, or out of descriptors
                _log.debug("http_accept_failed", server=self._name, error=type(exc).__name__)
                return
            if len(self._pending) + self._answering >= self._limits.max_connections:
                if not self._pending:
                    _log.debug("http_connection_refused", server=self._name, reason="full")
                    _close(conn)
                    continue
                self._drop(next(iter(self._pending)), "evicted: connection limit")
            conn.setblocking(False)  # noqa: FBT003 - the socket API's own flag
            self._pending[conn] = _Pending(time.monotonic() + self._limits.head_timeout)
            self._selector.register(conn, selectors.EVENT_READ)

    def _receive(self, conn: socket.socket) -> None:
        pending = self._pending[conn]
        try:
            data = conn.recv(self._limits.max_head_bytes + 1 - len(pending.head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop(conn, type(exc).__name__)
            return
        if not data:
            self._drop(conn, "closed by the client")
            return
        pending.head += data
        end = _HEAD_END.search(pending.head)
        if end is None:
            if len(pending.head) > self._limits.max_head_bytes:
                self._drop(conn, "head too large")
            return
        self._selector.unregister(conn)
        del self._pending[conn]
        with self._answering_lock:
            self._answering += 1
        self._heads.put((conn, bytes(pending.head[: end.start()])))

    def _expire(self, now: float) -> None:
        for conn, pending in list(self._pending.items()):
            if pending.deadline > now:
                return  # the rest came later
            self._drop(conn, "head timed out")

    def _drop(self, conn: socket.socket, reason: str) -> None:
        _log.debug("http_connection_dropped", server=self._name, reason=reason)
        del self._pending[conn]
        self._selector.unregister(conn)
        _close(conn)

    # -- the workers ----------------------------------------------------------------------------

    def _answer(self) -> None:
        while (item := self._heads.get()) is not None:
            conn, raw = item
            try:
                self._answer_one(conn, raw)
            finally:
                _close(conn)
                with self._answering_lock:
                    self._answering -= 1

    def _answer_one(self, conn: socket.socket, raw: bytes) -> None:
        head = parse_head(raw)
        if head is None:
            answer = _BAD_REQUEST
        else:
            try:
                answer = self._respond(head)
            except Exception as exc:  # noqa: BLE001 - one failed answer must not stop the worker
                _log.error("http_answer_failed", server=self._name, error=type(exc).__name__)
                answer = _FAILED
        conn.settimeout(self._limits.write_timeout)
        try:
            conn.sendall(encode_answer(answer))
            conn.shutdown(socket.SHUT_WR)
        except OSError as exc:  # reset, or not reading within write_timeout
            _log.debug("http_connection_dropped", server=self._name, reason=type(exc).__name__)


def _close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):  # close() reports a reset since 3.6: nothing to do
        conn.close()
