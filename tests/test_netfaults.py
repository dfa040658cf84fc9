"""The tests' fault-injecting proxy does what the fleet tests rely on: bytes pass, a blackhole
stops them both ways without a reset until healed, a freeze lands right after a chosen
chunk, latency delays, and a reset is a reset."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from support.netfaults import FaultProxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the proxy resets it in one test
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()
    stop.set()
    thread.join(5)
    server.close()


def connected(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    sock.settimeout(2)
    return sock


def test_bytes_pass_and_a_blackhole_holds_them_without_a_reset_until_healed(echo):
    with FaultProxy(echo) as proxy, connected(proxy) as sock:
        sock.sendall(b"hello")
        assert sock.recv(100) == b"hello"
        proxy.blackhole()
        sock.sendall(b"held")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(100)
        proxy.heal()
        sock.settimeout(2)
        assert sock.recv(100) == b"held"


def test_a_freeze_lands_right_after_the_chunk_that_matches(echo):
    with FaultProxy(echo) as proxy, connected(proxy) as sock:
        proxy.freeze_when(b"FOR SHARE")
        sock.sendall(b"SELECT 1")
        assert sock.recv(100) == b"SELECT 1"
        sock.sendall(b"SELECT epoch FOR SHARE")
        time.sleep(0.2)
        assert proxy.cut
        assert proxy.frozen_at is not None
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):  # its answer is held, as the rest
            sock.recv(100)


def test_latency_delays_every_chunk(echo):
    with FaultProxy(echo) as proxy, connected(proxy) as sock:
        proxy.latency(0.2)
        started = time.monotonic()
        sock.sendall(b"slow")
        assert sock.recv(100) == b"slow"
        assert time.monotonic() - started >= 0.4  # there and back


def test_a_reset_is_seen_as_a_reset(echo):
    with FaultProxy(echo) as proxy, connected(proxy) as sock:
        sock.sendall(b"x")
        assert sock.recv(100) == b"x"
        proxy.reset_all()
        time.sleep(0.1)
        with pytest.raises(ConnectionResetError):
            sock.recv(100)
