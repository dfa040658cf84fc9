"""The simulator refuses an optional endpoint to one merchant as told: an error, a stall, or
both; the record endpoints and the other merchants are served as usual."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from support.sim_platform import error_of, sim_now, small_config

from recordsync.core.errors import ConfigurationError
from recordsync.core.times import format_time
from recordsync.sim import FaultRates, MerchantProfile, Refusal
from recordsync.sim.cli import build_parser, config_from

OTHER = MerchantProfile(merchant_id="m-2", secret="m2-secret-0123456789abcdefghijklmnopqrstuv")


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (404, "RESOURCE_NOT_FOUND", False),
        (403, "FORBIDDEN", False),
        (500, "INTERNAL_ERROR", True),
    ],
    ids=["not-served", "no-scope", "server-error"],
)
def test_a_refused_endpoint_answers_its_error_to_that_merchant_only(
    start_sim, connect, status, code, retryable
):
    sim, platform = start_sim(small_config(merchants=(OTHER,)))
    sim.refuse("games", Refusal(status=status))
    response = platform.get("/v1/games")
    assert response.status_code == status
    error = error_of(response)
    assert (error["code"], error["retryable"]) == (code, retryable)
    assert platform.get("/v1/capabilities").status_code == 200
    assert platform.get("/v1/record-changes", [("from_now", "true")]).status_code == 200
    assert connect(sim, OTHER).get("/v1/games").status_code == 200
    assert sim.stats().faults("refused") == 1
    assert sim.stats(OTHER.merchant_id).faults("refused") == 0


def test_a_stall_answers_late_and_then_serves_or_errs(start_sim):
    sim, platform = start_sim()
    sim.refuse("games", Refusal(stall_seconds=0.3))
    started = time.monotonic()
    assert platform.get("/v1/games").status_code == 200
    assert time.monotonic() - started >= 0.3
    sim.refuse("games", Refusal(status=500, stall_seconds=0.2))
    started = time.monotonic()
    assert platform.get("/v1/games").status_code == 500
    assert time.monotonic() - started >= 0.2


def test_an_endpoint_served_again_answers_as_usual(start_sim):
    sim, platform = start_sim(small_config(refusals=(("capabilities", Refusal(status=404)),)))
    assert platform.get("/v1/capabilities").status_code == 404
    sim.refuse("capabilities", None)
    assert platform.get("/v1/capabilities").status_code == 200


def test_a_refused_request_is_not_counted_in_the_query_limit(start_sim):
    sim, platform = start_sim(small_config(query_requests=1, query_seconds=1))
    sim.refuse("games", Refusal(status=404))
    for _ in range(3):
        assert platform.get("/v1/games").status_code == 404
    sim.refuse("games", None)
    assert platform.get("/v1/games").status_code == 200
    assert sim.stats().query_limit_violations == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("404", Refusal(status=404)),
        ("stall:10", Refusal(stall_seconds=10.0)),
        ("stall:2.5,500", Refusal(status=500, stall_seconds=2.5)),
    ],
    ids=["status", "stall", "both"],
)
def test_a_refusal_is_read_from_its_short_form(text, expected):
    assert Refusal.parse(text) == expected


@pytest.mark.parametrize(
    "text", ["", "stall", "200", "slow:3", "stall:-1"], ids=["empty", "bare", "2xx", "kind", "neg"]
)
def test_a_malformed_refusal_is_a_configuration_error(text):
    with pytest.raises(ConfigurationError):
        Refusal.parse(text)


def test_only_an_optional_endpoint_can_be_refused():
    with pytest.raises(ConfigurationError, match="only the optional endpoints"):
        small_config(refusals=(("records", Refusal(status=404)),))


def test_the_cli_refuses_to_every_merchant_or_to_the_one_named():
    args = build_parser().parse_args(
        [
            "--merchants",
            "3",
            "--refuse",
            "games=404",
            "--refuse",
            "games=stall:10,500@demo-merchant-2",
        ]
    )
    refusals = {profile.merchant_id: profile.refusals for profile in config_from(args).profiles}
    assert refusals == {
        "demo-merchant-1": (("games", Refusal(status=404)),),
        "demo-merchant-2": (("games", Refusal(status=500, stall_seconds=10.0)),),
        "demo-merchant-3": (("games", Refusal(status=404)),),
    }


def test_the_cli_names_an_unknown_merchant_to_refuse_to():
    args = build_parser().parse_args(["--refuse", "games=404@nobody"])
    with pytest.raises(ConfigurationError, match="no merchant 'nobody'"):
        config_from(args)


def test_records_latency_slows_records_and_not_the_change_stream(start_sim):
    # Far apart (1.5 s against a bound of 1 s), so that a busy test machine is not measured.
    sim, platform = start_sim(small_config(faults=FaultRates(records_latency_ms=1500)))
    started = time.monotonic()
    assert platform.get("/v1/record-changes", [("from_now", "true")]).status_code == 200
    assert time.monotonic() - started < 1.0
    now = sim_now(sim)
    window = [
        ("created_from", format_time(now - timedelta(hours=1))),
        ("created_to", format_time(now)),
    ]
    started = time.monotonic()
    assert platform.get("/v1/records", window).status_code == 200
    assert time.monotonic() - started >= 1.5
