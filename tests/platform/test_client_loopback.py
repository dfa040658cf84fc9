"""Over a real loopback socket: the request line carries exactly the signed target.

The server is a few lines of raw TCP so nothing between the client and the bytes on the wire
(no HTTP library on the server side) can normalise the target before we look at it.
"""

import contextlib
import hashlib
import hmac
import socket
import threading
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from recordsync.core.errors import ProtocolError
from recordsync.core.secret import Secret
from recordsync.platform.budget import RateBudget
from recordsync.platform.client import PlatformClient
from recordsync.platform.retry import RetryPolicy

SECRET = "loopback-secret-0123456789-abcdefghijklmnopq"
MERCHANT = "merchant-loop"
AWKWARD = "2026-01-01T00:00:00+05:30 a/b:c+d e"

CHANGES = {"items": [], "next_cursor": "n", "has_more": False}
RECORDS = {"items": [], "next_cursor": None, "has_more": False, "snapshot_watermark": "0"}


class RawServer:
    """Reads request lines and headers, verifies the signature, answers a JSON envelope."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.seen = []  # (target, signature valid, timestamp)
        self.truncate_next = 0
        self.lock = threading.Lock()
        self.threads = []
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _serve(self, conn):
        with contextlib.suppress(OSError):  # the client hung up first: nothing to answer
            self._exchange(conn)

    def _exchange(self, conn):
        with conn, conn.makefile("rb") as stream:
            while True:
                request_line = stream.readline()
                if not request_line:
                    return
                headers = {}
                while (line := stream.readline()) not in {b"\r\n", b"\n", b""}:
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                method, target, _version = request_line.decode("latin-1").split(" ")
                timestamp = headers.get("x-timestamp", "")
                message = f"{timestamp}\n{method}\n{target}\n\n\n".encode()
                expected = hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()
                valid = hmac.compare_digest(expected, headers.get("x-signature", ""))
                with self.lock:
                    self.seen.append((target, valid, headers.get("x-merchant-id")))
                    truncate = self.truncate_next > 0
                    self.truncate_next -= 1
                data = RECORDS if target.split("?")[0].endswith("/records") else CHANGES
                body = orjson.dumps({"data": data, "request_id": f"req-{len(self.seen)}"})
                head = (
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                ).encode()
                if truncate:  # promise the whole body, send half of it, hang up
                    conn.sendall(head + body[: len(body) // 2])
                    return
                conn.sendall(head + body)

    def close(self):
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.listener.close()
        self.acceptor.join(timeout=5)
        for thread in self.threads:
            thread.join(timeout=5)


@pytest.fixture
def server():
    raw = RawServer()
    yield raw
    raw.close()


def client_for(server, base_path="", **kwargs):
    return PlatformClient(
        base_url=f"http://127.0.0.1:{server.port}{base_path}",
        merchant_id=MERCHANT,
        secret=Secret(SECRET),
        budget=RateBudget(1000, 1.0),
        timeout=5.0,
        connect_timeout=5.0,
        **kwargs,
    )


@pytest.mark.parametrize("base_path", ["", "/api/v9"], ids=["root", "path-prefix"])
def test_the_request_line_carries_exactly_the_signed_target(server, base_path):
    start = datetime(2026, 1, 1, 5, 30, tzinfo=UTC)
    with client_for(server, base_path) as client:
        client.records_first(start, start + timedelta(hours=24), limit=1000)
        client.records_next(AWKWARD, limit=7)
        client.changes(cursor=AWKWARD, limit=3)
        client.changes(since=start, limit=1)
        client.changes(from_now=True, limit=1)
    targets = [target for target, _, _ in server.seen]
    assert all(valid for _, valid, _ in server.seen), server.seen
    assert all(merchant == MERCHANT for _, _, merchant in server.seen)
    encoded = "2026-01-01T00%3A00%3A00%2B05%3A30%20a%2Fb%3Ac%2Bd%20e"
    assert targets == [
        (
            f"{base_path}/v1/records?created_from=2026-01-01T05%3A30%3A00.000Z"
            "&created_to=2026-01-02T05%3A30%3A00.000Z&limit=1000"
        ),
        f"{base_path}/v1/records?cursor={encoded}&limit=7",
        f"{base_path}/v1/record-changes?cursor={encoded}&limit=3",
        f"{base_path}/v1/record-changes?since=2026-01-01T05%3A30%3A00.000Z&limit=1",
        f"{base_path}/v1/record-changes?from_now=true&limit=1",
    ]


def test_a_truncated_body_on_the_wire_is_retried(server):
    server.truncate_next = 1
    with client_for(server, retry=RetryPolicy(base_delay=0.0)) as client:
        page = client.changes(cursor="c", limit=1)
    assert page.next_cursor == "n"
    assert len(server.seen) == 2
    assert all(valid for _, valid, _ in server.seen)


def test_a_truncated_body_is_a_protocol_error_when_no_retry_is_left(server):
    server.truncate_next = 1
    with (
        client_for(server, retry=RetryPolicy(max_attempts=1)) as client,
        pytest.raises(ProtocolError, match="RemoteProtocolError"),
    ):
        client.changes(cursor="c", limit=1)
