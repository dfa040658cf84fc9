"""Health: the pure readiness rule on an injected clock, and the server over real loopback HTTP."""

import socket
import threading
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry
from support.clocks import FakeClock

from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.metrics import MetricName, Metrics
from recordsync.service.daemon.observers import ClientMetricsObserver, SyncMetricsObserver
from recordsync.service.ports.health import FleetReadinessCheck, HealthServer
from recordsync.service.readiness import Readiness, assess_readiness

START = 1_000_000.0
POLL = 1.0


def assess(now, *, last_commit_at=None, warehouse_error=None, started_at=START):
    return assess_readiness(
        now=now,
        started_at=started_at,
        last_commit_at=last_commit_at,
        warehouse_error=warehouse_error,
        poll_interval=POLL,
        multiple=30,
        startup_grace=120,
    )


# -- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "last_commit_at", "warehouse_error", "ready"),
    [
        (START + 1, None, None, True),
        (START + 120, None, None, True),
        (START + 121, None, None, False),
        (START + 500, START + 490, None, True),
        (START + 500, START + 470, None, True),
        (START + 500, START + 469, None, False),
        (START + 500, START + 499, "WarehouseUnavailableError", False),
        (START + 1, None, "OperationalError", False),
    ],
    ids=[
        "starting-within-grace",
        "grace-boundary",
        "no-commit-after-grace",
        "recent-commit",
        "commit-at-the-limit",
        "commit-too-old",
        "warehouse-down-despite-recent-commit",
        "warehouse-down-during-grace",
    ],
)
def test_readiness_rule(now, last_commit_at, warehouse_error, ready):
    result = assess(now, last_commit_at=last_commit_at, warehouse_error=warehouse_error)
    assert result.ready is ready
    assert result.reason


def test_not_ready_reasons_say_what_is_wrong():
    assert (
        "warehouse unavailable: OperationalError"
        in assess(START, warehouse_error="OperationalError").reason
    )
    assert "31 s ago (limit 30 s)" in assess(START + 100, last_commit_at=START + 69).reason
    assert "since start" in assess(START + 200).reason


def test_a_first_snapshot_is_ready_while_its_pages_commit():
    """Hours into the first snapshot: the phase does not matter, recent commits do."""
    hours = 6 * 3600
    assert assess(START + hours, last_commit_at=START + hours - 2).ready


def test_the_limit_scales_with_the_poll_interval():
    result = assess_readiness(
        now=START + 250,
        started_at=START,
        last_commit_at=START,
        warehouse_error=None,
        poll_interval=10.0,
        multiple=30,
    )
    assert result.ready


def test_readiness_check_pings_the_warehouse_and_reads_the_last_commit():
    clock = FakeClock(START)
    taken_at = clock.now
    commits = {"at": None}
    failing = {"on": False}

    def ping():
        if failing["on"]:
            raise WarehouseUnavailableError("warehouse unavailable (ping): secret-ish detail")

    check = FleetReadinessCheck(
        ping=ping, held=lambda: {"m-1": (taken_at, commits["at"])}, poll_interval=POLL, clock=clock
    )
    assert check().ready  # starting
    clock.now += 200
    assert not check().ready  # grace over, nothing committed
    commits["at"] = clock.now - 1
    assert check().ready
    failing["on"] = True
    result = check()
    assert result == Readiness(
        ready=False, reason="warehouse unavailable: WarehouseUnavailableError"
    )


def held_from(metrics: Metrics, clock: FakeClock, *merchant_ids: str):
    taken_at = clock.now
    return lambda: {
        merchant_id: (taken_at, metrics.last_commit_at(merchant_id)) for merchant_id in merchant_ids
    }


def test_readiness_check_follows_metrics_last_commit():
    clock = FakeClock(START)
    metrics = Metrics(CollectorRegistry(), clock=clock)
    check = FleetReadinessCheck(
        ping=lambda: None,
        held=held_from(metrics, clock, "m-1"),
        poll_interval=POLL,
        startup_grace=0,
        clock=clock,
    )
    clock.now += 1
    assert not check().ready
    SyncMetricsObserver(metrics.merchant("m-1")).tail_page(
        0, has_more=False, projection_as_of=None, last_sequence=None
    )
    assert check().ready


def test_readiness_is_per_merchant_another_merchants_commits_do_not_count():
    clock = FakeClock(START)
    metrics = Metrics(CollectorRegistry(), clock=clock)
    check = FleetReadinessCheck(
        ping=lambda: None,
        held=held_from(metrics, clock, "m-1", "m-2"),
        poll_interval=POLL,
        startup_grace=0,
        clock=clock,
    )
    clock.now += 1
    SyncMetricsObserver(metrics.merchant("m-2")).tail_page(
        0, has_more=False, projection_as_of=None, last_sequence=None
    )
    verdict = check()
    assert not verdict.ready
    assert verdict.reason.startswith("m-1: ")  # only the merchant that commits nothing


