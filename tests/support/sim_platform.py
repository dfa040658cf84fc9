"""A small signed-request helper for the simulator tests: signing + httpx, no client.

The real platform client is tested elsewhere; these tests talk to the simulator the way the
spec describes, byte for byte, so a simulator bug cannot hide behind a client bug.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson

from recordsync.core.times import format_time
from recordsync.platform.signing import build_target, format_timestamp, sign
from recordsync.sim import MerchantProfile, SimConfig, Simulator

Params = Iterable[tuple[str, str]]

SECRET = "test-secret-0123456789-abcdefghijklmnopqrst"
assert len(SECRET) == 43

# No rate limit unless a test asks for one: most tests are about something else.
UNLIMITED = 1_000_000


def small_config(**overrides: Any) -> SimConfig:
    """Two days of 300 rounds a day: big enough for several pages, built in milliseconds."""
    values: dict[str, Any] = {
        "merchant_id": "m-1",
        "secret": SECRET,
        "seed": 7,
        "history_days": 2,
        "rounds_per_day": 300,
        "record_requests": UNLIMITED,
    }
    values.update(overrides)
    return SimConfig(**values)


class Platform:
    """Signed GETs as one merchant (the default one unless told) over one keep-alive connection."""

    def __init__(
        self,
        sim: Simulator,
        *,
        clock: Callable[[], float] = time.time,
        merchant: MerchantProfile | None = None,
    ) -> None:
        self.sim = sim
        self.clock = clock
        profile = merchant if merchant is not None else sim.config.profiles[0]
        self.merchant_id = profile.merchant_id
        self.secret = profile.secret
        self.http = httpx.Client(
            base_url=sim.base_url,
            transport=httpx.HTTPTransport(retries=0),
            follow_redirects=False,
            timeout=30,
        )

    def close(self) -> None:
        self.http.close()

    def get_target(
        self,
        target: str,
        *,
        signed_target: str | None = None,
        merchant_id: str | None = None,
        secret: str | None = None,
        timestamp: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        stamp = timestamp if timestamp is not None else format_timestamp(self.clock())
        signature = sign(
            secret if secret is not None else self.secret,
            timestamp=stamp,
            method="GET",
            target=signed_target if signed_target is not None else target,
        )
        sent = {
            "X-Merchant-Id": merchant_id if merchant_id is not None else self.merchant_id,
            "X-Timestamp": stamp,
            "X-Signature": signature,
        }
        sent.update(headers or {})
        return self.http.get(target, headers=sent)

    def get(self, path: str, params: Params = (), **kwargs: Any) -> httpx.Response:
        return self.get_target(build_target(path, list(params)), **kwargs)

    def data(self, path: str, params: Params = ()) -> dict[str, Any]:
        response = self.get(path, params)
        assert response.status_code == 200, response.text
        body = orjson.loads(response.content)
        assert set(body) == {"data", "request_id"}
        data: dict[str, Any] = body["data"]
        return data

    # --- paging helpers ---------------------------------------------------------------

    def records_chain(
        self,
        created_from: datetime,
        created_to: datetime,
        *,
        limit: int = 1000,
        between_pages: Callable[[], None] | None = None,
        **filters: str,
    ) -> Iterator[dict[str, Any]]:
        """Every page of one records chain, calling ``between_pages`` before each next page."""
        params = [
            ("created_from", format_time(created_from)),
            ("created_to", format_time(created_to)),
            *filters.items(),
            ("limit", str(limit)),
        ]
        page = self.data("/v1/records", params)
        yield page
        while page["has_more"]:
            if between_pages is not None:
                between_pages()
            page = self.data(
                "/v1/records", [("cursor", page["next_cursor"]), ("limit", str(limit))]
            )
            yield page

    def all_records(self, created_from: datetime, created_to: datetime) -> list[dict[str, Any]]:
        """Records of [from, to) read in windows of 24 hours, one snapshot chain each."""
        items: list[dict[str, Any]] = []
        start = created_from
        while start < created_to:
            end = min(start + timedelta(hours=24), created_to)
            for page in self.records_chain(start, end):
                items.extend(page["items"])
            start = end
        return items

    def changes_until_caught_up(
        self, first: Params, *, limit: int = 1000
    ) -> tuple[list[dict[str, Any]], str]:
        """Every change from a start (since, from_now or cursor) to the end; and the cursor."""
        page = self.data("/v1/record-changes", [*first, ("limit", str(limit))])
        items = list(page["items"])
        while page["has_more"]:
            page = self.data(
                "/v1/record-changes", [("cursor", page["next_cursor"]), ("limit", str(limit))]
            )
            items.extend(page["items"])
        return items, page["next_cursor"]


def sim_now(sim: Simulator) -> datetime:
    return datetime.fromtimestamp(sim.now_ms() / 1000, UTC)


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = orjson.loads(response.content)
    assert set(body) == {"error", "request_id"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"code", "message", "retryable", "details"}
    return error
