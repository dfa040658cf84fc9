"""Round-end notifications: the platform's side of ``POST {merchant_url}/v1/round-events``.

Spec: Events, Round end; Authentication, Signature and Key rotation; Limits, Callback retry.
Every live round that ends is announced to its merchant's URL: the body (event_id,
external_player_id, currency, round_id, parent_round_id when the round is a child round, type
ROUND_ENDED, occurred_at) is serialised once and those exact bytes are signed and sent on every
attempt; Idempotency-Key is the event_id; X-Timestamp and X-Signature are fresh per attempt,
signed with the merchant's newest secret (so after ``rotate_secret`` the receiver sees the new
one, which it accepts during the overlap).

An event that is not accepted (``replies.read_reply``) is sent again with the same event_id
after 1 s, 5 s, 30 s, 2 min, 10 min, 30 min, then hourly, never sooner than a Retry-After asks,
all times multiplied by ``time_scale`` (tests use a small one); the spec shows no stopping
rule, so it gives up after ``max_retries`` retries.

Sending never runs on the thread that serves the API or makes live traffic: ``submit`` only
puts the event in a bounded queue (a full queue drops it and counts it) and a few worker
threads send.  The queue is ordered by due time, so an event waiting 30 s for its retry holds
up nobody.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import httpx
import orjson

from recordsync.platform.signing import format_timestamp, sign
from recordsync.sim.render import format_ms
from recordsync.sim.replies import Reply, read_reply, retry_after_seconds
from recordsync.sim.stats import EventStatsRecorder
from recordsync.sim.store import RoundEnd

EVENTS_PATH: Final = "/v1/round-events"
ROUND_ENDED: Final = "ROUND_ENDED"
# spec: Events, Round end, Delivery (and Limits, Callback retry): "then hourly".
RETRY_SCHEDULE_SECONDS: Final = (1.0, 5.0, 30.0, 120.0, 600.0, 1800.0, 3600.0)

# Attempts that got no reply, as counted in ``EventStats.failures``.
TIMEOUT: Final = "timeout"
CONNECTION: Final = "connection"


def retry_delay(retry: int, *, time_scale: float = 1.0, retry_after: float | None = None) -> float:
    """Seconds before retry number ``retry`` (1 = the first retry).

    The schedule's step, or the server's Retry-After when that is longer (it is honoured:
    never retry sooner than asked), both scaled by ``time_scale``.
    """
    step = RETRY_SCHEDULE_SECONDS[min(retry, len(RETRY_SCHEDULE_SECONDS)) - 1]
    if retry_after is not None:
        step = max(step, retry_after)
    return step * time_scale


def external_player_id(player_id: str) -> str:
    """The merchant's id of a player (the simulator has no merchant side: derived, stable)."""
    return f"ext-{player_id}"


def events_target(merchant_url: str) -> tuple[str, str]:
    """(the URL to POST to, the raw request target to sign): the same bytes go on the wire."""
    url = httpx.URL(merchant_url.rstrip("/") + EVENTS_PATH)
    return str(url), url.raw_path.decode("ascii")


@dataclass(frozen=True, slots=True)
class Announcement:
    """One round-end notification: the fields sent, and how its delivery went so far."""

    event_id: str
    round_id: str
    parent_round_id: str | None
    external_player_id: str
    currency: str
    occurred_at: str
    body: bytes  # the exact bytes sent (and signed) on every attempt
    attempts: int
    delivered: bool
    given_up: bool
    accepted_at: str | None  # from the receiver's acceptance


class EventChannel:
    """One merchant's way to its receiver: URL, newest secret, clock and statistics."""

    def __init__(
        self,
        merchant_id: str,
        merchant_url: str,
        *,
        secret: Callable[[], str],
        now: Callable[[], float],
        stats: EventStatsRecorder,
    ) -> None:
        self.merchant_id = merchant_id
        self.url, self.target = events_target(merchant_url)
        self.secret = secret
        self.now = now
        self.stats = stats
        self._lock = threading.Lock()
        self._deliveries: list[_Delivery] = []

    def __repr__(self) -> str:
        return f"EventChannel({self.merchant_id!r}, {self.url!r})"

    def new_delivery(self, end: RoundEnd) -> _Delivery:
        body: dict[str, str] = {
            "event_id": str(uuid.uuid4()),
            "external_player_id": external_player_id(end.player_id),
            "currency": end.currency,
            "round_id": end.round_id,
        }
        if end.parent_round_id is not None:
            body["parent_round_id"] = end.parent_round_id
        body["type"] = ROUND_ENDED
        body["occurred_at"] = format_ms(end.ended_ms)
        delivery = _Delivery(self, end, body["event_id"], orjson.dumps(body))
        with self._lock:
            self._deliveries.append(delivery)
        return delivery

    def announcements(self) -> tuple[Announcement, ...]:
        with self._lock:
            deliveries = list(self._deliveries)
        return tuple(delivery.announcement() for delivery in deliveries)


class _Delivery:
    """An event on its way: the exact body, the attempts so far, the outcome."""

    def __init__(self, channel: EventChannel, end: RoundEnd, event_id: str, body: bytes) -> None:
        self.channel = channel
        self.end = end
        self.event_id = event_id
        self.body = body
        self.attempts = 0
        self.delivered = False
        self.given_up = False
        self.accepted_at: str | None = None

    def announcement(self) -> Announcement:
        end = self.end
        return Announcement(
            event_id=self.event_id,
            round_id=end.round_id,
            parent_round_id=end.parent_round_id,
            external_player_id=external_player_id(end.player_id),
            currency=end.currency,
            occurred_at=format_ms(end.ended_ms),
            body=self.body,
            attempts=self.attempts,
            delivered=self.delivered,
            given_up=self.given_up,
            accepted_at=self.accepted_at,
        )