# -- the server over loopback -------------------------------------------------------------------


class Switch:
    def __init__(self):
        self.result = Readiness(ready=True, reason="fine")

    def __call__(self):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


@pytest.fixture
def registry():
    return CollectorRegistry()


@pytest.fixture
def switch():
    return Switch()


@pytest.fixture
def server(registry, switch):
    with HealthServer(0, host="127.0.0.1", registry=registry, readiness=switch) as started:
        yield started


@pytest.fixture
def http(server):
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as client:
        yield client


def test_healthz_answers_while_the_process_lives(http):
    response = http.get("/healthz")
    assert response.status_code == 200
    assert response.text == "ok\n"


def test_readyz_follows_the_readiness_callable(http, switch):
    ready = http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "reason": "fine"}

    switch.result = Readiness(ready=False, reason="last page committed 99 s ago (limit 30 s)")
    not_ready = http.get("/readyz")
    assert not_ready.status_code == 503
    assert not_ready.headers["content-type"] == "application/json"
    assert not_ready.json() == {
        "ready": False,
        "reason": "last page committed 99 s ago (limit 30 s)",
    }


def test_a_failing_readiness_check_is_not_ready_and_names_only_the_class(http, switch):
    switch.result = RuntimeError("password=hunter2")
    response = http.get("/readyz")
    assert response.status_code == 503
    assert response.json()["reason"] == "readiness check failed: RuntimeError"
    assert "hunter2" not in response.text


def test_metrics_serves_the_registry_in_prometheus_text_format(http, registry):
    metrics = Metrics(registry)
    ClientMetricsObserver(metrics.merchant("m-1")).on_response("records", 200, None, 0.1, None)
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert (
        f'{MetricName.PLATFORM_REQUESTS}{{code="none",endpoint="records",merchant_id="m-1",'
        f'status="200"}} 1.0' in response.text
    )
    openmetrics = http.get("/metrics", headers={"Accept": "application/openmetrics-text"})
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.endswith("# EOF\n")


@pytest.mark.parametrize("path", ["/", "/metricsx", "/readyz/extra", "/favicon.ico"])
def test_other_paths_are_404(http, path):
    assert http.get(path).status_code == 404


def test_a_query_string_does_not_change_the_endpoint(http):
    assert http.get("/healthz?verbose=1").status_code == 200


def test_a_slow_readiness_check_does_not_block_healthz(registry):
    release = threading.Event()

    def slow():
        release.wait(10)
        return Readiness(ready=True, reason="slow")

    with HealthServer(0, host="127.0.0.1", registry=registry, readiness=slow) as server:
        base = f"http://127.0.0.1:{server.port}"
        hanging = threading.Thread(target=lambda: httpx.get(f"{base}/readyz", timeout=10))
        hanging.start()
        try:
            assert httpx.get(f"{base}/healthz", timeout=2).status_code == 200
        finally:
            release.set()
            hanging.join()


def test_a_readiness_check_asked_while_one_hangs_is_answered_503_at_once(registry):
    """One readiness check at a time (docs/operations.md, "The two ports under hostile
    clients"): while a warehouse ping hangs, the kubelet's next ``/readyz`` is answered 503
    at once instead of taking a second thread, and the check after the hung one ends is
    answered as usual."""
    release, entered = threading.Event(), threading.Event()

    def slow():
        entered.set()
        release.wait(10)
        return Readiness(ready=True, reason="slow")

    with HealthServer(0, host="127.0.0.1", registry=registry, readiness=slow) as server:
        base = f"http://127.0.0.1:{server.port}"
        first: list[httpx.Response] = []
        hanging = threading.Thread(target=lambda: first.append(httpx.get(f"{base}/readyz")))
        hanging.start()
        try:
            assert entered.wait(5)
            started = time.monotonic()
            second = httpx.get(f"{base}/readyz", timeout=2)
            took = time.monotonic() - started
        finally:
            release.set()
            hanging.join(10)
        assert second.status_code == 503
        assert second.json() == {
            "ready": False,
            "reason": "the previous readiness check has not ended",
        }
        assert took < 0.5
        assert [response.status_code for response in first] == [200]
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200  # the lane is free


def test_stop_closes_the_port_and_is_idempotent(registry, switch):
    server = HealthServer(0, host="127.0.0.1", registry=registry, readiness=switch)
    server.stop()  # before start: nothing to do
    server.start()
    port = server.port
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    server.stop()
    server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    with pytest.raises(RuntimeError):
        _ = server.port


def test_a_port_in_use_is_a_configuration_error(registry, switch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = HealthServer(port, host="127.0.0.1", registry=registry, readiness=switch)
        with pytest.raises(ConfigurationError, match="RECORDSYNC_HTTP_PORT"):
            server.start()
