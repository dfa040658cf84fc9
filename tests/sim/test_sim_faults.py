"""Every injected fault is observable over loopback and counted by kind."""

from __future__ import annotations

import email.utils
import socket
import time
from datetime import timedelta

import httpx
import orjson
import pytest
from support.sim_platform import error_of, sim_now, small_config

from recordsync.core.models import ChangesPage, Record, RecordsPage
from recordsync.core.times import format_time
from recordsync.platform.parsing import parse_changes_page, parse_records_page
from recordsync.platform.signing import format_timestamp, sign
from recordsync.sim import FaultRates, ManualClock
from recordsync.sim.stats import (
    BAD_RECORDS,
    CONNECTION_RESET,
    DUPLICATES,
    EXTRA_FIELDS,
    LATENCY,
    MALFORMED,
    PROJECTION_LAG,
    RATE_LIMITED,
    SERVER_ERROR,
)

CHANGES = "/v1/record-changes?from_now=true"


def records_params(sim, limit: int = 50) -> list[tuple[str, str]]:
    end = sim_now(sim)
    return [
        ("created_from", format_time(end - timedelta(hours=24))),
        ("created_to", format_time(end)),
        ("limit", str(limit)),
    ]


def changes_params(sim, limit: int = 50) -> list[tuple[str, str]]:
    return [("since", format_time(sim_now(sim) - timedelta(hours=24))), ("limit", str(limit))]


@pytest.mark.parametrize(
    ("faults", "status", "code", "kind"),
    [
        (FaultRates(projection_lag=1.0), 503, "PROJECTION_LAGGING", PROJECTION_LAG),
        (FaultRates(server_error=1.0), 500, "INTERNAL_ERROR", SERVER_ERROR),
    ],
    ids=["503-projection-lag", "500"],
)
def test_failed_requests_are_retryable_errors_on_both_endpoints(
    start_sim, faults, status, code, kind
):
    sim, platform = start_sim(small_config(faults=faults))

    for response in (
        platform.get("/v1/records", records_params(sim)),
        platform.get("/v1/record-changes", changes_params(sim)),
    ):
        assert response.status_code == status
        error = error_of(response)
        assert error["code"] == code
        assert error["retryable"] is True
    stats = sim.stats()
    assert stats.faults(kind) == 2
    assert stats.rate_limit_violations == 0
    sim.set_faults(FaultRates())
    assert platform.get("/v1/records", records_params(sim)).status_code == 200


def test_injected_429s_carry_retry_after_and_are_not_violations(start_sim):
    sim, platform = start_sim(
        small_config(record_requests=1, record_seconds=60, faults=FaultRates(rate_limited=1.0))
    )
    kinds = set()
    for _ in range(12):
        response = platform.get_target(CHANGES)
        assert response.status_code == 429
        assert error_of(response)["retryable"] is True
        value = response.headers["retry-after"]
        if value.isdigit():
            kinds.add("seconds")
        else:
            assert email.utils.parsedate_to_datetime(value) is not None
            kinds.add("http-date")

    assert kinds == {"seconds", "http-date"}
    sim.set_faults(FaultRates())
    # the injected refusals gave their place back: the one allowed request still goes through
    assert platform.get_target(CHANGES).status_code == 200
    stats = sim.stats()
    assert stats.faults(RATE_LIMITED) == 12
    assert stats.rate_limit_violations == 0


def signed_raw_request(sim, target: str) -> bytes:
    stamp = format_timestamp(time.time())
    signature = sign(sim.config.secret, timestamp=stamp, method="GET", target=target)
    host, port = sim.address
    return (
        f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nX-Merchant-Id: {sim.config.merchant_id}"
        f"\r\nX-Timestamp: {stamp}\r\nX-Signature: {signature}\r\n\r\n"
    ).encode()


def read_to_the_end(raw: socket.socket) -> None:
    while raw.recv(65536):
        pass


def test_a_connection_reset_closes_the_socket_with_rst_and_no_response(start_sim):
    sim, platform = start_sim(small_config(faults=FaultRates(connection_reset=1.0)))

    with socket.create_connection(sim.address, timeout=5) as raw:
        raw.sendall(signed_raw_request(sim, CHANGES))
        with pytest.raises(ConnectionResetError):
            read_to_the_end(raw)
    with pytest.raises(httpx.TransportError):
        platform.get_target(CHANGES)

    stats = sim.stats()
    assert stats.faults(CONNECTION_RESET) == 2
    assert stats.count("record-changes", 0) == 2


