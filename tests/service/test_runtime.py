"""One merchant runtime: the daemon and the one-shot commands build a merchant's
options and read its limits with the same functions, and differ only where their purpose says
so."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from structlog.testing import capture_logs

from recordsync.core.errors import AuthenticationError, ClockSkewError
from recordsync.core.models import DEFAULT_LIMITS, Limits
from recordsync.core.secret import Secret, SecretSource
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.core.stopping import Stopper
from recordsync.platform.client import PlatformClient
from recordsync.service import runtime
from recordsync.service.runtime import (
    Purpose,
    Share,
    merchant_client,
    merchant_sync,
    read_limits,
    sync_options,
)
from recordsync.service.secrets import SecretKeeper
from recordsync.warehouse import Warehouse

SECRET = Secret("runtime-secret-0123456789abcdefghijklmnopqr")
MERCHANT = MerchantSettings(
    merchant_id="m-runtime",
    secret=SecretSource.given(SECRET),
    base_url="http://platform.invalid",
    history_from=datetime(2026, 11, 1, tzinfo=UTC),
)
SETTINGS = Settings(
    merchants=(MERCHANT,),
    page_size=5000,
    snapshot_concurrency=6,
    events_port=9999,
    event_grace=120.0,
    unreachable_timeout=45.0,
)
LIMITS = dataclasses.replace(DEFAULT_LIMITS, max_page_size=2000)


def test_a_daemon_and_a_command_differ_only_where_their_purpose_says() -> None:
    daemon = sync_options(
        SETTINGS,
        MERCHANT,
        LIMITS,
        Purpose.DAEMON,
        share=Share(worker_threads=8, merchants=4),
        receives_events=True,
    )
    command = sync_options(SETTINGS, MERCHANT, LIMITS, Purpose.COMMAND)
    assert (daemon.snapshot_concurrency, daemon.snapshot_most_chains) == (2, 2)  # 8 // 4
    assert daemon.event_grace == 120.0
    assert daemon.give_up_unreachable is None  # the daemon keeps trying
    assert (command.snapshot_concurrency, command.snapshot_most_chains) == (6, None)
    assert command.event_grace is None  # no receiver in a command
    assert command.give_up_unreachable == 45.0
    assert command.page_size == daemon.page_size == 2000  # the platform's bound
    # Notifications wake the daemon's tail: when idle it only polls for safety.
    assert daemon.tail_pacing.safety == SETTINGS.safety_poll
    assert command.tail_pacing.safety is None
    same_otherwise = dataclasses.replace(
        daemon,
        tail_pacing=dataclasses.replace(daemon.tail_pacing, safety=None),
        snapshot_concurrency=command.snapshot_concurrency,
        snapshot_most_chains=None,
        event_grace=None,
        give_up_unreachable=45.0,
    )
    assert same_otherwise == command


def test_the_demo_and_the_in_process_tests_stop_when_caught_up() -> None:
    options = sync_options(SETTINGS, MERCHANT, LIMITS, Purpose.COMMAND, stop_when_caught_up=True)
    assert options.stop_when_caught_up


def scripted_client(status: int, code: str) -> PlatformClient:
    def answer(request: httpx.Request) -> httpx.Response:
        error = {"code": code, "message": "scripted", "retryable": False, "details": {}}
        return httpx.Response(status, json={"error": error, "request_id": "req-1"})

    return PlatformClient(
        base_url="http://platform.invalid",
        merchant_id=MERCHANT.merchant_id,
        secret=SECRET,
        transport=httpx.MockTransport(answer),
        sleep=lambda _s: None,
    )


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [(401, "AUTHENTICATION_FAILED", AuthenticationError), (401, "REQUEST_EXPIRED", ClockSkewError)],
    ids=["wrong-secret", "skewed-clock"],
)
def test_what_no_retry_heals_ends_a_command_and_a_daemon_goes_on_with_the_defaults(
    status: int, code: str, error: type[Exception]
) -> None:
    with scripted_client(status, code) as client, pytest.raises(error):
        read_limits(client, Purpose.COMMAND)
    with scripted_client(status, code) as client, capture_logs() as logs:
        assert read_limits(client, Purpose.DAEMON) == DEFAULT_LIMITS
    assert [entry["code"] for entry in logs if entry["event"] == "capabilities_failed"] == [code]


@pytest.mark.parametrize("purpose", list(Purpose))
def test_a_refused_capabilities_leaves_the_defaults_for_either(purpose: Purpose) -> None:
    with scripted_client(403, "FORBIDDEN") as client, capture_logs() as logs:
        limits = read_limits(client, purpose)
    assert isinstance(limits, Limits)
    assert limits == DEFAULT_LIMITS
    assert any(entry["event"] == "capabilities_unavailable" for entry in logs)


def test_every_merchant_client_starts_with_a_cold_budget_at_the_spec_default() -> None:
    stopper = Stopper()
    secrets = SecretKeeper({MERCHANT.merchant_id: MERCHANT.secret}, overlap=60.0)
    with merchant_client(SETTINGS, MERCHANT, secrets=secrets, stopper=stopper) as client:
        budget = client.budget
        assert (budget.requests, budget.seconds) == (
            DEFAULT_LIMITS.record_requests,
            DEFAULT_LIMITS.record_seconds,
        )
        assert budget.margin == SETTINGS.rate_margin
        assert client.query_budget is not budget


def test_only_the_runtime_builds_a_merchants_sync() -> None:
    """The daemon and the commands do not assemble an engine of their own: the one place that
    sizes a sync's options is ``runtime.merchant_sync`` (once ``merchant_syncs``
    and ``app`` each did, with different options).  A dry run reads the limits to estimate a
    job's time, and builds no sync."""
    service = Path(runtime.__file__).parent

    def calling(call: str) -> list[str]:
        return sorted(
            path.relative_to(service).as_posix()
            for path in service.rglob("*.py")
            if call in path.read_text()
        )

    assert calling("sync_options(") == ["runtime.py"]
    assert calling("read_limits(") == ["commands/dry_run.py", "runtime.py"]
    # One engine builder: the tail and the jobs beside it, the command's and the holder's.
    assert calling("SyncEngine(") == ["runtime.py"]
    assert (service / "runtime.py").read_text().count("SyncEngine(") == 1


def test_a_merchants_sync_is_sized_to_the_platforms_limits_and_its_share(tmp_path) -> None:
    warehouse = Warehouse.connect(f"sqlite:///{tmp_path / 'w.db'}")
    try:
        with scripted_client(403, "FORBIDDEN") as client:  # the spec's defaults, then
            sync = merchant_sync(
                SETTINGS,
                MERCHANT,
                client,
                warehouse.for_merchant(MERCHANT.merchant_id),
                Purpose.DAEMON,
                stopper=Stopper(),
                share=Share(worker_threads=4, merchants=4),
                receives_events=True,
            )
        assert sync.engines.options.page_size == DEFAULT_LIMITS.max_page_size
        assert sync.engines.options.snapshot_concurrency == 1  # its share of four threads
        assert sync.engines.options.event_grace == SETTINGS.event_grace
        assert sync.engines.options.give_up_unreachable is None  # a daemon keeps trying
    finally:
        warehouse.close()
