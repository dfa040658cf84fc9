"""Round-end notifications from the simulator to a real loopback receiver (spec: Events, Round end).

The receiver (``round_receiver``) records the exact bytes; the tests verify the signatures
themselves with the merchant's secret.  ``events_time_scale`` makes the spec's 1 s, 5 s, 30 s
retry schedule milliseconds long.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from support.round_receiver import Answer, Received, Receiver, acceptance, running_receiver
from support.sim_platform import SECRET, Platform, small_config

from recordsync.core.errors import ConfigurationError
from recordsync.core.times import parse_time
from recordsync.sim import ManualClock, MerchantProfile, SimConfig, Simulator, running_simulator
from recordsync.sim.cli import build_parser, config_from

SCALE = 0.01  # the first retries come after 10 ms and 50 ms
EVENT_FIELDS = {"event_id", "external_player_id", "currency", "round_id", "type", "occurred_at"}
NEW_SECRET = "new-secret-0123456789-abcdefghijklmnopqrstu"
assert len(NEW_SECRET) == 43
REFUSAL = orjson.dumps(
    {"error": {"code": "BUSY", "message": "try later", "retryable": True}, "request_id": "r-1"}
)


@contextlib.contextmanager
def simulator_for(receiver: Receiver, **overrides: Any) -> Iterator[Simulator]:
    values: dict[str, Any] = {"events_url": receiver.url, "events_time_scale": SCALE}
    values.update(overrides)
    clock = values.pop("clock", time.time)
    with running_simulator(small_config(**values), clock=clock) as sim:
        yield sim


def test_each_live_round_that_ends_is_announced_signed_over_the_exact_bytes():
    with running_receiver() as receiver, simulator_for(receiver) as sim:
        sim.step(1500)  # live rounds end slowly: revisions are spread over the recent rounds
        assert sim.wait_events(5)
        stats = sim.stats().events
        truth = {record["round_id"]: record for record in sim.truth().values()}
    requests = receiver.requests
    assert stats.announced == stats.delivered == stats.sent == len(requests) > 10
    assert (stats.retried, stats.given_up, stats.dropped, stats.pending) == (0, 0, 0, 0)
    assert stats.total_deviations == 0
    assert stats.replies == {200: len(requests)}
    now = time.time()
    for request in requests:
        event = request.event
        assert request.method == "POST"
        assert request.target == "/v1/round-events"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["x-merchant-id"] == "m-1"
        assert request.headers["idempotency-key"] == event["event_id"]
        assert abs(int(request.headers["x-timestamp"]) - now) < 10
        assert request.signed_with(SECRET)
        assert EVENT_FIELDS <= set(event) <= {*EVENT_FIELDS, "parent_round_id"}
        assert event["type"] == "ROUND_ENDED"
        record = truth[event["round_id"]]
        assert record["status"] in {"SETTLED", "VOID"}
        assert event["currency"] == record["currency"]
        assert event.get("parent_round_id") == record["parent_round_id"]
        assert event["external_player_id"] == f"ext-{record['player_id']}"
        parse_time(event["occurred_at"], field="occurred_at")
    assert len({request.event["event_id"] for request in requests}) == len(requests)
    assert len({request.event["round_id"] for request in requests}) == len(requests)
    announced = sim.announced()
    assert sorted(item.body for item in announced) == sorted(request.body for request in requests)
    assert all(item.delivered and item.attempts == 1 for item in announced)
    assert all(item.accepted_at == "2026-01-02T03:04:05.678Z" for item in announced)


def test_no_events_url_sends_nothing_and_counts_nothing():
    with running_simulator(small_config()) as sim:
        sim.step(300)
        assert sim.wait_events(0)
        assert sim.announced() == ()
        assert sim.stats().events.announced == 0
        with pytest.raises(RuntimeError, match="no events_url"):
            sim.announce_hidden_round()


def test_a_failed_attempt_is_retried_with_the_same_event_id_bytes_and_a_fresh_timestamp():
    clock = ManualClock()

    def script(request: Received, number: int) -> Answer:
        clock.advance(1)  # so each attempt's X-Timestamp differs
        if number == 1:
            return Answer(500, REFUSAL)
        if number == 2:
            return Answer(delay=0.5)  # longer than the attempt's timeout
        return Answer()

    with (
        running_receiver(script) as receiver,
        simulator_for(receiver, clock=clock, events_timeout_seconds=0.2) as sim,
    ):
        sim.announce_hidden_round()
        assert sim.wait_events(5)
        stats = sim.stats().events
        (announced,) = sim.announced()
    first, second, third = receiver.wait_for(3)
    assert len(receiver.requests) == 3
    assert first.body == second.body == third.body == announced.body
    keys = {request.headers["idempotency-key"] for request in (first, second, third)}
    assert keys == {announced.event_id}
    timestamps = [request.headers["x-timestamp"] for request in (first, second, third)]
    assert len(set(timestamps)) == 3
    assert all(request.signed_with(SECRET) for request in (first, second, third))
    assert (stats.sent, stats.retried, stats.delivered, stats.given_up) == (3, 2, 1, 0)
    assert stats.replies == {500: 1, 200: 1}
    assert stats.failures == {"timeout": 1}
    assert stats.total_deviations == 0  # a 500 in the spec's envelope is a refusal, not a fault
    assert (announced.attempts, announced.delivered) == (3, True)


@pytest.mark.parametrize("status", [503, 429])
def test_retry_after_is_honoured(status):
    def script(request: Received, number: int) -> Answer:
        if number == 1:
            return Answer(
                status, REFUSAL, (("Content-Type", "application/json"), ("Retry-After", "20"))
            )
        return Answer()

    with running_receiver(script) as receiver, simulator_for(receiver) as sim:
        sim.announce_hidden_round()
        assert sim.wait_events(5)
        first, second = receiver.wait_for(2)
        assert sim.stats().events.delivered == 1
    # The schedule says 1 s (10 ms here); Retry-After asked for 20 s (200 ms here).
    assert second.at - first.at >= 20 * SCALE
    assert second.body == first.body


def test_the_retries_follow_the_spec_schedule_and_give_up_after_the_last():
    with (
        running_receiver(lambda request, number: Answer(500, b"oops", ())) as receiver,
        simulator_for(receiver, events_max_retries=3, events_time_scale=0.02) as sim,
    ):
        sim.announce_hidden_round()
        assert sim.wait_events(10)
        stats = sim.stats().events
        (announced,) = sim.announced()
    requests = receiver.requests
    assert len(requests) == 4  # the first try and three retries
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(requests)]
    for gap, step in zip(gaps, (1, 5, 30), strict=True):  # seconds, times the scale
        assert step * 0.02 <= gap < step * 0.02 + 0.5
    assert (stats.sent, stats.retried, stats.delivered, stats.given_up) == (4, 3, 0, 1)
    assert stats.deviation("error_envelope") == 4  # "oops" is not the spec's error envelope
    assert (announced.given_up, announced.delivered) == (True, False)


def _gzipped(request: Received) -> bytes:
    return gzip.compress(acceptance(request.event["event_id"]))


DEVIANT_REPLIES = {
    "extra_member": lambda request: Answer(
        body=orjson.dumps(
            {
                "data": {
                    "event_id": request.event["event_id"],
                    "accepted_at": "2026-01-02T03:04:05Z",
                    "note": "hi",
                },
                "request_id": "r",
            }
        )
    ),
    "content_type": lambda request: Answer(headers=(("Content-Type", "text/plain"),)),
    "compressed": lambda request: Answer(
        body=_gzipped(request),
        headers=(("Content-Type", "application/json"), ("Content-Encoding", "gzip")),
    ),
    "wrong_event_id": lambda request: Answer(body=acceptance("someone-else")),
}


@pytest.mark.parametrize("kind", list(DEVIANT_REPLIES), ids=list(DEVIANT_REPLIES))
def test_a_deviant_reply_is_counted_and_the_event_sent_again(kind):
    def script(request: Received, number: int) -> Answer:
        return DEVIANT_REPLIES[kind](request) if number == 1 else Answer()

    with running_receiver(script) as receiver, simulator_for(receiver) as sim:
        sim.announce_hidden_round()
        assert sim.wait_events(5)
        stats = sim.stats().events
    assert stats.deviations == {kind: 1}
    assert (stats.sent, stats.retried, stats.delivered) == (2, 1, 1)
    first, second = receiver.requests
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert first.headers["accept-encoding"] == "identity"


def test_after_a_rotation_callbacks_are_signed_with_the_new_secret():
    with running_receiver() as receiver, simulator_for(receiver) as sim:
        sim.announce_hidden_round()
        assert sim.wait_events(5)
        sim.rotate_secret("m-1", NEW_SECRET)
        sim.announce_hidden_round()
        assert sim.wait_events(5)
        sim.retire_secret("m-1")
        sim.announce_hidden_round()
        assert sim.wait_events(5)
        assert sim.stats().events.delivered == 3
    before, during, after = receiver.requests
    assert before.signed_with(SECRET)
    assert not before.signed_with(NEW_SECRET)
    for request in (during, after):
        assert request.signed_with(NEW_SECRET)
        assert not request.signed_with(SECRET)


def test_a_hidden_round_is_announced_but_absent_until_revealed():
    with running_receiver() as receiver, simulator_for(receiver) as sim:
        platform = Platform(sim)
        try:
            _, cursor = platform.changes_until_caught_up([("from_now", "true")])
            round_id = sim.announce_hidden_round()
            assert sim.wait_events(5)
            (event,) = receiver.events()
            assert event["round_id"] == round_id
            assert sim.announced()[0].round_id == round_id
            rounds = {record["round_id"] for record in sim.truth().values()}
            assert round_id not in rounds
            changes, cursor = platform.changes_until_caught_up([("cursor", cursor)])
            assert changes == []

            sim.reveal_round(round_id)
            changes, _ = platform.changes_until_caught_up([("cursor", cursor)])
        finally:
            platform.close()
        assert [change["record"]["round_id"] for change in changes] == [round_id, round_id]
        assert changes[-1]["record"]["status"] == "SETTLED"
        (record,) = (r for r in sim.truth().values() if r["round_id"] == round_id)
        assert f"ext-{record['player_id']}" == event["external_player_id"]
        assert record["currency"] == event["currency"]
        assert sim.stats().events.announced == 1  # revealing announces nothing more
        with pytest.raises(KeyError, match="no hidden round"):
            sim.reveal_round(round_id)


def test_merchants_share_a_url_told_apart_by_merchant_id_or_have_their_own():
    other_secret = "shop-2-secret-0123456789-abcdefghijklmnopq"
    own_secret = "shop-3-secret-0123456789-abcdefghijklmnopq"
    with running_receiver() as shared, running_receiver() as own:
        config = small_config(
            events_url=shared.url,
            events_time_scale=SCALE,
            merchants=(
                MerchantProfile("shop-2", other_secret, seed=8, rounds_per_day=100),
                MerchantProfile("shop-3", own_secret, seed=9, events_url=own.url),
            ),
        )
        with running_simulator(config) as sim:
            for merchant_id in sim.merchant_ids:
                sim.announce_hidden_round(merchant_id)
            assert sim.wait_events(5)
            assert sim.stats("shop-2").events.delivered == 1
            assert sim.stats().events.delivered == 3
    by_merchant = {request.headers["x-merchant-id"]: request for request in shared.requests}
    assert set(by_merchant) == {"m-1", "shop-2"}
    assert by_merchant["m-1"].signed_with(SECRET)
    assert by_merchant["shop-2"].signed_with(other_secret)
    (mine,) = own.requests
    assert mine.headers["x-merchant-id"] == "shop-3"
    assert mine.signed_with(own_secret)


def test_sending_never_holds_up_live_traffic_or_the_api():
    release = threading.Event()
    with running_receiver(lambda request, number: Answer()) as receiver:
        receiver.on_request = lambda: release.wait(5)  # a receiver that hangs
        with simulator_for(receiver, events_workers=1, events_timeout_seconds=5) as sim:
            platform = Platform(sim)
            try:
                sim.announce_hidden_round()
                receiver.wait_for(1)
                started = time.monotonic()
                sim.step(500)
                sim.announce_hidden_round()
                assert platform.get("/v1/capabilities").status_code == 200
                assert time.monotonic() - started < 2.5  # the receiver hangs for 5 s
                assert sim.stats().events.pending > 1
            finally:
                release.set()
                platform.close()
            assert sim.wait_events(5)


def test_a_full_queue_drops_round_ends_and_counts_them():
    # Not started: nothing is sent, so the queue of one fills at once.
    sim = Simulator(small_config(events_url="http://127.0.0.1:9", events_queue_size=1))
    for _ in range(3):
        sim.announce_hidden_round()
    stats = sim.stats().events
    assert (stats.announced, stats.dropped, stats.pending) == (1, 2, 1)
    assert len(sim.announced()) == 1
    sim.stop()


def test_events_wait_while_the_simulator_is_stopped_and_go_when_it_serves():
    with running_receiver() as receiver:
        sim = Simulator(small_config(events_url=receiver.url, events_time_scale=SCALE))
        try:
            sim.announce_hidden_round()
            assert not sim.wait_events(0.05)
            sim.start()
            assert sim.wait_events(5)
            sim.stop()
            sim.announce_hidden_round()
            sim.start()
            assert sim.wait_events(5)
        finally:
            sim.stop()
    assert len(receiver.requests) == 2
    assert sim.stats().events.delivered == 2


@pytest.mark.parametrize(
    "url", ["ftp://example.com", "http://", "http://h/x?a=1", "example.com"], ids=str
)
def test_a_bad_events_url_is_a_configuration_error(url):
    with pytest.raises(ConfigurationError, match="events_url"):
        SimConfig(events_url=url)
    with pytest.raises(ConfigurationError, match="events_url"):
        MerchantProfile("m", SECRET, events_url=url)


def test_the_cli_flag_sets_the_events_url():
    args = build_parser().parse_args(["--events-url", "http://127.0.0.1:9100"])
    assert config_from(args).events_url == "http://127.0.0.1:9100"
    assert config_from(build_parser().parse_args([])).events_url is None


def test_a_path_prefix_of_the_merchant_url_is_kept_and_signed():
    with running_receiver() as receiver:
        with simulator_for(receiver, events_url=receiver.url + "/hooks/") as sim:
            sim.announce_hidden_round()
            assert sim.wait_events(5)
        (request,) = receiver.requests
    assert request.target == "/hooks/v1/round-events"
    assert request.signed_with(SECRET)
