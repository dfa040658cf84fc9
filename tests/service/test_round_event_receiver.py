"""The round-end notification receiver against a real socket: every refusal in the spec's
order, the exact reply, duplicates, key rotation, a warehouse outage answered 503."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry
from support.clocks import FakeClock
from support.round_event_requests import (
    MERCHANT,
    PATH,
    SECRET,
    event_body,
    post_event,
    signed_headers,
)

from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.core.round_events import RoundEventReceipt
from recordsync.core.secret import Secret, SecretSource
from recordsync.core.settings import Settings
from recordsync.core.stopping import Stopper
from recordsync.metrics import Metrics, RoundEventMetricName
from recordsync.service.ports.round_events.receiver import (
    EventsServer,
    RoundEventReceiver,
    asgi_app,
)
from recordsync.service.ports.round_events.running import receiving_round_events
from recordsync.service.secrets import SecretKeeper

NOW = 1_795_000_000.0
ACCEPTED_AT = datetime(2026, 11, 25, 1, 0, 1, 250000, tzinfo=UTC)
OLD_SECRET = "o" * 43


class Store:
    """An in-memory warehouse: first receipt per event id; ``down`` raises like an outage."""

    def __init__(self):
        self.events = {}
        self.down = False

    def __call__(self, event):
        if self.down:
            raise WarehouseUnavailableError("warehouse unavailable (record round event): gone")
        if event.event_id in self.events:
            return RoundEventReceipt(self.events[event.event_id][1], duplicate=True)
        self.events[event.event_id] = (event, ACCEPTED_AT)
        return RoundEventReceipt(ACCEPTED_AT, duplicate=False)


class Harness:
    def __init__(self, keeper, store, registry):
        self.keeper = keeper
        self.store = store
        self.woken = []
        self.clock = NOW
        self.registry = registry
        self.metrics = Metrics(registry)
        ids = iter(f"req-{n}" for n in range(1, 1000))
        self.receiver = RoundEventReceiver(
            secrets=self.secrets,
            store=store,
            wake=self.woken.append,
            metrics=self.metrics.round_events,
            clock=lambda: self.clock,
            request_ids=lambda: next(ids),
        )

    def secrets(self, merchant_id):
        return self.keeper.accepted(merchant_id) if merchant_id == MERCHANT else None

    def count(self, outcome, code="none", merchant=MERCHANT):
        value = self.registry.get_sample_value(
            RoundEventMetricName.EVENTS,
            {"merchant_id": merchant, "outcome": outcome, "code": code},
        )
        return value or 0


@pytest.fixture
def keeper_clock():
    return FakeClock(0.0)


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def harness(secret_file, keeper_clock):
    keeper = SecretKeeper(
        {MERCHANT: SecretSource.file(secret_file)}, overlap=60, clock=keeper_clock
    )
    return Harness(keeper, Store(), CollectorRegistry())


class CurrentReceiver:
    """One server for the module (starting one per test costs more than the tests); each
    test's receiver answers through it."""

    receiver: RoundEventReceiver | None = None

    def handle(self, request, *, started=None):
        return self.receiver.handle(request, started=started)

    def too_large(self, request, *, started):
        return self.receiver.too_large(request, started=started)

    def screen(self, head, *, started, close):
        return self.receiver.screen(head, started=started, close=close)

    def busy(self, head, *, started):
        return self.receiver.busy(head, started=started)

    def timed_out(self, request, *, started, seconds):
        return self.receiver.timed_out(request, started=started, seconds=seconds)


@pytest.fixture(scope="module")
def served():
    current = CurrentReceiver()
    server = EventsServer(asgi_app(current), host="127.0.0.1", port=0)
    with server, httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as http:
        yield http, current


@pytest.fixture
def client(harness, served):
    http, current = served
    current.receiver = harness.receiver
    return http


def error_of(response):
    body = response.json()
    assert set(body) == {"error", "request_id"}
    assert set(body["error"]) == {"code", "message", "retryable"}
    assert response.headers["content-type"] == "application/json"
    return response.status_code, body["error"]["code"]


def test_an_accepted_event_gets_exactly_the_reply_the_platform_decodes(client, harness):
    response = post_event(client, event_body("ev-1", parent_round_id="parent-9"), now=NOW)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert "content-encoding" not in response.headers
    assert response.content == (
        b'{"data":{"event_id":"ev-1","accepted_at":"2026-11-25T01:00:01.250000Z"},'
        b'"request_id":"req-1"}'
    )
    [(event, _)] = harness.store.events.values()
    assert (event.merchant_id, event.round_id, event.parent_round_id) == (
        MERCHANT,
        "round-ev-1",
        "parent-9",
    )
    assert event.occurred_at == datetime(2026, 11, 25, 1, 0, 0, 123000, tzinfo=UTC)
    assert [woken.event_id for woken in harness.woken] == ["ev-1"]
    assert harness.count("accepted") == 1


