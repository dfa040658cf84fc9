"""What a stranger can make either port hold: memory on the notification port, the
probe port's answers to everyone else.

The notification port refuses on the head what the head already decides (no configured
merchant, a missing, stale or malformed timestamp or signature) before a byte of the body is
read, and holds at most a fixed number of bytes of bodies not yet verified; the probe port
answers ``/healthz`` whatever ``/metrics`` readers do."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry
from support.guarded_servers import events_server, health_server, large_registry
from support.hostile_clients import (
    flood,
    memory_kib,
    received,
    reset_peak_memory,
    send_bodies,
    wait_until,
)
from support.round_event_requests import MERCHANT, event_body, post_event

from recordsync.metrics import Metrics, RoundEventMetricName
from recordsync.service.ports.bounded_http import HttpLimits
from recordsync.service.ports.health import PROBE_LIMITS
from recordsync.service.ports.round_events.connections import EventsLimits
from recordsync.service.ports.round_events.refusals import RefusalLog

STRANGERS = 250
MIB = 1024 * 1024
STRANGER_HEAD = (
    b"POST /v1/round-events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"X-Merchant-Id: nobody\r\nX-Timestamp: 1795000000\r\nX-Signature: " + b"0" * 64 + b"\r\n"
    b"Content-Length: " + str(MIB).encode() + b"\r\n\r\n"
)


def test_strangers_bodies_take_no_memory_and_keep_neither_the_platform_nor_the_log_out():
    """250 connections each sending a 1 MiB body for no configured merchant, to the servers in
    a process of their own: its peak resident memory grows by less than 20 MiB, a signed
    notification sent meanwhile is answered 200 within a second, and the log holds a bounded
    number of refusal lines.  Printed (``-s``): the figures."""
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "support.guarded_servers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=Path(__file__).parents[1],
        )
        try:
            assert server.stdout is not None
            events_port, _probe_port = (int(port) for port in server.stdout.readline().split())
            time.sleep(0.5)  # settled after start-up
            before = memory_kib(server.pid)
            reset_peak_memory(server.pid)
            flooding = threading.Thread(
                target=send_bodies, args=(events_port, STRANGERS, STRANGER_HEAD, MIB, 15)
            )
            flooding.start()
            time.sleep(0.3)
            with httpx.Client(base_url=f"http://127.0.0.1:{events_port}", timeout=10) as platform:
                started = time.monotonic()
                reply = post_event(platform, event_body("ev-meanwhile"), now=time.time())
                answered = time.monotonic() - started
            flooding.join()
            peak = memory_kib(server.pid, "VmHWM")
        finally:
            server.communicate(timeout=20)
        log.seek(0)
        refusals = [line for line in log if json.loads(line)["event"] == "round_event_refused"]
    growth = (peak - before) / 1024
    print(  # noqa: T201 - the figures for bench/README.md and the issue
        f"\nRSS {before / 1024:.0f} MiB before, peak {peak / 1024:.0f} MiB (+{growth:.0f} MiB); "
        "signed notification answered "
        f"{reply.status_code} in {answered * 1000:.0f} ms; refusal lines: {len(refusals)}"
    )
    assert reply.status_code == 200
    assert answered < 1.0
    assert growth < 20
    assert len(refusals) <= 5


def head(**fields: str) -> bytes:
    """A request head with ``fields`` (None-valued left out) and a 1000-byte body to come."""
    lines = [
        "POST /v1/round-events HTTP/1.1",
        "Host: x",
        "Content-Type: application/json",
        "Content-Length: 1000",
    ]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in fields.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def fresh() -> str:
    return str(int(time.time()))


GOOD_SIGNATURE = "0" * 64


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"X_Merchant_Id": "nobody", "X_Timestamp": "now", "X_Signature": GOOD_SIGNATURE}, "AUTH"),
        ({"X_Timestamp": "now", "X_Signature": GOOD_SIGNATURE}, "AUTH"),
        ({"X_Merchant_Id": MERCHANT, "X_Signature": GOOD_SIGNATURE}, "EXPIRED"),
        ({"X_Merchant_Id": MERCHANT, "X_Timestamp": "1", "X_Signature": GOOD_SIGNATURE}, "EXPIRED"),
        ({"X_Merchant_Id": MERCHANT, "X_Timestamp": "soon", "X_Signature": "0"}, "EXPIRED"),
        ({"X_Merchant_Id": MERCHANT, "X_Timestamp": "now"}, "AUTH"),
        ({"X_Merchant_Id": MERCHANT, "X_Timestamp": "now", "X_Signature": "ABC"}, "AUTH"),
    ],
    ids=[
        "unknown-merchant",
        "no-merchant",
        "no-timestamp",
        "stale-timestamp",
        "malformed-timestamp",
        "no-signature",
        "malformed-signature",
    ],
)
def test_what_the_head_decides_is_answered_401_before_a_byte_of_the_body(fields, code):
    fields = {name: fresh() if value == "now" else value for name, value in fields.items()}
    metrics = Metrics(CollectorRegistry())
    with events_server(metrics=metrics.round_events) as server, flood(server.port) as clients:
        (sock,) = clients.open("idle", 1)
        sock.send(head(**fields))
        reply = received(sock, timeout=2)  # the body is never sent: it must not be waited for
    status, _, body = reply.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 401 ")
    assert b"connection: close" in status.lower()
    expected = {"AUTH": "AUTHENTICATION_FAILED", "EXPIRED": "REQUEST_EXPIRED"}[code]
    assert json.loads(body)["error"]["code"] == expected
    # Counted, under the merchant only when it is a configured one.
    merchant = MERCHANT if fields.get("X_Merchant_Id") == MERCHANT else "none"
    assert refused_count(metrics, expected, merchant) == 1


def test_past_the_sum_of_unverified_bodies_the_next_is_answered_503_and_retried_later():
    """Four bodies of 1000 bytes declared, never sent, where 3000 bytes may be held: one of
    them (whichever head came last) is answered 503 at once, the other three wait."""
    limits = EventsLimits(unverified_body_bytes=3000)
    metrics = Metrics(CollectorRegistry())
    with (
        events_server(limits, metrics=metrics.round_events) as server,
        flood(server.port) as clients,
    ):
        bodies = clients.open("slow-body", 4)

        def answered() -> list[socket.socket]:
            return select.select(bodies, [], [], 0)[0]

        wait_until(lambda: bool(answered()), timeout=5)
        (refused,) = answered()
        reply = received(refused, timeout=2)
        status, _, body = reply.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 503 ")
        assert b"retry-after: 5" in status.lower()
        assert json.loads(body)["error"] == {
            "code": "SERVER_BUSY",
            "message": "too many notifications are being received; retry later",
            "retryable": True,
        }
        assert refused_count(metrics, "SERVER_BUSY", MERCHANT) == 1
        time.sleep(0.2)
        assert answered() == [refused]  # the other three still wait for their bodies
        for sock in bodies:
            sock.close()  # gone before their bodies ended: their share is given back
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as platform:
            wait_until(
                lambda: (
                    post_event(platform, event_body("ev-1"), now=time.time()).status_code == 200
                ),
                timeout=5,
            )


def refused_count(metrics: Metrics, code: str, merchant: str) -> float | None:
    """``recordsync_round_events_total`` of refusals with ``code`` for ``merchant``."""
    return metrics.registry.get_sample_value(
        RoundEventMetricName.EVENTS, {"merchant_id": merchant, "outcome": "refused", "code": code}
    )


def test_refusals_are_logged_once_per_reason_and_interval_with_their_count():
    clock = [0.0]
    refusals = RefusalLog(interval=60, clock=lambda: clock[0])

    def refuse(code: str, merchant_id: str | None = None) -> None:
        refusals.refused(
            status=401, code=code, message="m", merchant_id=merchant_id, method="POST", size=0
        )

    with structlog.testing.capture_logs() as logs:
        for _ in range(5):
            refuse("AUTHENTICATION_FAILED")
        refuse("AUTHENTICATION_FAILED", MERCHANT)  # a merchant's reason is its own
        refuse("REQUEST_EXPIRED")
        clock[0] = 60.0
        refuse("AUTHENTICATION_FAILED")
    assert [(line["code"], line["merchant_id"], line["count"]) for line in logs] == [
        ("AUTHENTICATION_FAILED", None, 1),
        ("AUTHENTICATION_FAILED", MERCHANT, 1),
        ("REQUEST_EXPIRED", None, 1),
        ("AUTHENTICATION_FAILED", None, 5),
    ]


# -- the probe port -----------------------------------------------------------------------------

METRICS_READERS = 8


def never_reading(port: int, path: str) -> socket.socket:
    """A client that asks for ``path`` and reads nothing (a 4 KiB receive window)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def test_metrics_readers_that_never_read_keep_no_probe_waiting():
    """8 clients ask for a 5 MB ``/metrics`` and never read it, while ``/healthz`` and
    ``/readyz`` are asked every 0.5 s for 3 s: every answer comes within 0.5 s, and a third
    ``/metrics`` meanwhile is 503 at once.  Printed (``-s``): the slowest."""
    with health_server(registry=large_registry(5 * MIB)) as server:
        readers = [never_reading(server.port, "/metrics") for _ in range(METRICS_READERS)]
        try:
            times = []
            with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as probe:
                for _ in range(6):
                    started = time.monotonic()
                    status = probe.get("/healthz", headers={"Connection": "close"}).status_code
                    times.append(time.monotonic() - started)
                    assert status == 200
                    started = time.monotonic()
                    status = probe.get("/readyz", headers={"Connection": "close"}).status_code
                    times.append(time.monotonic() - started)
                    assert status == 200
                    if len(times) == 1:  # the readers' heads came first: two answers in flight
                        started = time.monotonic()
                        assert probe.get("/metrics").status_code == 503
                        times.append(time.monotonic() - started)
                    time.sleep(max(0.0, 0.5 - times[-1]))
        finally:
            for sock in readers:
                sock.close()
    print(f"\nprobe answers: slowest {max(times) * 1000:.0f} ms of {len(times)}")  # noqa: T201
    assert max(times) < 0.5


