"""Several merchants on one port: each its own secret, history, rate limit, faults and stats."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from support.sim_platform import UNLIMITED, error_of, sim_now, small_config

from recordsync.core.errors import ConfigurationError
from recordsync.core.times import format_time
from recordsync.sim import FaultRates, ManualClock, MerchantProfile, SimConfig, Simulator
from recordsync.sim.config import derived_secret

CHANGES = "/v1/record-changes?from_now=true"
START = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def fleet(**overrides: object) -> SimConfig:
    """shop-1 .. shop-3 with seeds 7, 8, 9: small histories, no rate limit unless asked."""
    return small_config(merchant_id="shop", **overrides).with_merchants(3)


def limited_pair() -> SimConfig:
    """shop (2 record requests a minute) and big-shop (3 a minute): two separate windows."""
    big = MerchantProfile(
        merchant_id="big-shop",
        secret="big-shop-secret-" + "b" * 27,
        seed=11,
        history_days=1,
        rounds_per_day=100,
        record_requests=3,
        record_seconds=60,
    )
    return small_config(merchant_id="shop", record_requests=2, record_seconds=60, merchants=(big,))


# --- configuration ---------------------------------------------------------------------------


def test_with_merchants_derives_ids_seeds_and_43_character_secrets():
    config = fleet()
    profiles = config.profiles

    assert [p.merchant_id for p in profiles] == ["shop-1", "shop-2", "shop-3"]
    assert [p.seed for p in profiles] == [7, 8, 9]
    assert [p.secret for p in profiles] == [derived_secret(7, p.merchant_id) for p in profiles]
    assert all(len(p.secret) == 43 for p in profiles)
    assert len({p.secret for p in profiles}) == 3
    assert fleet().profiles == profiles, "the same seed derives the same merchants"
    assert all(p.record_requests == UNLIMITED and p.rounds_per_day == 300 for p in profiles)
    assert config.merchant_id == "shop-1"
    assert config.secret == profiles[0].secret


def test_a_single_merchant_configuration_is_one_profile_of_its_own_fields():
    config = small_config(previous_secret="previous-" + "p" * 34)
    (profile,) = config.profiles
    assert (profile.merchant_id, profile.secret, profile.previous_secret, profile.seed) == (
        "m-1",
        config.secret,
        config.previous_secret,
        7,
    )


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: small_config().with_merchants(0), ["must be >= 1, got 0"]),
        (
            lambda: small_config(merchants=(MerchantProfile(merchant_id="m-1", secret="s" * 43),)),
            ["'m-1' repeats"],
        ),
        (
            lambda: MerchantProfile(
                merchant_id="", secret="", record_requests=0, faults=FaultRates(server_error=2)
            ),
            ["merchant_id must not be empty", "secret must not be empty", "record_requests"],
        ),
    ],
    ids=["no-merchants", "repeated-id", "every-problem-of-a-profile-at-once"],
)
def test_bad_merchant_settings_are_configuration_errors(build, expected):
    with pytest.raises(ConfigurationError) as caught:
        build()
    for text in expected:
        assert text in str(caught.value)


def test_a_profiles_secrets_never_show_in_its_repr():
    profile = MerchantProfile(
        merchant_id="shop", secret="current-" + "c" * 35, previous_secret="old-" + "o" * 39
    )
    assert "current-" not in repr(profile)
    assert "old-" not in repr(profile)
    assert "current-" not in repr(small_config(merchants=(profile,)))


# --- histories -------------------------------------------------------------------------------


def test_each_merchant_has_its_own_history_and_its_seed_gives_it_again():
    clock = ManualClock(start=START)
    sim = Simulator(fleet(), clock=clock)
    truths = {merchant_id: sim.truth(merchant_id) for merchant_id in sim.merchant_ids}

    assert sim.merchant_ids == ("shop-1", "shop-2", "shop-3")
    assert all(len(truth) > 500 for truth in truths.values())
    record_ids = [set(truth) for truth in truths.values()]
    assert len(set.union(*record_ids)) == sum(map(len, record_ids)), "no record is shared"
    again = Simulator(fleet(), clock=clock)
    assert {merchant_id: again.truth(merchant_id) for merchant_id in again.merchant_ids} == truths
    alone = Simulator(small_config(seed=8), clock=clock)
    assert alone.truth() == truths["shop-2"], "a merchant's history depends on its seed alone"
    assert sim.truth() == truths["shop-1"], "None is the first merchant"


def test_each_merchant_reads_exactly_its_own_records_and_changes_over_one_port(start_sim, connect):
    sim, _ = start_sim(fleet())
    now = sim_now(sim)
    for profile in sim.config.profiles:
        platform = connect(sim, profile)
        records = platform.all_records(now - timedelta(days=3), now)
        changes, _ = platform.changes_until_caught_up(
            [("since", format_time(now - timedelta(days=3)))]
        )

        assert {r["record_id"]: r for r in records} == sim.truth(profile.merchant_id)
        assert changes[-1]["sequence"] == sim.watermark(profile.merchant_id)


def test_live_events_of_one_merchant_change_only_its_own_log():
    sim = Simulator(fleet(), clock=ManualClock(start=START))
    before = {merchant_id: sim.watermark(merchant_id) for merchant_id in sim.merchant_ids}

    sim.step(5, merchant_id="shop-2")

    after = {merchant_id: sim.watermark(merchant_id) for merchant_id in sim.merchant_ids}
    assert int(after["shop-2"]) == int(before["shop-2"]) + 5
    assert after["shop-1"] == before["shop-1"]
    assert after["shop-3"] == before["shop-3"]


def test_live_traffic_runs_for_every_merchant(start_sim):
    sim, _ = start_sim(fleet(live_rate=200.0))
    before = {merchant_id: int(sim.watermark(merchant_id)) for merchant_id in sim.merchant_ids}
    sim.start_live()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
        int(sim.watermark(merchant_id)) <= before[merchant_id] for merchant_id in before
    ):
        time.sleep(0.02)
    sim.stop_live()

    assert all(int(sim.watermark(merchant_id)) > before[merchant_id] for merchant_id in before)


# --- authentication --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "secret_of", [0, 1, 2], ids=["shop-1-secret", "shop-2-secret", "shop-3-secret"]
)
@pytest.mark.parametrize("merchant", [0, 1, 2], ids=["as-shop-1", "as-shop-2", "as-shop-3"])
def test_a_merchant_authenticates_with_its_own_secret_only(start_sim, merchant, secret_of):
    sim, platform = start_sim(fleet())
    profiles = sim.config.profiles
    claimed = profiles[merchant].merchant_id

    response = platform.get_target(CHANGES, merchant_id=claimed, secret=profiles[secret_of].secret)

    if merchant == secret_of:
        assert response.status_code == 200
        assert sim.stats(claimed).auth_failures == 0
    else:
        assert response.status_code == 401
        assert error_of(response)["code"] == "AUTHENTICATION_FAILED"
        assert sim.stats(claimed).auth_failures == 1, "counted for the merchant it claimed"
    others = [p.merchant_id for p in profiles if p.merchant_id != claimed]
    assert all(sim.stats(other).total_requests == 0 for other in others)


def test_an_unknown_merchant_is_401_and_counts_only_in_the_totals(start_sim):
    sim, platform = start_sim(fleet())

    response = platform.get_target(CHANGES, merchant_id="shop-4")

    assert response.status_code == 401
    assert error_of(response)["code"] == "AUTHENTICATION_FAILED"
    assert sim.stats().auth_failures == 1
    assert all(sim.stats(m).auth_failures == 0 for m in sim.merchant_ids)


# --- rate limits, capabilities, statistics, faults, cursors ----------------------------------


def test_a_saturated_merchant_never_limits_another(start_sim, connect):
    sim, shop = start_sim(limited_pair(), monotonic=ManualClock(start=1000.0))
    big = connect(sim, sim.config.profiles[1])

    shop_statuses, big_statuses = [], []
    for _ in range(3):  # shop goes over its limit of 2 while big-shop stays within its 3
        shop_statuses.append(shop.get_target(CHANGES).status_code)
        big_statuses.append(big.get_target(CHANGES).status_code)
    shop_statuses.append(shop.get_target(CHANGES).status_code)

    assert shop_statuses == [200, 200, 429, 429]
    assert big_statuses == [200, 200, 200]
    assert sim.stats("shop").rate_limit_violations == 2
    assert sim.stats("big-shop").rate_limit_violations == 0
    assert sim.stats("big-shop").count("record-changes", 429) == 0


def test_each_merchant_is_held_to_its_own_limit(start_sim, connect):
    sim, shop = start_sim(limited_pair(), monotonic=ManualClock(start=1000.0))
    big = connect(sim, sim.config.profiles[1])

    shop_statuses = [shop.get_target(CHANGES).status_code for _ in range(3)]
    big_statuses = [big.get_target(CHANGES).status_code for _ in range(4)]

    assert shop_statuses == [200, 200, 429]
    assert big_statuses == [200, 200, 200, 429]
    refused = big.get_target(CHANGES)
    assert "3 record requests in 60 s" in error_of(refused)["message"]
    assert sim.stats("shop").max_requests_in_window == 2
    assert sim.stats("big-shop").max_requests_in_window == 3
    assert sim.stats().max_requests_in_window == 3, "the busiest window, not a sum"
    assert sim.stats().rate_limit_violations == 1 + 2


def test_capabilities_report_the_asking_merchants_own_limits(start_sim, connect):
    sim, shop = start_sim(limited_pair())
    big = connect(sim, sim.config.profiles[1])

    shop_limits = shop.data("/v1/capabilities")["limits"]
    big_limits = big.data("/v1/capabilities")["limits"]

    assert (shop_limits["record_requests"], shop_limits["record_seconds"]) == (2, 60)
    assert (big_limits["record_requests"], big_limits["record_seconds"]) == (3, 60)
    assert big_limits["max_page_size"] == shop_limits["max_page_size"] == 1000


def test_statistics_are_kept_per_merchant_and_added_up_in_the_totals(start_sim, connect):
    sim, platform = start_sim(fleet())
    shop_2 = connect(sim, sim.config.profiles[1])
    sim.set_faults(FaultRates(server_error=1.0), merchant_id="shop-2")
    for _ in range(3):
        assert platform.get_target(CHANGES).status_code == 200
    for _ in range(2):
        assert shop_2.get_target(CHANGES).status_code == 500
    assert platform.get_target(CHANGES, merchant_id="nobody").status_code == 401
    assert platform.get("/v1/nothing-here").status_code == 404

    first, second, third, total = (
        sim.stats("shop-1"),
        sim.stats("shop-2"),
        sim.stats("shop-3"),
        sim.stats(),
    )
    assert first.count("record-changes", 200) == 3
    assert first.faults("server_error") == 0
    assert first.count("other") == 1, "a 404 is credited to the merchant it names"
    assert second.count("record-changes", 500) == 2
    assert second.faults("server_error") == 2
    assert third.total_requests == 0
    assert total.count("record-changes", 200) == 3
    assert total.count("record-changes", 500) == 2
    assert total.faults("server_error") == 2
    assert total.auth_failures == 1
    assert total.total_requests == 3 + 2 + 1 + 1


def test_cursors_are_bound_to_their_merchant_and_expire_per_merchant(start_sim, connect):
    sim, shop_1 = start_sim(fleet())
    shop_2 = connect(sim, sim.config.profiles[1])
    cursor_1 = shop_1.data("/v1/record-changes", [("from_now", "true")])["next_cursor"]
    cursor_2 = shop_2.data("/v1/record-changes", [("from_now", "true")])["next_cursor"]

    stolen = shop_2.get("/v1/record-changes", [("cursor", cursor_1)])
    assert stolen.status_code == 400
    assert error_of(stolen)["code"] == "CURSOR_INVALID"

    sim.expire_cursors("shop-2")
    expired = shop_2.get("/v1/record-changes", [("cursor", cursor_2)])
    assert expired.status_code == 410
    assert error_of(expired)["code"] == "CURSOR_EXPIRED"
    assert shop_1.get("/v1/record-changes", [("cursor", cursor_1)]).status_code == 200


def test_an_unknown_merchant_id_is_a_clear_error_in_process():
    sim = Simulator(fleet(), clock=ManualClock(start=START))
    with pytest.raises(KeyError, match="no merchant 'shop-9'"):
        sim.truth("shop-9")
    with pytest.raises(KeyError, match="no merchant 'shop-9'"):
        sim.rotate_secret("shop-9", "n" * 43)
