"""Clients that open connections and never finish a request: the tester's flood, as helpers.

Every socket is non-blocking and belongs to a ``Flood``, which closes them all (or resets
them) when done; ``closed_by_server`` tells which the server has let go of.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

HALF_HEAD = b"POST /v1/round-events HTTP/1.1\r\nHost: x\r\nX-Merchant-Id: m-1\r\n"


def slow_body_head(merchant_id: str) -> bytes:
    """The start of a request whose head passes what the head alone decides (a configured
    merchant, a fresh timestamp, a well-formed signature), so its body is waited for."""
    return (
        b"POST /v1/round-events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"X-Merchant-Id: " + merchant_id.encode() + b"\r\n"
        b"X-Timestamp: " + str(int(time.time())).encode() + b"\r\n"
        b"X-Signature: " + b"0" * 64 + b"\r\nContent-Length: 1000\r\n\r\n{"
    )


KINDS: dict[str, Callable[[str], bytes]] = {
    "idle": lambda _merchant_id: b"",
    "half-head": lambda _merchant_id: HALF_HEAD,
    "slow-body": slow_body_head,
}


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
    """Connections to ``port`` opened by ``open``; each sent its kind's bytes, no more (a slow
    body names ``merchant_id``, a configured merchant of the server)."""

    def __init__(self, port: int, merchant_id: str = "m-1") -> None:
        self.port = port
        self.merchant_id = merchant_id
        self.sockets: dict[str, list[socket.socket]] = {kind: [] for kind in KINDS}

    def open(self, kind: str, count: int) -> list[socket.socket]:
        opened = []
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            if sent := KINDS[kind](self.merchant_id):
                sock.sendall(sent)
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
def flood(port: int, merchant_id: str = "m-1") -> Iterator[Flood]:
    opened = Flood(port, merchant_id)
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


def memory_kib(pid: int, field: str = "VmRSS") -> int:
    """A process's resident memory (``VmRSS``) or its peak (``VmHWM``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def reset_peak_memory(pid: int) -> None:
    """Start ``VmHWM`` again from the current resident size (Linux 4.0 and later)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def send_bodies(port: int, count: int, head: bytes, body_size: int, timeout: float) -> int:
    """``count`` connections each sending ``head`` and then ``body_size`` bytes as fast as the
    server takes them, all at once; returns how many sent their body whole before the
    server let them go (or ``timeout`` passed)."""
    body = memoryview(b"x" * body_size)
    left: dict[socket.socket, int] = {}
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(head)
        sock.setblocking(False)
        left[sock] = 0
    whole: list[socket.socket] = []  # kept open: a stranger does not hang up
    deadline = time.monotonic() + timeout
    try:
        while left and time.monotonic() < deadline:
            _, writable, _ = select.select([], list(left), [], 0.1)
            for sock in writable:
                try:
                    sent = sock.send(body[left[sock] : left[sock] + 65536])
                except BlockingIOError:
                    continue
                except OSError:  # refused and closed by the server
                    del left[sock]
                    sock.close()
                    continue
                left[sock] += sent
                if left[sock] == body_size:
                    whole.append(sock)
                    del left[sock]
    finally:
        for sock in [*left, *whole]:
            sock.close()
    return len(whole)