def test_a_repeated_event_gets_the_first_reply_again_and_wakes_nothing(client, harness):
    first = post_event(client, event_body("ev-1"), now=NOW)
    harness.clock += 30  # the platform's third attempt
    again = post_event(client, event_body("ev-1", currency="EUR"), now=NOW + 30)
    assert again.status_code == 200
    assert again.json()["data"] == first.json()["data"]
    assert again.json()["request_id"] != first.json()["request_id"]
    assert harness.store.events["ev-1"][0].currency == "USD"
    assert len(harness.woken) == 1
    assert harness.count("duplicate") == 1


def test_unknown_members_are_ignored_and_an_unknown_type_is_stored_not_acted_on(client, harness):
    body = event_body("ev-2", type="ROUND_REOPENED", colour="blue", nested={"a": 1})
    response = post_event(client, body, now=NOW)
    assert response.status_code == 200
    assert harness.store.events["ev-2"][0].type == "ROUND_REOPENED"
    assert harness.woken == []


def test_a_query_string_is_signed_as_received(client, harness):
    response = post_event(client, event_body("ev-3"), now=NOW, target=f"{PATH}?b=2&a=%2F")
    assert response.status_code == 200


def raw(body):
    return json.dumps(body).encode()


REFUSALS = [
    # (id, request options, expected status, code)
    ("unknown merchant", {"merchant_id": "m-stranger"}, 401, "AUTHENTICATION_FAILED"),
    ("wrong secret", {"secret": "x" * 43}, 401, "AUTHENTICATION_FAILED"),
    ("stale timestamp", {"now": NOW - 301}, 401, "REQUEST_EXPIRED"),
    ("future timestamp", {"now": NOW + 301}, 401, "REQUEST_EXPIRED"),
    (
        "signature over a re-serialised body",
        {"signed_body": json.dumps(event_body("ev-1"), indent=2).encode()},
        401,
        "AUTHENTICATION_FAILED",
    ),
    (
        "tampered body",
        {"body": raw(event_body("ev-1", currency="EUR")), "signed_body": raw(event_body("ev-1"))},
        401,
        "AUTHENTICATION_FAILED",
    ),
    (
        "signed for another target",
        {"target": PATH, "send_target": f"{PATH}?x=1"},
        401,
        "AUTHENTICATION_FAILED",
    ),
    ("idempotency key not signed", {"sign_key": "ev-other"}, 401, "AUTHENTICATION_FAILED"),
    ("missing field", {"body": raw(event_body("ev-1", round_id=None))}, 400, "VALIDATION_FAILED"),
    (
        "occurred_at not RFC 3339",
        {"body": raw(event_body("ev-1", occurred_at="yesterday"))},
        400,
        "VALIDATION_FAILED",
    ),
    ("not JSON", {"body": b"event_id=ev-1"}, 400, "VALIDATION_FAILED"),
    ("a JSON array", {"body": b"[]"}, 400, "VALIDATION_FAILED"),
    ("not UTF-8", {"body": b'{"event_id": "\xff"}'}, 400, "VALIDATION_FAILED"),
    (
        "duplicate member",
        {"body": b'{"event_id": "ev-1", "event_id": "ev-2"}'},
        400,
        "VALIDATION_FAILED",
    ),
    ("key differs from event_id", {"key": "ev-9"}, 400, "VALIDATION_FAILED"),
    ("too large", {"body": b"{" + b" " * (1024 * 1024) + b"}"}, 413, "PAYLOAD_TOO_LARGE"),
]


@pytest.mark.parametrize(
    ("options", "status", "code"),
    [row[1:] for row in REFUSALS],
    ids=[row[0] for row in REFUSALS],
)
def test_every_refusal_uses_the_spec_envelope_and_stores_nothing(
    client, harness, options, status, code
):
    body = options.get("body", raw(event_body("ev-1")))
    key = options.get("key", "ev-1")
    headers = signed_headers(
        body,
        now=options.get("now", NOW),
        secret=options.get("secret", SECRET),
        merchant_id=options.get("merchant_id", MERCHANT),
        idempotency_key=options.get("sign_key", key),
        target=options.get("target", PATH),
        signed_body=options.get("signed_body"),
    )
    headers["Idempotency-Key"] = key
    response = client.post(options.get("send_target", PATH), content=body, headers=headers)
    assert error_of(response) == (status, code)
    assert response.json()["error"]["retryable"] is False
    assert harness.store.events == {}
    assert harness.woken == []
    merchant = "none" if "merchant_id" in options else MERCHANT  # a configured one only
    assert harness.count("refused", code, merchant) == 1


