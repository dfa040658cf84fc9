"""HTTP/1.1 with keep-alive over real sockets, in background threads; bytes in, bytes out.

The raw request target is handed on untouched (``BaseHTTPRequestHandler.path`` is the target
exactly as on the request line), because that is what the client signed.  A response is written
in one ``send`` (status line, headers and body together) with TCP_NODELAY, so a keep-alive
client never waits on Nagle's algorithm.  Nothing here redirects.

A request's arrival, which the rate limit counts, is when the kernel received its bytes
(SO_TIMESTAMPNS, on Linux), not when a handler thread got round to reading them: that thread
needs the GIL, which the engine's threads in a test's process, a page being rendered or a
collection of a large heap can hold for tens of milliseconds, and a real platform's front
door adds no such delay to what it counts.  Stamped late, a request the client spaced
correctly could be counted in the same second as a later one (an end-to-end test failed so
under load).
"""

from __future__ import annotations

import contextlib
import io
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from recordsync.sim.api import Action, Request, Response, SimulatedApi
from recordsync.sim.envelope import ApiError, RequestIds, error_body

_IDLE_TIMEOUT_SECONDS = 120.0
_READ_BUFFER_BYTES = 65536
_ALL_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


# Linux's SO_TIMESTAMPNS (asm-generic/socket.h), which Python's socket module does not name.
_SO_TIMESTAMPNS: int | None = 35 if sys.platform == "linux" else None
_TIMESPEC = struct.Struct("@qq")
_ANCILLARY_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)
# An age beyond this is a wall clock that jumped, not a request that waited: not trusted.
_MOST_BELIEVABLE_AGE_SECONDS = 60.0


class ArrivalReader(io.RawIOBase):
    """A connection's bytes, read with the moment the kernel received the last of them.

    The receive time is on the wall clock (the kernel knows no other for it), so it is used
    as an age: how long ago, measured now, the bytes arrived.
    """

    def __init__(self, connection: socket.socket, *, wall: Callable[[], float] = time.time) -> None:
        super().__init__()
        self._connection = connection
        self._wall = wall
        self._received_at: float | None = None
        if _SO_TIMESTAMPNS is not None:
            connection.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size, ancillary, _flags, _address = self._connection.recvmsg_into(
            [buffer], _ANCILLARY_SPACE
        )
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                seconds, nanoseconds = _TIMESPEC.unpack_from(data)
                self._received_at = seconds + nanoseconds / 1e9
        return size

    def age(self) -> float:
        """Seconds since the kernel received the bytes last read; 0 when it cannot tell."""
        if self._received_at is None:
            return 0.0
        age = self._wall() - self._received_at
        return age if 0.0 < age <= _MOST_BELIEVABLE_AGE_SECONDS else 0.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "recordsync-sim"
    sys_version = ""
    timeout = _IDLE_TIMEOUT_SECONDS
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._arrival: float | None = None
        self._reader = ArrivalReader(self.connection)
        self.rfile = io.BufferedReader(self._reader, _READ_BUFFER_BYTES)

    def parse_request(self) -> bool:
        # Called right after the request line is read: the request arrived when the kernel
        # received that line, ``age`` ago.
        self._arrival = self.server.api.arrival(self._reader.age())
        return super().parse_request()

    def _serve(self) -> None:
        api = self.server.api
        body = self._read_body()
        if body is None:
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        response = api.handle(
            Request(self.command, self.path, headers, body, arrival=self._arrival)
        )
        if response.action is Action.RESET:
            self._reset()
            return
        self._write(response)

    # One handler per method name, as BaseHTTPRequestHandler dispatches on ``do_<METHOD>``.
    def do_GET(self) -> None:
        self._serve()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET  # noqa: N815

    def _read_body(self) -> bytes | None:
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        limit = self.server.api.config.max_body_bytes
        if not raw.isdigit():
            self._refuse(ApiError(400, "VALIDATION_FAILED", "bad Content-Length"))
            return None
        if int(raw) > limit:
            self._refuse(ApiError(413, "PAYLOAD_TOO_LARGE", "the body is larger than 1 MiB"))
            return None
        return self.rfile.read(int(raw))

    def _refuse(self, error: ApiError) -> None:
        self.close_connection = True
        self._write(Response(error.status, error_body(error, self.server.request_ids.next())))

    def _write(self, response: Response) -> None:
        body = response.body
        lines = [
            f"HTTP/1.1 {response.status} {_reason(response.status)}",
            f"Date: {formatdate(usegmt=True)}",
            f"Server: {self.server_version}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(body)}",
        ]
        lines.extend(f"{name}: {value}" for name, value in response.headers)
        short = response.action is Action.SHORT_BODY
        if short or self.close_connection:
            lines.append("Connection: close")
            self.close_connection = True
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if self.command == "HEAD":
            body = b""
        elif short:
            body = body[: len(body) // 2]
        self.wfile.write(head + body)

    def _reset(self) -> None:
        """Close abruptly: SO_LINGER 0 makes the close send RST instead of FIN."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.server.reset_requested(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: the simulator's own statistics say what happened."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    # Replicas started together, snapshots in parallel, a test's burst: their connections wait
    # in the kernel's queue.  socketserver's default of 5 drops a handshake past it, and its
    # client sends it again only after 1 s: a delay no platform adds (a 1 s "slow answer").
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], api: SimulatedApi) -> None:
        self.api = api
        self.request_ids = RequestIds()
        self._open: set[socket.socket] = set()
        self._reset: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # Set on the listener, so a connection has it from its first byte on, even before a
        # handler thread gets to it: the kernel stamps only what arrives once it is set.
        if _SO_TIMESTAMPNS is not None:
            self.socket.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def reset_requested(self, connection: socket.socket) -> None:
        with self._open_lock:
            self._reset.add(connection)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
            reset = request in self._reset
            self._reset.discard(request)
        if reset:
            request.close()  # no shutdown(SHUT_WR) first: that would send FIN, not RST
        else:
            super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that goes away mid-request is normal here; nothing to print."""

    def close_connections(self) -> None:
        """Wake the threads waiting on idle keep-alive connections so they end."""
        with self._open_lock:
            connections = list(self._open)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class HttpServer:
    """Serves a ``SimulatedApi`` on a host and port until ``stop``."""

    def __init__(self, api: SimulatedApi, host: str, port: int) -> None:
        self._server = _Server((host, port), api)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="recordsync-sim-http",
            daemon=True,
        )
        self._stopped = False

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()
        self._thread.join(timeout=5)
