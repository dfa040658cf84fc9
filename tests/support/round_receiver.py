"""A tiny merchant receiver for the round-end tests: stdlib http.server on loopback.

It records every request exactly as received (raw target, headers, raw body) and answers with
whatever the test's script says for that attempt; by default a clean acceptance.  It verifies
nothing itself: the tests check the signatures, so a receiver bug cannot hide a sender bug.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from recordsync.platform.signing import sign


@dataclass(frozen=True)
class Received:
    method: str
    target: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    at: float  # time.monotonic() on arrival

    @property
    def event(self) -> dict[str, Any]:
        return orjson.loads(self.body)

    def signed_with(self, secret: str) -> bool:
        expected = sign(
            secret,
            timestamp=self.headers["x-timestamp"],
            method=self.method,
            target=self.target,
            idempotency_key=self.headers.get("idempotency-key"),
            if_match=self.headers.get("if-match"),
            body=self.body,
        )
        return expected == self.headers["x-signature"]


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes | None = None  # None: a clean acceptance of the event received
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)
    delay: float = 0.0  # seconds to wait before answering (a timeout when long enough)


def acceptance(event_id: str, **extra: Any) -> bytes:
    return orjson.dumps(
        {
            "data": {"event_id": event_id, "accepted_at": "2026-01-02T03:04:05.678Z"},
            "request_id": "req-1",
            **extra,
        }
    )


Script = Callable[[Received, int], Answer]  # (request, its number from 1) -> answer


@dataclass
class Receiver:
    url: str
    script: Script = field(default=lambda request, number: Answer())
    requests: list[Received] = field(default_factory=list)
    on_request: Callable[[], None] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [request.event for request in self.requests]

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.005)
        raise AssertionError(f"expected {count} requests, got {len(self.requests)}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        received = Received(
            self.command,
            self.path,
            {name.lower(): value for name, value in self.headers.items()},
            body,
            time.monotonic(),
        )
        receiver = self.server.receiver
        with receiver.lock:
            receiver.requests.append(received)
            number = len(receiver.requests)
        if receiver.on_request is not None:
            receiver.on_request()
        answer = receiver.script(received, number)
        if answer.delay:
            time.sleep(answer.delay)
        reply = answer.body
        if reply is None:
            reply = acceptance(orjson.loads(body)["event_id"])
        self.send_response(answer.status)
        for name, value in answer.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        try:
            self.wfile.write(reply)
        except OSError:  # the sender timed out and went away
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    receiver: Receiver


@contextmanager
def running_receiver(script: Script | None = None) -> Iterator[Receiver]:
    server = _Server(("127.0.0.1", 0), _Handler)
    host, port = server.server_address[:2]
    receiver = Receiver(url=f"http://{host!s}:{port}")
    if script is not None:
        receiver.script = script
    server.receiver = receiver
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
