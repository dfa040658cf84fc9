"""Query validation over loopback: every rule of records and record-changes, and routing."""

from __future__ import annotations

import orjson
import pytest
from support.sim_platform import error_of, small_config

from recordsync.sim.render import format_ms

CURSORLESS_RECORDS = [
    ("created_from", "2026-01-01T00:00:00.000Z"),
    ("created_to", "2026-01-02T00:00:00.000Z"),
]


@pytest.mark.parametrize(
    "target",
    [
        "/v1/record-changes?from_now=true&from_now=true",
        "/v1/record-changes?from_now=true&limit=5&limit=5",
        (
            "/v1/records?created_from=2026-01-01T00%3A00%3A00Z"
            "&created_to=2026-01-01T01%3A00%3A00Z&created_to=2026-01-01T01%3A00%3A00Z"
        ),
        # the same name written two ways is still the same parameter once decoded
        "/v1/record-changes?from_now=true&%6Cimit=5&limit=5",
    ],
    ids=["from_now-twice", "limit-twice", "created_to-twice", "encoded-duplicate"],
)
def test_duplicate_query_parameters_are_rejected(platform, target):
    response = platform.get_target(target)
    assert response.status_code == 400
    assert error_of(response)["code"] == "VALIDATION_FAILED"


@pytest.mark.parametrize(
    "target",
    [
        "/v1/record-changes?from_now=true&foo=1",
        (
            "/v1/records?created_from=2026-01-01T00%3A00%3A00Z"
            "&created_to=2026-01-01T01%3A00%3A00Z&status=OPEN"
        ),
        "/v1/capabilities?verbose=1",
        "/v1/record-changes?from_now=true&",
    ],
    ids=["changes-foo", "records-status", "capabilities-verbose", "empty-pair"],
)
def test_unknown_or_empty_query_parameters_are_rejected(platform, target):
    response = platform.get_target(target)
    assert response.status_code == 400
    assert error_of(response)["code"] == "VALIDATION_FAILED"


@pytest.mark.parametrize(
    ("params", "status"),
    [
        (CURSORLESS_RECORDS, 200),
        ([("created_from", "2026-01-01T00:00:00Z"), ("created_to", "2026-01-01T00:00:00Z")], 400),
        ([("created_from", "2026-01-01T00:00:00Z"), ("created_to", "2025-12-31T00:00:00Z")], 400),
        (
            [("created_from", "2026-01-01T00:00:00Z"), ("created_to", "2026-01-02T00:00:00.001Z")],
            400,
        ),
        ([("created_from", "2026-01-01T00:00:00Z"), ("created_to", "2026-01-02T00:00:00Z")], 200),
        (
            [("created_from", "2026-01-01T09:00:00+09:00"), ("created_to", "2026-01-01T12:00:00Z")],
            200,
        ),
        (
            [("created_from", "2026-01-01T00:00:00.0001Z"), ("created_to", "2026-01-01T01:00:00Z")],
            400,
        ),
        (
            [
                ("created_from", "2026-01-01T00:00:00.000000Z"),
                ("created_to", "2026-01-01T01:00:00Z"),
            ],
            400,
        ),
        (
            [("created_from", "2026-01-01T00:00:00.5Z"), ("created_to", "2026-01-01T01:00:00.25Z")],
            200,
        ),
        ([("created_to", "2026-01-01T01:00:00Z")], 400),
        ([("created_from", "2026-01-01T00:00:00Z")], 400),
        ([], 400),
        ([("created_from", "yesterday"), ("created_to", "2026-01-01T01:00:00Z")], 400),
        ([("created_from", "2026-02-30T00:00:00Z"), ("created_to", "2026-03-01T01:00:00Z")], 400),
        ([("created_from", "2026-01-01T00:00:00"), ("created_to", "2026-01-01T01:00:00Z")], 400),
        ([*CURSORLESS_RECORDS, ("player_id", "not-a-uuid")], 400),
        ([*CURSORLESS_RECORDS, ("game_id", "00000000-0000-4000-8000-00000000000")], 400),
        ([*CURSORLESS_RECORDS, ("player_id", "00000000-0000-4000-8000-000000000000")], 200),
        ([*CURSORLESS_RECORDS, ("limit", "0")], 400),
        ([*CURSORLESS_RECORDS, ("limit", "1")], 200),
        ([*CURSORLESS_RECORDS, ("limit", "1000")], 200),
        ([*CURSORLESS_RECORDS, ("limit", "1001")], 400),
        ([*CURSORLESS_RECORDS, ("limit", "-1")], 400),
        ([*CURSORLESS_RECORDS, ("limit", "ten")], 400),
        ([*CURSORLESS_RECORDS, ("limit", "05")], 400),
        ([*CURSORLESS_RECORDS, ("limit", "")], 400),
    ],
    ids=[
        "24h-window",
        "zero-window",
        "negative-window",
        "24h-plus-1ms",
        "exactly-24h",
        "offset-times",
        "sub-millisecond",
        "microsecond-digits",
        "fewer-digits",
        "missing-created_from",
        "missing-created_to",
        "missing-both",
        "not-rfc3339",
        "impossible-date",
        "no-zone",
        "player-not-uuid",
        "game-short-uuid",
        "player-uuid",
        "limit-0",
        "limit-1",
        "limit-1000",
        "limit-1001",
        "limit-negative",
        "limit-word",
        "limit-leading-zero",
        "limit-empty",
    ],
)
def test_records_window_and_filter_rules(platform, params, status):
    response = platform.get("/v1/records", params)
    assert response.status_code == status, response.text
    if status == 400:
        assert error_of(response)["code"] == "VALIDATION_FAILED"


