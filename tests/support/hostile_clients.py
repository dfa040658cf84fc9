"""Clients that open connections and never finish a request: the tester's flood, as helpers.

Every socket is non-blocking and belongs to a ``Flood``, which closes them all (or resets
them) when done; ``closed_by_server`` tells which the server has let go of.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

HALF_HEAD = b"POST /v1/round-events HTTP/1.1\r\nHost: x\r\nX-Merchant-Id: m-1\r\n"
SLOW_BODY_HEAD = (
    b"POST /v1/round-events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n{"
)
KINDS = {"idle": b"", "half-head": HALF_HEAD, "slow-body": SLOW_BODY_HEAD}


def thread_count() -> int:
    """The process's threads as the kernel counts them (Python's and any other)."""
    return len(list(Path("/proc/self/task").iterdir()))


def wait_until(condition: Callable[[], bool], timeout: float, step: float = 0.02) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"not within {timeout} s"
        time.sleep(step)
    return time.monotonic() - started


class Flood:
    """Connections to ``port`` opened by ``open``; each sent its kind's bytes, no more."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sockets: dict[str, list[socket.socket]] = {kind: [] for kind in KINDS}

    def open(self, kind: str, count: int) -> list[socket.socket]:
        opened = []
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            if KINDS[kind]:
                sock.sendall(KINDS[kind])
            sock.setblocking(False)
            opened.append(sock)
        self.sockets[kind] += opened
        return opened

    def trickle(self) -> None:
        """One more byte on every slow body still open (a client that never stops)."""
        for sock in self.sockets["slow-body"]:
            with suppress(OSError):  # let go by the server already
                sock.send(b" ")

    def trickle_heads(self) -> None:
        """One more header line on every half-sent head still open."""
        for sock in self.sockets["half-head"]:
            with suppress(OSError):  # let go by the server already
                sock.send(b"X-More: 1\r\n")

    def every(self) -> list[socket.socket]:
        return [sock for socks in self.sockets.values() for sock in socks]

    def reset(self) -> None:
        """Close every socket with a TCP reset, as a client that crashed."""
        for sock in self.every():
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()

    def close(self) -> None:
        for sock in self.every():
            sock.close()


@contextmanager
def flood(port: int) -> Iterator[Flood]:
    opened = Flood(port)
    try:
        yield opened
    finally:
        opened.close()


def closed_by_server(sock: socket.socket) -> bool:
    """The server closed (or reset) ``sock``; what it sent before is read and dropped."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def received(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends on ``sock`` until it closes it, within ``timeout``."""
    sock.setblocking(True)
    sock.settimeout(timeout)
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)
