"""Authentication over loopback: every 401 code, the order of checks, the raw target, rotation."""

from __future__ import annotations

import time

import pytest
from support.sim_platform import error_of, small_config

from recordsync.core.errors import ConfigurationError
from recordsync.platform.signing import build_target, format_timestamp
from recordsync.sim import FaultRates

TARGET = "/v1/record-changes?from_now=true"


def now_stamp(offset: float = 0) -> str:
    return format_timestamp(time.time() + offset)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"merchant_id": "someone-else"}, "AUTHENTICATION_FAILED"),
        ({"merchant_id": ""}, "AUTHENTICATION_FAILED"),
        ({"secret": "x" * 43}, "AUTHENTICATION_FAILED"),
        ({"offset": -301}, "REQUEST_EXPIRED"),
        ({"offset": +301}, "REQUEST_EXPIRED"),
        ({"timestamp": "123456789"}, "REQUEST_EXPIRED"),
        ({"timestamp": "17000000000"}, "REQUEST_EXPIRED"),
        ({"timestamp": ""}, "REQUEST_EXPIRED"),
        ({"signed_target": "/v1/record-changes?from_now=false"}, "AUTHENTICATION_FAILED"),
        # Checked in the spec's order: the merchant first, then the time, then the signature.
        ({"merchant_id": "nobody", "offset": -1000}, "AUTHENTICATION_FAILED"),
        ({"offset": -1000, "secret": "y" * 43}, "REQUEST_EXPIRED"),
    ],
    ids=[
        "unknown-merchant",
        "empty-merchant",
        "wrong-secret",
        "timestamp-301s-old",
        "timestamp-301s-ahead",
        "timestamp-9-digits",
        "timestamp-11-digits",
        "timestamp-empty",
        "signature-over-another-target",
        "merchant-checked-before-time",
        "time-checked-before-signature",
    ],
)
def test_authentication_failures_answer_401_with_the_spec_code(platform, sim, kwargs, code):
    kwargs = dict(kwargs)
    if "offset" in kwargs:
        kwargs["timestamp"] = now_stamp(kwargs.pop("offset"))
    response = platform.get_target(TARGET, **kwargs)

    assert response.status_code == 401
    error = error_of(response)
    assert error["code"] == code
    assert error["retryable"] is False
    assert sim.stats().auth_failures == 1


def test_timestamps_within_300_seconds_either_way_are_accepted(platform):
    for offset in (-295, 295):
        assert platform.get_target(TARGET, timestamp=now_stamp(offset)).status_code == 200


@pytest.mark.parametrize(
    "signature",
    ["", "0" * 63, "A" * 64, "g" * 64],
    ids=["missing", "63-chars", "uppercase", "not-hex"],
)
def test_malformed_signatures_fail_authentication(platform, signature):
    stamp = now_stamp()
    response = platform.http.get(
        TARGET,
        headers={"X-Merchant-Id": "m-1", "X-Timestamp": stamp, "X-Signature": signature},
    )
    assert response.status_code == 401
    assert error_of(response)["code"] == "AUTHENTICATION_FAILED"


def test_the_signature_covers_the_raw_target_not_a_decoded_one(platform):
    """The target is signed percent-encoded; a verifier that decoded it first would refuse."""
    target = build_target("/v1/record-changes", [("since", "2099-01-01T00:00:00.000Z")])
    assert "%3A" in target
    decoded = target.replace("%3A", ":")

    assert platform.get_target(target).status_code == 200
    refused = platform.get_target(target, signed_target=decoded)
    assert refused.status_code == 401
    assert error_of(refused)["code"] == "AUTHENTICATION_FAILED"


def test_the_previous_secret_is_accepted_during_a_rotation(start_sim):
    _, platform = start_sim(small_config(previous_secret="old-secret-" + "o" * 32))

    assert platform.get_target(TARGET).status_code == 200
    assert platform.get_target(TARGET, secret="old-secret-" + "o" * 32).status_code == 200
    assert platform.get_target(TARGET, secret="z" * 43).status_code == 401


def test_a_skewed_simulator_clock_expires_honest_requests(start_sim):
    sim, platform = start_sim()
    sim.set_faults(FaultRates(clock_skew_seconds=400))

    response = platform.get_target(TARGET)

    assert response.status_code == 401
    assert error_of(response)["code"] == "REQUEST_EXPIRED"
    sim.set_faults(FaultRates())
    assert platform.get_target(TARGET).status_code == 200


def test_capabilities_need_authentication_too(platform):
    assert platform.get("/v1/capabilities").status_code == 200
    response = platform.get("/v1/capabilities", secret="w" * 43)
    assert response.status_code == 401


def test_failed_authentication_does_not_use_the_rate_limit(start_sim):
    sim, platform = start_sim(small_config(record_requests=1, record_seconds=60))
    for _ in range(3):
        assert platform.get_target(TARGET, secret="v" * 43).status_code == 401

    assert platform.get_target(TARGET).status_code == 200
    assert sim.stats().rate_limit_violations == 0


NEW_SECRET = "new-secret-" + "n" * 32
NEWER_SECRET = "newer-secret-" + "w" * 30


def test_a_rotation_accepts_both_secrets_then_only_the_new_one(start_sim):
    sim, platform = start_sim()
    old = platform.secret

    sim.rotate_secret("m-1", NEW_SECRET)
    during = [
        platform.get_target(TARGET, secret=secret).status_code for secret in (old, NEW_SECRET)
    ]
    sim.retire_secret("m-1")
    after = [platform.get_target(TARGET, secret=secret).status_code for secret in (old, NEW_SECRET)]

    assert during == [200, 200]
    assert after == [401, 200]
    assert sim.stats().auth_failures == 1


def test_rotating_again_during_an_overlap_drops_the_oldest_secret(start_sim):
    sim, platform = start_sim()
    old = platform.secret

    sim.rotate_secret("m-1", NEW_SECRET)
    sim.rotate_secret("m-1", NEWER_SECRET)

    statuses = [
        platform.get_target(TARGET, secret=secret).status_code
        for secret in (old, NEW_SECRET, NEWER_SECRET)
    ]
    assert statuses == [401, 200, 200]


def test_a_rotation_changes_only_that_merchants_secrets(start_sim):
    sim, platform = start_sim(small_config(merchant_id="shop").with_merchants(2))
    other = sim.config.profiles[1]

    sim.rotate_secret("shop-2", NEW_SECRET)
    sim.retire_secret("shop-2")

    assert platform.get_target(TARGET).status_code == 200  # shop-1, untouched
    assert platform.get_target(TARGET, merchant_id="shop-1", secret=NEW_SECRET).status_code == 401
    assert platform.get_target(TARGET, merchant_id="shop-2", secret=NEW_SECRET).status_code == 200
    assert platform.get_target(TARGET, merchant_id="shop-2", secret=other.secret).status_code == 401


def test_an_empty_new_secret_is_refused_without_showing_a_secret(start_sim):
    sim, platform = start_sim()
    with pytest.raises(ConfigurationError) as caught:
        sim.rotate_secret("m-1", "")
    assert platform.secret not in str(caught.value)
    assert platform.get_target(TARGET).status_code == 200