def test_a_timestamp_at_the_edge_of_the_window_is_accepted(client):
    assert post_event(client, event_body("ev-a"), now=NOW - 300).status_code == 200
    assert post_event(client, event_body("ev-b"), now=NOW + 300).status_code == 200


def test_other_paths_and_methods_are_refused(client):
    assert error_of(client.post("/v1/other", content=b"{}")) == (404, "RESOURCE_NOT_FOUND")
    assert error_of(client.get(PATH)) == (405, "METHOD_NOT_ALLOWED")


def test_a_rotated_secret_is_accepted_beside_the_old_one_until_the_overlap_ends(
    client, harness, secret_file, keeper_clock
):
    secret_file.write_text(OLD_SECRET)  # rotate: SECRET becomes the previous one
    harness.keeper.refresh()
    old = post_event(client, event_body("ev-old"), now=NOW, secret=SECRET)
    new = post_event(client, event_body("ev-new"), now=NOW, secret=OLD_SECRET)
    assert (old.status_code, new.status_code) == (200, 200)
    keeper_clock.now += 61  # the overlap (60 s) is over
    late = post_event(client, event_body("ev-late"), now=NOW, secret=SECRET)
    assert error_of(late) == (401, "AUTHENTICATION_FAILED")
    assert post_event(client, event_body("ev-next"), now=NOW, secret=OLD_SECRET).status_code == 200


def test_a_replica_started_inside_an_overlap_accepts_the_named_previous_secret(
    served, secret_file, keeper_clock, tmp_path
):
    """Issue 29: without ``previous_secret_file`` a replica started after the rotation knows
    only the new secret and refuses callbacks still signed with the old one."""
    previous = tmp_path / "previous"
    previous.write_text(OLD_SECRET + "\n")
    keeper = SecretKeeper(
        {MERCHANT: SecretSource.file(secret_file)},
        previous={MERCHANT: SecretSource.file(previous)},
        overlap=60,
        clock=keeper_clock,
    )
    http, current = served
    current.receiver = Harness(keeper, Store(), CollectorRegistry()).receiver
    new = post_event(http, event_body("ev-new"), now=NOW, secret=SECRET)
    old = post_event(http, event_body("ev-old"), now=NOW, secret=OLD_SECRET)
    assert (new.status_code, old.status_code) == (200, 200)
    keeper_clock.now += 60  # the overlap, counted from the start, is over
    assert error_of(post_event(http, event_body("ev-late"), now=NOW, secret=OLD_SECRET)) == (
        401,
        "AUTHENTICATION_FAILED",
    )


def test_a_warehouse_outage_is_answered_503_with_retry_after_and_the_retry_is_stored(
    client, harness
):
    harness.store.down = True
    refused = post_event(client, event_body("ev-1"), now=NOW)
    assert error_of(refused) == (503, "DEPENDENCY_UNAVAILABLE")
    assert refused.json()["error"]["retryable"] is True
    assert refused.headers["retry-after"] == "5"
    assert harness.woken == []
    harness.store.down = False
    retried = post_event(client, event_body("ev-1"), now=NOW + 5)
    assert retried.status_code == 200
    assert list(harness.store.events) == ["ev-1"]
    assert len(harness.woken) == 1


def test_no_secret_or_signature_reaches_the_logs(client, harness):
    with structlog.testing.capture_logs() as logs:
        post_event(client, event_body("ev-1"), now=NOW, secret="x" * 43)
        post_event(client, event_body("ev-2"), now=NOW)
    text = repr(logs)
    assert "round_event_refused" in text
    assert SECRET not in text
    assert "x" * 43 not in text
    signature = signed_headers(raw(event_body("ev-2")), now=NOW, idempotency_key="ev-2")
    assert signature["X-Signature"] not in text


def test_the_receiver_verifies_with_an_inline_secret_too():
    keeper = SecretKeeper({MERCHANT: SecretSource.given(Secret(SECRET))})
    harness = Harness(keeper, Store(), CollectorRegistry())
    server = EventsServer(asgi_app(harness.receiver), host="127.0.0.1", port=0)
    with server, httpx.Client(base_url=f"http://127.0.0.1:{server.port}") as http:
        assert post_event(http, event_body("ev-1"), now=NOW).status_code == 200


def test_a_port_in_use_is_a_configuration_error_naming_the_variable(served):
    http, _current = served
    taken = http.base_url.port
    settings = replace(Settings(), events_port=taken, events_host="127.0.0.1")
    with (
        pytest.raises(
            ConfigurationError, match=f"RECORDSYNC_EVENTS_PORT: cannot listen on .*{taken}"
        ),
        receiving_round_events(
            settings,
            warehouse=None,
            secrets=SecretKeeper({}),
            syncs=None,
            metrics=None,
            replica_id="r1",
            stopper=Stopper(),
        ),
    ):
        pass