def test_at_the_cap_an_answer_nobody_reads_makes_room_for_the_probe():
    """Every connection with its head in: the oldest whose answer is not read is closed for
    the newcomer (it was the newcomer that was closed, whatever it asked)."""
    limits = HttpLimits(
        head_timeout=5,
        write_timeout=60,
        max_connections=2,
        lanes=PROBE_LIMITS.lanes,
        max_head_bytes=8192,
    )
    with health_server(limits, registry=large_registry(5 * MIB)) as server:
        readers = [never_reading(server.port, "/metrics") for _ in range(2)]
        try:

            def probe_answered() -> bool:
                try:
                    response = httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=1)
                except httpx.TransportError:
                    return False  # the answers are still being computed: nothing to evict
                return response.status_code == 200

            wait_until(probe_answered, timeout=10, step=0.2)
        finally:
            for sock in readers:
                sock.close()


def drained(sock: socket.socket, timeout: float) -> int:
    """How many bytes ``sock`` still delivers before the server's close (or reset) ends it:
    what the kernels buffered of the answer when it was dropped."""
    sock.settimeout(timeout)
    total = 0
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            total += len(chunk)
    return total


def test_an_answer_not_read_within_the_write_deadline_is_dropped_and_its_slot_freed():
    """Two clients that never read hold both ``/metrics`` answers in flight: a third is 503
    at once.  Each answer is written without blocking under ``write_timeout`` (1 s here) from
    its being ready; past it the connection is closed with the answer unsent, its slot freed,
    and ``/metrics`` answers 200 again (it never did while a blocking write waited for the
    reader, nor would without a deadline)."""
    limits = dataclasses.replace(PROBE_LIMITS, write_timeout=1.0)
    with health_server(limits, registry=large_registry(5 * MIB)) as server:
        base = f"http://127.0.0.1:{server.port}"
        readers = [never_reading(server.port, "/metrics") for _ in range(2)]
        try:
            started = time.monotonic()
            assert httpx.get(f"{base}/metrics", timeout=2).status_code == 503
            assert time.monotonic() - started < 0.5

            def served() -> bool:
                return httpx.get(f"{base}/metrics", timeout=30).status_code == 200

            # The two 5 MB answers are computed side by side first (seconds on 2 busy cores).
            wait_until(served, timeout=30, step=0.3)
            whole = len(httpx.get(f"{base}/metrics", timeout=30).content)
            left = [drained(sock, timeout=5) for sock in readers]
        finally:
            for sock in readers:
                sock.close()
    assert all(part < whole for part in left), (left, whole)  # dropped, not delivered