class EventSender:
    """A bounded queue of deliveries ordered by due time, drained by ``workers`` threads."""

    def __init__(
        self,
        *,
        time_scale: float = 1.0,
        timeout_seconds: float = 10.0,
        max_retries: int = 10,
        queue_size: int = 10_000,
        workers: int = 2,
        transport: httpx.BaseTransport | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._time_scale = time_scale
        self._max_retries = max_retries
        self._queue_size = queue_size
        self._worker_count = workers
        self._monotonic = monotonic
        self._transport = transport
        self._timeout = timeout_seconds
        self._http: httpx.Client | None = None
        self._heap: list[tuple[float, int, _Delivery]] = []
        self._order = itertools.count()
        self._in_flight = 0
        self._changed = threading.Condition()
        self._closed = False
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start the workers (again, after a ``stop``: what still waits is sent then)."""
        with self._changed:
            if self._threads:
                return
            self._closed = False
            # Accept-Encoding identity: the platform reads replies uncompressed (spec: Callbacks).
            self._http = http = httpx.Client(
                transport=self._transport,
                timeout=self._timeout,
                follow_redirects=False,
                trust_env=False,  # loopback receivers: no proxy from the environment
                headers={"Accept-Encoding": "identity"},
            )
            self._threads = threads = [
                threading.Thread(
                    target=self._work,
                    args=(http,),
                    name=f"recordsync-sim-events-{number}",
                    daemon=True,
                )
                for number in range(1, self._worker_count + 1)
            ]
        for thread in threads:
            thread.start()

    def stop(self) -> None:
        """Stop sending (an attempt in flight ends first); what waits stays queued."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            threads, self._threads = self._threads, []
            http, self._http = self._http, None
        for thread in threads:
            thread.join()
        if http is not None:
            http.close()

    @property
    def pending(self) -> int:
        with self._changed:
            return len(self._heap) + self._in_flight

    def submit(self, channel: EventChannel, ends: list[RoundEnd]) -> None:
        """Queue the ends' notifications to be sent at once; never blocks."""
        now = self._monotonic()
        with self._changed:
            for end in ends:
                if len(self._heap) + self._in_flight >= self._queue_size:
                    channel.stats.count("dropped")
                    continue
                delivery = channel.new_delivery(end)
                channel.stats.count("announced")
                heapq.heappush(self._heap, (now, next(self._order), delivery))
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued event is delivered or given up; False on timeout."""
        with self._changed:
            return self._changed.wait_for(
                lambda: not self._heap and not self._in_flight, timeout=timeout
            )

    def _next(self) -> _Delivery | None:
        with self._changed:
            while not self._closed:
                if self._heap:
                    wait = self._heap[0][0] - self._monotonic()
                    if wait <= 0:
                        _, _, delivery = heapq.heappop(self._heap)
                        self._in_flight += 1
                        return delivery
                    self._changed.wait(wait)
                else:
                    self._changed.wait()
            return None

    def _work(self, http: httpx.Client) -> None:
        while (delivery := self._next()) is not None:
            retry_after: float | None = None
            try:
                retry_after = self._attempt(http, delivery)
            finally:
                self._settle(delivery, retry_after)

    def _settle(self, delivery: _Delivery, retry_after: float | None) -> None:
        """After an attempt: done, given up, or back in the queue for its next retry."""
        stats = delivery.channel.stats
        with self._changed:
            self._in_flight -= 1
            if not delivery.delivered:
                retry = delivery.attempts  # the retry that comes next (1 = the first)
                if retry > self._max_retries:
                    delivery.given_up = True
                    stats.count("given_up")
                else:
                    due = self._monotonic() + retry_delay(
                        retry, time_scale=self._time_scale, retry_after=retry_after
                    )
                    heapq.heappush(self._heap, (due, next(self._order), delivery))
            self._changed.notify_all()

    def _attempt(self, http: httpx.Client, delivery: _Delivery) -> float | None:
        """Send once; the Retry-After asked for, if any."""
        channel = delivery.channel
        stats = channel.stats
        now = channel.now()
        timestamp = format_timestamp(now)
        signature = sign(
            channel.secret(),
            timestamp=timestamp,
            method="POST",
            target=channel.target,
            idempotency_key=delivery.event_id,
            body=delivery.body,
        )
        headers = {
            "Content-Type": "application/json",
            "X-Merchant-Id": channel.merchant_id,
            "X-Timestamp": timestamp,
            "X-Signature": signature,
            "Idempotency-Key": delivery.event_id,
        }
        if delivery.attempts:
            stats.count("retried")
        delivery.attempts += 1
        stats.count("sent")
        request = http.build_request("POST", channel.url, content=delivery.body, headers=headers)
        try:
            response = http.send(request, stream=True)
            try:
                body = b"".join(response.iter_raw())  # undecoded: a gzip reply stays gzip
            finally:
                response.close()
        except httpx.TimeoutException:
            stats.failure(TIMEOUT)
            return None
        except httpx.HTTPError:  # refused, reset, closed early, a broken framing
            stats.failure(CONNECTION)
            return None
        reply = Reply(
            response.status_code,
            {name.lower(): value for name, value in response.headers.items()},
            body,
        )
        verdict = read_reply(reply, delivery.event_id)
        stats.reply(reply.status, verdict.deviations)
        if verdict.accepted:
            delivery.accepted_at = verdict.accepted_at
            delivery.delivered = True
            stats.count("delivered")
            return None
        return retry_after_seconds(reply.headers.get("retry-after"), now=now)
