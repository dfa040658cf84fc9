"""A request's start, for the rate budget, is when its bytes went on the wire (wire.py).

The delays between the client's hand-over and the socket's write are made real here by a
network backend that is slow to connect (the I/O seam httpcore offers), in front of the
project's simulator on a loopback socket.
"""

import itertools
import time

import httpcore
import httpx
import pytest

from recordsync.core.errors import LeaseUnconfirmedError
from recordsync.core.secret import Secret
from recordsync.platform.budget import RateBudget
from recordsync.platform.client import PlatformClient
from recordsync.platform.wire import answer_hook, carrying, settle, wire_transport
from recordsync.sim import SimConfig
from recordsync.sim.testing import running_simulator

SECRET = "wire-secret-0123456789-abcdefghijklmnopqrstu"
CONNECT_DELAY = 0.3


class SlowToConnect(httpcore.NetworkBackend):
    """A real TCP backend whose every new connection takes ``delay`` seconds more."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.connections = 0
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.connections += 1
        time.sleep(self.delay)
        return self._inner.connect_tcp(host, port, timeout, local_address, socket_options)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise NotImplementedError

    def sleep(self, seconds):
        time.sleep(seconds)


def test_the_slot_is_stamped_after_the_connection_and_the_write_not_at_hand_over():
    config = SimConfig(merchant_id="m-wire", secret=SECRET, history_days=0.0)
    with running_simulator(config) as sim:
        budget = RateBudget(10, 1.0)
        slot = budget.acquire()
        handed_over = time.monotonic()
        transport = wire_transport(verify=False, network=SlowToConnect(CONNECT_DELAY))
        with httpx.Client(transport=transport) as http, carrying(slot):
            assert not slot.stamped
            http.get(f"{sim.base_url}/v1/capabilities")  # unsigned: a 401, but it went out
        assert slot.started_at is not None
        assert slot.started_at - handed_over >= CONNECT_DELAY


def test_only_the_carried_slot_is_stamped_and_only_once():
    config = SimConfig(merchant_id="m-wire", secret=SECRET, history_days=0.0)
    with running_simulator(config) as sim:
        budget = RateBudget(10, 1.0)
        first, second = budget.acquire(), budget.acquire()
        with httpx.Client(transport=wire_transport(verify=False)) as http:
            with carrying(first):
                http.get(f"{sim.base_url}/v1/capabilities")
            stamped_at = first.started_at
            http.get(f"{sim.base_url}/v1/capabilities")  # carries nothing
            with carrying(first):
                http.get(f"{sim.base_url}/v1/capabilities")  # stamped already: kept
        assert first.started_at == stamped_at
        assert not second.stamped


def test_a_slot_no_write_stamped_is_stamped_when_settled_and_before_its_answer_counts():
    budget = RateBudget(10, 1.0)
    slot = budget.acquire()
    answer_hook(slot)()
    assert slot.stamped
    assert slot.answered_at is not None
    assert slot.answered_at >= slot.started_at
    stamped_at = slot.started_at
    settle(slot)
    assert slot.started_at == stamped_at


def test_a_slow_connection_does_not_eat_the_margin_the_platform_counts_no_violation():
    """One request a second: the first one waits 0.3 s for its connection after the budget let
    it go, the second reuses the connection at once.  Stamped at hand-over, the second went
    out 0.7 s after the first arrived, which the platform refuses; stamped at the write, the
    budget spaces them by the second the platform counts."""
    config = SimConfig(
        merchant_id="m-wire", secret=SECRET, history_days=0.0, record_requests=1, record_seconds=1
    )
    with running_simulator(config) as sim:
        network = SlowToConnect(CONNECT_DELAY)
        wall = itertools.count(int(time.time()))
        client = PlatformClient(
            base_url=sim.base_url,
            merchant_id="m-wire",
            secret=Secret(SECRET),
            budget=RateBudget(1, 1.0, margin=0.03),
            transport=wire_transport(verify=False, network=network),
            clock=lambda: float(next(wall)),
        )
        with client:
            client.changes(from_now=True)
            client.changes(from_now=True)
        assert network.connections == 1
        stats = sim.stats()
        assert stats.rate_limit_violations == 0
        assert stats.requests[("record-changes", 200)] == 2


def test_a_request_whose_lease_ran_out_while_it_connected_is_held_back_unsent():
    """The lease is confirmed when the attempt starts and after the budget's wait, and has run
    out by the time the slow connection is up: the request is refused at the socket, the
    platform sees nothing, and its place in the budget is given back."""
    config = SimConfig(merchant_id="m-wire", secret=SECRET, history_days=0.0)
    with running_simulator(config) as sim:
        network = SlowToConnect(CONNECT_DELAY)
        confirmed_until = time.monotonic() + CONNECT_DELAY / 3
        budget = RateBudget(1, 60.0, sleep=_never)
        client = PlatformClient(
            base_url=sim.base_url,
            merchant_id="m-wire",
            secret=Secret(SECRET),
            budget=budget,
            transport=wire_transport(verify=False, network=network),
        )
        client.hold_under(lambda: time.monotonic() < confirmed_until)
        with client, pytest.raises(LeaseUnconfirmedError):
            client.changes(from_now=True)
        assert network.connections == 1
        assert sum(sim.stats().requests.values()) == 0
        budget.acquire().cancel()  # the window's one place is free again: no wait


def _never(seconds: float) -> None:
    raise AssertionError(f"the budget waited {seconds} s for a place nobody used")
