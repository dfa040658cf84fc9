"""A small HTTP/1.x server whose threads, connections and answers are bounded, for the probe
port.

The standard library's ``ThreadingHTTPServer`` starts a thread per connection and leaves it
blocked reading the request head for as long as the client likes: a thousand half-sent
heads were a thousand threads, and each reset one printed a traceback on stderr.  Here one
thread (``name``) does all the socket I/O without blocking, for every connection at once:
it accepts, reads request heads under a deadline and a size limit, and writes answers under
a deadline too.  One request per connection (probes and scrapes open a new one each time).

``respond`` is called on that thread with the parsed head and must not block: it returns an
``Answer`` written at once (``/healthz``), or ``Work`` to be computed on one of its lane's
threads (``/readyz``, ``/metrics``).  A lane has as many answers in flight as it has threads,
counted from the head to the last byte written: past that a request gets the work's
``busy`` answer at once, so clients that never read an answer hold a lane's few slots for
``write_timeout`` at most and nobody else's.  Nothing waits for another client: a head is
answered as soon as it is in, a slow reader only delays its own answer.

At ``max_connections`` a new connection closes the oldest one still sending its head, or
else the oldest one whose answer is not being read; when every connection has its answer
being computed, the newcomer is closed at once.  Broken connections are dropped with a debug
log line, never a traceback.  A request with a body is answered without reading it (the
probe endpoints take none).
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
    write_timeout: float  # from the answer's being ready to its last byte written
    max_connections: int
    max_head_bytes: int
    lanes: Mapping[str, int]  # lane name -> its threads, and its answers in flight at once
    backlog: int = 2048  # connections queued by the kernel (see round_events.connections)

    @property
    def workers(self) -> int:
        """The threads beside the one doing the I/O."""
        return sum(self.lanes.values())


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


@dataclass(frozen=True, slots=True)
class Work:
    """An answer that takes time: ``compute`` runs on one of ``lane``'s threads; ``busy`` is
    the answer when the lane has all its answers in flight already."""

    lane: str
    compute: Callable[[], Answer]
    busy: Answer


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


class _Writing:
    """A connection whose answer is being written."""

    __slots__ = ("data", "deadline", "lane")

    def __init__(self, data: bytes, deadline: float, lane: str | None) -> None:
        self.data = memoryview(data)
        self.deadline = deadline
        self.lane = lane


class BoundedHTTPServer:
    """Serves ``respond`` on the bound, listening socket ``listener`` until ``stop``."""

    def __init__(
        self,
        listener: socket.socket,
        respond: Callable[[RequestHead], Answer | Work],
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
        # Every connection is in exactly one of these, each oldest first; only the I/O thread
        # touches them.
        self._pending: dict[socket.socket, _Pending] = {}
        self._working: dict[socket.socket, str] = {}  # its answer computed on this lane
        self._writing: dict[socket.socket, _Writing] = {}
        self._in_flight = dict.fromkeys(limits.lanes, 0)  # working or writing, per lane
        self._work: dict[str, queue.SimpleQueue[tuple[socket.socket, Work] | None]] = {
            lane: queue.SimpleQueue() for lane in limits.lanes
        }
        self._done: queue.SimpleQueue[tuple[socket.socket, Answer]] = queue.SimpleQueue()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        self._wake_write.setblocking(False)  # noqa: FBT003 - the socket API's own flag
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._threads = [threading.Thread(target=self._serve, name=self._name, daemon=True)]
        self._threads += [
            threading.Thread(target=self._answer, args=(lane,), name=f"{self._name}-{lane}-{n}")
            for lane, threads in self._limits.lanes.items()
            for n in range(threads)
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    def stop(self, timeout: float) -> None:
        """Stop accepting, drop the connections in hand, let the workers finish; safe twice."""
        self._stopping.set()
        self._wake()
        for lane, threads in self._limits.lanes.items():
            for _ in range(threads):
                self._work[lane].put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []
        self._listener.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: it is woken already; closed: stopped
            self._wake_write.send(b"x")

    # -- the I/O thread ---------------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stopping.is_set():
            for key, _events in self._selector.select(_TICK_S):
                conn = key.fileobj
                assert isinstance(conn, socket.socket)
                if conn is self._listener:
                    self._accept()
                elif conn is self._wake_read:
                    with contextlib.suppress(OSError):
                        conn.recv(4096)
                elif conn in self._pending:  # not evicted by an accept of this round
                    self._receive(conn)
                elif conn in self._writing:
                    self._write(conn)
            self._take_answers()
            self._expire(time.monotonic())
        for conn in [*self._pending, *self._working, *self._writing]:
            self._drop(conn, "stopping")
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # the client reset before we accepted, or out of descriptors
                _log.debug("http_accept_failed", server=self._name, error=type(exc).__name__)
                return
            held = len(self._pending) + len(self._working) + len(self._writing)
            if held >= self._limits.max_connections:
                if self._pending:
                    self._drop(next(iter(self._pending)), "evicted: connection limit")
                elif self._writing:
                    self._drop(next(iter(self._writing)), "evicted: answer not read")
                else:
                    _log.debug("http_connection_refused", server=self._name, reason="full")
                    _close(conn)
                    continue
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
        self._route(conn, bytes(pending.head[: end.start()]))

    def _route(self, conn: socket.socket, raw: bytes) -> None:
        head = parse_head(raw)
        if head is None:
            self._start_writing(conn, _BAD_REQUEST, None)
            return
        try:
            answer = self._respond(head)
        except Exception as exc:  # noqa: BLE001 - one failed answer must not stop the server
            _log.error("http_answer_failed", server=self._name, error=type(exc).__name__)
            answer = _FAILED
        if isinstance(answer, Answer):
            self._start_writing(conn, answer, None)
        elif self._in_flight[answer.lane] >= self._limits.lanes[answer.lane]:
            self._start_writing(conn, answer.busy, None)
        else:
            self._in_flight[answer.lane] += 1
            self._working[conn] = answer.lane
            self._work[answer.lane].put((conn, answer))

    def _take_answers(self) -> None:
        while True:
            try:
                conn, answer = self._done.get_nowait()
            except queue.Empty:
                return
            lane = self._working.pop(conn, None)
            if lane is not None:  # else dropped meanwhile (stopping)
                self._start_writing(conn, answer, lane)

    def _start_writing(self, conn: socket.socket, answer: Answer, lane: str | None) -> None:
        deadline = time.monotonic() + self._limits.write_timeout
        self._writing[conn] = _Writing(encode_answer(answer), deadline, lane)
        self._selector.register(conn, selectors.EVENT_WRITE)
        self._write(conn)  # most answers fit in the socket's buffer at once

    def _write(self, conn: socket.socket) -> None:
        writing = self._writing[conn]
        try:
            sent = conn.send(writing.data)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # reset by the client
            self._drop(conn, type(exc).__name__)
            return
        writing.data = writing.data[sent:]
        if writing.data:
            return
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
        self._forget(conn)
        _close(conn)

    def _expire(self, now: float) -> None:
        for conn, pending in list(self._pending.items()):
            if pending.deadline > now:
                break  # the rest came later
            self._drop(conn, "head timed out")
        for conn, writing in list(self._writing.items()):
            if writing.deadline > now:
                break
            self._drop(conn, "answer not read in time")

    def _drop(self, conn: socket.socket, reason: str) -> None:
        _log.debug("http_connection_dropped", server=self._name, reason=reason)
        self._forget(conn)
        _close(conn)

    def _forget(self, conn: socket.socket) -> None:
        if self._pending.pop(conn, None) is not None:
            self._selector.unregister(conn)
            return
        writing = self._writing.pop(conn, None)
        if writing is not None:
            self._selector.unregister(conn)
            lane = writing.lane
        else:
            lane = self._working.pop(conn, None)
        if lane is not None:
            self._in_flight[lane] -= 1

    # -- the lanes' workers ----------------------------------------------------------------------

    def _answer(self, lane: str) -> None:
        while (item := self._work[lane].get()) is not None:
            conn, work = item
            try:
                answer = work.compute()
            except Exception as exc:  # noqa: BLE001 - one failed answer must not stop the lane
                _log.error("http_answer_failed", server=self._name, error=type(exc).__name__)
                answer = _FAILED
            self._done.put((conn, answer))
            self._wake()


def _close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):  # close() reports a reset since 3.6: nothing to do
        conn.close()
