"""The HTTP side: keep-alive on one connection, raw targets, start/stop life cycle."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import httpx
import pytest
from support.sim_platform import Platform, small_config

from recordsync.sim import FaultRates, ManualClock, SimConfig, Simulator, running_simulator
from recordsync.sim.cursors import (
    ChangesCursor,
    CursorCodec,
    CursorInvalidError,
    RecordsCursor,
)


def test_a_client_reuses_one_keep_alive_connection(start_sim):
    _, platform = start_sim()
    peers = set()
    for _ in range(5):
        response = platform.get("/v1/record-changes", [("from_now", "true")])
        assert response.status_code == 200
        assert response.http_version == "HTTP/1.1"
        assert response.headers.get("connection", "keep-alive").lower() != "close"
        stream = response.extensions["network_stream"]
        peers.add(stream.get_extra_info("client_addr"))
    assert len(peers) == 1


def test_a_refused_request_with_a_body_leaves_the_connection_usable(start_sim):
    _, platform = start_sim()
    response = platform.http.request(
        "GET", "/v1/record-changes?from_now=true", content=b"{}", headers={"X-Merchant-Id": "m-1"}
    )
    assert response.status_code == 401  # read, then refused: the connection stays usable
    assert platform.get("/v1/record-changes", [("from_now", "true")]).status_code == 200


def test_an_oversized_body_is_413(start_sim):
    _, platform = start_sim(small_config(max_body_bytes=10))
    response = platform.http.request("GET", "/v1/records", content=b"x" * 11)
    assert response.status_code == 413


def test_stop_is_idempotent_and_closes_idle_connections():
    sim = Simulator(small_config()).start()
    platform = Platform(sim)
    assert platform.get("/v1/record-changes", [("from_now", "true")]).status_code == 200
    host, port = sim.address

    sim.stop()
    sim.stop()

    with pytest.raises(httpx.TransportError):
        platform.get("/v1/record-changes", [("from_now", "true")])
    with pytest.raises(OSError), socket.create_connection((host, port), timeout=1):
        pass
    platform.close()


def test_running_simulator_stops_even_when_the_block_fails():
    addresses = []

    def failing_block() -> None:
        with running_simulator(small_config()) as sim:
            addresses.append(sim.address)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        failing_block()
    with pytest.raises(OSError), socket.create_connection(addresses[0], timeout=1):
        pass


def test_a_simulator_serves_once_and_tells_where():
    sim = Simulator(SimConfig(history_days=0.01, rounds_per_day=100))
    assert "not started" in repr(sim)
    with pytest.raises(RuntimeError):
        _ = sim.base_url
    with sim.start(port=0):
        assert sim.base_url.startswith("http://127.0.0.1:")
        with pytest.raises(RuntimeError):
            sim.start()


def test_the_secret_never_shows_in_the_configuration_repr():
    config = small_config(previous_secret="previous-" + "p" * 34)
    assert config.secret not in repr(config)
    assert "previous-" not in repr(config)


def test_cursors_round_trip_and_detect_any_change():
    codec = CursorCodec(b"k" * 32)
    records = RecordsCursor("m", 1, 2, None, "g", "123", 1, "id", 5, 0)
    changes = ChangesCursor("m", 42, 3)
    for cursor in (records, changes):
        token = codec.encode(cursor)
        assert codec.decode(token) == cursor
        assert len(token) <= 4096
        with pytest.raises(CursorInvalidError):
            CursorCodec(b"j" * 32).decode(token)
    for bad in ("", ".", "a.b", "!!!.???", "x" * 5000):
        with pytest.raises(CursorInvalidError):
            codec.decode(bad)


def test_the_simulator_clock_is_the_injected_clock_plus_the_skew():
    clock = ManualClock(start=1_767_225_600.25)
    sim = Simulator(small_config(faults=FaultRates(clock_skew_seconds=-60)), clock=clock)
    assert sim.now() == datetime(2025, 12, 31, 23, 59, 0, 250000, tzinfo=UTC)
    assert sim.now_ms() == 1_767_225_540_250