def test_latency_is_added_after_the_request_is_counted(start_sim):
    slept: list[float] = []
    monotonic = ManualClock(start=50.0)
    sim, platform = start_sim(
        small_config(
            record_requests=1,
            record_seconds=10,
            faults=FaultRates(latency_ms=150, latency_jitter_ms=50),
        ),
        sleep=slept.append,
        monotonic=monotonic,
    )

    assert platform.get_target(CHANGES).status_code == 200
    assert platform.get_target(CHANGES).status_code == 429  # refused before any latency

    assert len(slept) == 1
    assert 0.150 <= slept[0] <= 0.200
    assert sim.stats().faults(LATENCY) == 1


def test_real_latency_delays_the_answer(start_sim):
    _, platform = start_sim(small_config(faults=FaultRates(latency_ms=120)))
    started = time.monotonic()
    assert platform.get_target(CHANGES).status_code == 200
    assert time.monotonic() - started >= 0.12


def test_duplicated_stale_changes_ride_along_with_a_page(start_sim):
    sim, platform = start_sim(small_config())
    params = changes_params(sim, limit=40)
    clean = platform.data("/v1/record-changes", params)
    everything, _ = platform.changes_until_caught_up(
        [("since", format_time(sim_now(sim) - timedelta(days=3)))]
    )
    by_sequence = {c["sequence"]: c for c in everything}
    sim.set_faults(FaultRates(duplicates=1.0))

    spoiled = platform.data("/v1/record-changes", params)

    assert spoiled["next_cursor"]
    assert spoiled["has_more"] == clean["has_more"]
    extra = len(spoiled["items"]) - len(clean["items"])
    assert 1 <= extra <= 3
    clean_sequences = {c["sequence"] for c in clean["items"]}
    stale = list(spoiled["items"])
    for item in clean["items"]:
        stale.remove(item)
    for item in stale:
        assert item == by_sequence[item["sequence"]]  # a real, older change, sent again
        assert int(item["sequence"]) <= int(clean["items"][-1]["sequence"])
    assert all(c["sequence"] in clean_sequences for c in clean["items"])
    assert sim.stats().faults(DUPLICATES) == 1


def test_unknown_fields_appear_around_the_records_and_a_tolerant_parser_ignores_them(start_sim):
    sim, platform = start_sim(small_config(faults=FaultRates(extra_fields=1.0)))

    for path, params, parse in (
        ("/v1/records", records_params(sim), parse_records_page),
        ("/v1/record-changes", changes_params(sim), parse_changes_page),
    ):
        body = orjson.loads(platform.get(path, params).content)
        assert "x_sim_trace" in body
        data = body["data"]
        assert "x_sim_page_hint" in data
        assert data["items"]
        for item in data["items"]:
            record = item.get("record", item)
            assert "x_sim_extra" not in record  # a record's members are its data
            assert ("x_sim_extra" in item) == ("record" in item)
        page = parse(data)
        assert page.rejected == []
        assert all(record.extra_fields is None for record in _records(page))
    assert sim.stats().faults(EXTRA_FIELDS) == 2


def _records(page: RecordsPage | ChangesPage) -> list[Record]:
    if isinstance(page, RecordsPage):
        return page.records
    return [change.record for change in page.changes]


def test_bad_records_spoil_exactly_one_item_of_a_page(start_sim):
    sim, platform = start_sim(small_config(faults=FaultRates(bad_records=1.0)))
    for _ in range(5):
        records = parse_records_page(platform.data("/v1/records", records_params(sim)))
        changes = parse_changes_page(platform.data("/v1/record-changes", changes_params(sim)))
        assert len(records.rejected) == 1
        assert len(records.records) == 49
        assert len(changes.rejected) == 1
        assert len(changes.changes) == 49
    assert sim.stats().faults(BAD_RECORDS) == 10


def classify(platform, target: str) -> str:
    try:
        response = platform.get_target(target)
    except httpx.TransportError:
        return "short_body"
    assert response.status_code == 200
    if not response.headers["content-type"].startswith("application/json"):
        return "wrong_content_type"
    try:
        orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return "invalid_json" if b"\x00" in response.content else "truncated"
    return "valid"


def test_malformed_bodies_come_in_every_variant(start_sim):
    sim, platform = start_sim(small_config(faults=FaultRates(malformed=1.0)))
    target = "/v1/record-changes?from_now=true"
    seen = set()
    for _ in range(40):
        seen.add(classify(platform, target))
        if seen >= {"invalid_json", "truncated", "wrong_content_type", "short_body"}:
            break

    assert seen == {"invalid_json", "truncated", "wrong_content_type", "short_body"}
    stats = sim.stats()
    assert stats.faults(MALFORMED) >= 4
    assert stats.rate_limit_violations == 0


def test_fault_rates_are_validated():
    with pytest.raises(Exception, match="rate"):
        FaultRates(projection_lag=1.5).check()
    with pytest.raises(Exception, match="faults"):
        small_config(faults=FaultRates(duplicates=-0.1))
