"""The shared record rate limit: a sliding window, 429 with Retry-After, violations counted."""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
from support.sim_platform import error_of, small_config

from recordsync.platform.signing import format_timestamp, sign
from recordsync.sim import ManualClock
from recordsync.sim.ratelimit import SlidingWindow, retry_after_header

CHANGES = "/v1/record-changes?from_now=true"
RECORDS = (
    "/v1/records?created_from=2026-01-01T00%3A00%3A00.000Z&created_to=2026-01-01T01%3A00%3A00.000Z"
)


def test_the_window_admits_the_limit_then_says_how_long_to_wait():
    window = SlidingWindow(requests=2, seconds=1.0)
    assert window.admit("m", 10.0) is None
    assert window.admit("m", 10.4) is None
    assert window.admit("m", 10.9) == pytest.approx(0.1)
    assert window.admit("m", 11.0) is None  # the first request left the window exactly now
    assert window.admit("m", 11.1) == pytest.approx(0.3)
    assert window.admit("other", 11.1) is None  # per merchant
    assert window.max_in_window == 2


def test_a_released_place_can_be_used_again():
    window = SlidingWindow(requests=1, seconds=5.0)
    assert window.admit("m", 1.0) is None
    window.release("m", 1.0)
    assert window.admit("m", 1.5) is None


@pytest.mark.parametrize(
    ("wait", "header"),
    [(0.01, "1"), (1.0, "1"), (1.2, "2"), (59.5, "60")],
    ids=["tiny", "one", "rounded-up", "minute"],
)
def test_retry_after_is_whole_seconds_rounded_up(wait, header):
    assert retry_after_header(wait) == header


def test_requests_beyond_the_limit_get_429_and_count_as_violations(start_sim):
    monotonic = ManualClock(start=1000.0)
    sim, platform = start_sim(
        small_config(record_requests=2, record_seconds=1), monotonic=monotonic
    )

    assert platform.get_target(CHANGES).status_code == 200
    assert platform.get_target(RECORDS).status_code == 200  # shared by both endpoints
    refused = platform.get_target(CHANGES)
    refused_again = platform.get_target(RECORDS)

    for response in (refused, refused_again):
        assert response.status_code == 429
        assert response.headers["retry-after"] == "1"
        error = error_of(response)
        assert error["code"] == "RATE_LIMITED"
        assert error["retryable"] is True
    monotonic.advance(1.0)  # refused requests did not take a place in the window
    assert platform.get_target(CHANGES).status_code == 200
    stats = sim.stats()
    assert stats.rate_limit_violations == 2
    assert stats.max_requests_in_window == 2
    assert stats.count("record-changes", 429) == 1
    assert stats.count("records", 429) == 1


def test_validation_errors_still_count_in_the_window(start_sim):
    monotonic = ManualClock(start=1000.0)
    sim, platform = start_sim(
        small_config(record_requests=1, record_seconds=10), monotonic=monotonic
    )
    assert platform.get_target("/v1/record-changes?from_now=nope").status_code == 400
    assert platform.get_target(CHANGES).status_code == 429
    assert sim.stats().rate_limit_violations == 1


def test_a_client_within_the_limit_causes_no_violation(start_sim):
    monotonic = ManualClock(start=1000.0)
    sim, platform = start_sim(
        small_config(record_requests=2, record_seconds=1), monotonic=monotonic
    )
    for _ in range(10):
        assert platform.get_target(CHANGES).status_code == 200
        monotonic.advance(0.5)

    stats = sim.stats()
    assert stats.rate_limit_violations == 0
    assert stats.max_requests_in_window == 2


def test_the_real_clock_limits_a_burst(start_sim):
    sim, platform = start_sim(small_config(record_requests=2, record_seconds=1))
    statuses = [platform.get_target(CHANGES).status_code for _ in range(4)]
    assert statuses[:2] == [200, 200]
    assert 429 in statuses[2:]
    assert sim.stats().rate_limit_violations >= 1


class _WatchedClock:
    """A ManualClock that says when someone read it: the test waits for the server's stamp."""

    def __init__(self, start: float) -> None:
        self.clock = ManualClock(start=start)
        self.read = threading.Event()

    def __call__(self) -> float:
        now = self.clock()
        self.read.set()
        return now


def test_an_arrival_is_stamped_when_the_request_line_is_read_not_after_the_headers(start_sim):
    """A busy server can take a while over the headers; the limit counts the arrival."""
    monotonic = _WatchedClock(start=1000.0)
    sim, platform = start_sim(
        small_config(record_requests=1, record_seconds=10), monotonic=monotonic
    )
    assert platform.get_target(CHANGES).status_code == 200  # counted at 1000.0
    url = urlsplit(sim.base_url)
    stamp = format_timestamp(time.time())
    signature = sign(platform.secret, timestamp=stamp, method="GET", target=CHANGES)
    headers = (
        f"Host: {url.netloc}\r\nX-Merchant-Id: {platform.merchant_id}\r\n"
        f"X-Timestamp: {stamp}\r\nX-Signature: {signature}\r\n\r\n"
    )
    with socket.create_connection((url.hostname, url.port), timeout=10) as conn:
        monotonic.clock.set(1009.9)  # still inside the first request's window
        monotonic.read.clear()
        conn.sendall(f"GET {CHANGES} HTTP/1.1\r\n".encode())
        assert monotonic.read.wait(timeout=10), "the server never stamped the request line"
        monotonic.clock.set(1010.5)  # the headers come after the window has moved on
        conn.sendall(headers.encode())
        answer = conn.recv(65536)
    assert answer.startswith(b"HTTP/1.1 429 "), answer[:80]
    assert sim.stats().rate_limit_violations == 1


def test_arrivals_handled_out_of_order_are_judged_by_when_they_arrived():
    """Ten a second, spaced 0.1 s apart, handled in another order than they arrived (threads
    on a busy machine): no violation, however late one of them is handled."""
    window = SlidingWindow(requests=10, seconds=1.0)
    arrivals = [round(10.0 + 0.1 * n, 1) for n in range(30)]
    late = arrivals.pop(12)  # 11.2 arrived, and is handled after 11.5
    order = [*arrivals[:15], late, *arrivals[15:]]
    assert [window.admit("m", at) for at in order] == [None] * 30
    assert window.max_in_window == 10


def test_an_arrival_handled_late_is_refused_when_a_later_window_overflows():
    """The eleventh arrival in a second is refused whichever of them is handled last: here the
    window that overflows ends at an arrival handled before it."""
    window = SlidingWindow(requests=3, seconds=1.0)
    for at in (10.0, 10.5, 10.9):
        assert window.admit("m", at) is None
    assert window.admit("m", 10.2) == pytest.approx(0.8)  # (9.9, 10.9] would hold four
    assert window.admit("m", 11.0) is None  # 10.0 left; 10.2 was never counted
    assert window.max_in_window == 3
