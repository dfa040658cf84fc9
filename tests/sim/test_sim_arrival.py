"""The simulator counts a request when it arrived at its door, not when a handler got to it.

Two merchants share one keep-alive connection with pipelined requests (legal HTTP/1.1): the
first merchant's request takes half a second to answer (injected latency), and the second
merchant's request, which arrived with it, waits in the connection meanwhile.  Its merchant
then sends one more request 1.1 s after the first arrived: one a second is what that merchant
may send, and a platform that counts arrivals admits it.  Stamped when the handler reads it,
the waiting request would look 0.5 s younger and the second one a violation.
"""

from __future__ import annotations

import socket
import time

from recordsync.platform.signing import build_target, format_timestamp, sign
from recordsync.sim import FaultRates, MerchantProfile, SimConfig, running_simulator
from recordsync.sim.server import ArrivalReader

SLOW_SECRET = "slow-secret-0123456789-abcdefghijklmnopqrstu"
PACED_SECRET = "paced-secret-0123456789-abcdefghijklmnopqrst"
LATENCY_SECONDS = 0.5


def signed_request(merchant_id: str, secret: str, host: str) -> bytes:
    target = build_target("/v1/record-changes", [("from_now", "true"), ("limit", "10")])
    timestamp = format_timestamp(time.time())
    signature = sign(secret, timestamp=timestamp, method="GET", target=target)
    return (
        f"GET {target} HTTP/1.1\r\nHost: {host}\r\nX-Merchant-Id: {merchant_id}\r\n"
        f"X-Timestamp: {timestamp}\r\nX-Signature: {signature}\r\n\r\n"
    ).encode("ascii")


def read_statuses(connection: socket.socket, count: int) -> list[int]:
    """The status codes of ``count`` answers on ``connection`` (each has a Content-Length)."""
    statuses: list[int] = []
    with connection.makefile("rb") as stream:
        for _ in range(count):
            status_line = stream.readline()
            statuses.append(int(status_line.split()[1]))
            length = 0
            while (line := stream.readline()) not in {b"\r\n", b""}:
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            stream.read(length)
    return statuses


def test_a_request_waiting_behind_a_slow_one_is_counted_when_it_arrived():
    config = SimConfig(
        merchant_id="m-slow",
        secret=SLOW_SECRET,
        history_days=0.0,
        faults=FaultRates(latency_ms=LATENCY_SECONDS * 1000),
        merchants=(
            MerchantProfile(
                merchant_id="m-paced",
                secret=PACED_SECRET,
                history_days=0.0,
                record_requests=1,
                record_seconds=1,
            ),
        ),
    )
    with running_simulator(config) as sim:
        host, port = sim.base_url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as first:
            first.sendall(
                signed_request("m-slow", SLOW_SECRET, host)
                + signed_request("m-paced", PACED_SECRET, host)
            )
            arrived = time.monotonic()
            assert read_statuses(first, 2) == [200, 200]
        time.sleep(max(0.0, arrived + 1.1 - time.monotonic()))
        with socket.create_connection((host, int(port))) as second:
            second.sendall(signed_request("m-paced", PACED_SECRET, host))
            assert read_statuses(second, 1) == [200]
        assert sim.stats().rate_limit_violations == 0


def test_the_reader_tells_how_long_ago_the_kernel_received_the_bytes():
    listener = socket.create_server(("127.0.0.1", 0))
    with listener, socket.create_connection(listener.getsockname()) as sender:
        receiver, _ = listener.accept()
        with receiver:
            reader = ArrivalReader(receiver)
            assert reader.age() == 0.0  # nothing read yet: it cannot tell
            sender.sendall(b"GET / HTTP/1.1\r\n\r\n")
            time.sleep(0.2)
            buffer = bytearray(64)
            assert reader.readinto(buffer) == 18
            assert 0.2 <= reader.age() < 5.0