@pytest.mark.parametrize(
    "extra",
    [
        ("player_id", "00000000-0000-4000-8000-000000000000"),
        ("game_id", "00000000-0000-4000-8000-000000000000"),
        ("created_from", "2026-01-01T00:00:00Z"),
        ("created_to", "2026-01-01T01:00:00Z"),
    ],
    ids=["player_id", "game_id", "created_from", "created_to"],
)
def test_a_records_cursor_goes_alone_with_at_most_a_limit(platform, sim, extra):
    end = sim.now_ms()
    page = platform.data(
        "/v1/records",
        [
            ("created_from", format_ms(end - 86_400_000)),
            ("created_to", format_ms(end)),
            ("limit", "5"),
        ],
    )
    assert page["has_more"]
    cursor = page["next_cursor"]

    assert platform.get("/v1/records", [("cursor", cursor), ("limit", "7")]).status_code == 200
    assert platform.get("/v1/records", [("cursor", cursor)]).status_code == 200
    response = platform.get("/v1/records", [("cursor", cursor), extra])
    assert response.status_code == 400
    assert error_of(response)["code"] == "VALIDATION_FAILED"


def test_a_records_limit_above_the_configured_page_size_is_rejected(start_sim):
    _, platform = start_sim(small_config(max_page_size=50))
    assert platform.get("/v1/records", [*CURSORLESS_RECORDS, ("limit", "50")]).status_code == 200
    assert platform.get("/v1/records", [*CURSORLESS_RECORDS, ("limit", "51")]).status_code == 400


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ([("from_now", "true")], 200),
        ([("since", "2099-01-01T00:00:00Z")], 200),
        ([("since", "2099-01-01T00:00:00.123456789Z")], 200),
        ([], 400),
        ([("limit", "10")], 400),
        ([("from_now", "false")], 400),
        ([("from_now", "TRUE")], 400),
        ([("from_now", "1")], 400),
        ([("from_now", "")], 400),
        ([("from_now", "true"), ("since", "2099-01-01T00:00:00Z")], 400),
        ([("from_now", "true"), ("cursor", "abc.def")], 400),
        ([("since", "2099-01-01T00:00:00Z"), ("cursor", "abc.def")], 400),
        ([("since", "not a time")], 400),
        ([("from_now", "true"), ("limit", "0")], 400),
        ([("from_now", "true"), ("limit", "1001")], 400),
        ([("from_now", "true"), ("limit", "1000")], 200),
        ([("from_now", "true"), ("player_id", "00000000-0000-4000-8000-000000000000")], 400),
        ([("cursor", "")], 400),
        ([("cursor", "x" * 4097)], 400),
    ],
    ids=[
        "from_now",
        "since",
        "since-nanoseconds",
        "nothing",
        "only-limit",
        "from_now-false",
        "from_now-uppercase",
        "from_now-1",
        "from_now-empty",
        "from_now-and-since",
        "from_now-and-cursor",
        "since-and-cursor",
        "since-not-rfc3339",
        "limit-0",
        "limit-1001",
        "limit-1000",
        "unknown-filter",
        "empty-cursor",
        "cursor-too-long",
    ],
)
def test_record_changes_need_exactly_one_start(platform, params, status):
    response = platform.get("/v1/record-changes", params)
    assert response.status_code == status, response.text
    if status == 400:
        assert error_of(response)["code"] == "VALIDATION_FAILED"


@pytest.mark.parametrize(
    "target",
    ["/v1/unknown", "/v1/records/123", "/", "/v1/Records", "/v2/records", "/v1/records/"],
    ids=["unknown", "sub-path", "root", "case", "version", "trailing-slash"],
)
def test_other_paths_are_404_in_the_envelope_and_never_redirect(platform, target):
    response = platform.get_target(target)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert error_of(response)["code"] == "RESOURCE_NOT_FOUND"


def test_writes_are_refused_on_the_record_endpoints(platform):
    response = platform.http.post("/v1/records", content=b"{}")
    assert response.status_code == 405
    assert error_of(response)["code"] == "METHOD_NOT_ALLOWED"


def test_capabilities_describe_currencies_and_the_record_limits(start_sim):
    sim, platform = start_sim(small_config(record_requests=3, record_seconds=2, max_page_size=500))
    data = platform.data("/v1/capabilities")

    assert data["wallet_mode"] == "TRANSFER"
    assert {c["code"]: c["decimal_scale"] for c in data["currencies"]} == {
        "JPY": 0,
        "USD": 2,
        "EUR": 2,
        "USDT": 4,
    }
    assert data["operations"] == []
    limits = data["limits"]
    assert (limits["record_requests"], limits["record_seconds"]) == (3, 2)
    assert limits["max_page_size"] == 500
    assert set(limits) == {
        "query_requests",
        "query_seconds",
        "record_requests",
        "record_seconds",
        "max_page_size",
        "max_body_bytes",
    }
    # capabilities are not counted in the record rate limit
    for _ in range(5):
        assert platform.get("/v1/capabilities").status_code == 200
    assert sim.stats().rate_limit_violations == 0


def test_every_response_has_a_unique_request_id_and_json_content_type(platform):
    ids = set()
    for target in ("/v1/capabilities", "/v1/record-changes?from_now=true", "/nope", "/v1/records"):
        response = platform.get_target(target)
        assert response.headers["content-type"] == "application/json"
        ids.add(orjson.loads(response.content)["request_id"])
    assert len(ids) == 4
