"""The fair share: every replica computes the same targets, moves converge to floor/ceil of
N/K with every merchant held, joins and departures move few merchants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recordsync.fleet.share import plan_moves, targets


def settle(merchants, replicas, holders, rounds=50):
    """Let every replica apply its moves in turn until nobody moves; returns the rounds used."""
    holders = dict(holders)
    for number in range(rounds):
        moved = False
        for me in replicas:
            moves = plan_moves(me, merchants=merchants, live=replicas, holders=holders)
            for merchant in moves.release:
                assert holders.pop(merchant) == me
                moved = True
            for merchant in moves.acquire:
                if merchant not in holders:  # a lock: the first one gets it
                    holders[merchant] = me
                    moved = True
        if not moved:
            return holders, number
    raise AssertionError(f"no convergence in {rounds} rounds: {holders}")


def assert_balanced(merchants, replicas, holders):
    assert set(holders) == set(merchants)
    assert set(holders.values()) <= set(replicas)
    counts = [sum(1 for holder in holders.values() if holder == replica) for replica in replicas]
    low, high = len(merchants) // len(replicas), -(-len(merchants) // len(replicas))
    assert all(low <= count <= high for count in counts), counts


@pytest.mark.parametrize(
    ("merchants", "replicas", "expected"),
    [
        (5, ["a", "b"], {"a": 3, "b": 2}),
        (6, ["b", "a", "c"], {"a": 2, "b": 2, "c": 2}),
        (1, ["a", "b"], {"a": 1, "b": 0}),
        (0, ["a"], {"a": 0}),
    ],
    ids=["5-over-2", "6-over-3", "fewer-merchants", "none"],
)
def test_targets_split_the_merchants_floor_or_ceil(merchants, replicas, expected):
    assert targets(merchants, replicas) == expected


@settings(max_examples=150, deadline=None)
@given(
    merchants=st.integers(min_value=0, max_value=25),
    replicas=st.integers(min_value=1, max_value=6),
    data=st.data(),
)
def test_any_start_settles_balanced_with_every_merchant_held(merchants, replicas, data):
    names = [f"m{n}" for n in range(merchants)]
    ids = [f"r{n}" for n in range(replicas)]
    start = {
        merchant: holder
        for merchant in names
        if (holder := data.draw(st.sampled_from([None, *ids]))) is not None
    }
    holders, _rounds = settle(names, ids, start)
    assert_balanced(names, ids, holders)


def test_a_departure_moves_only_the_departed_replicas_merchants():
    names = [f"m{n}" for n in range(12)]
    holders, _ = settle(names, ["r0", "r1", "r2"], {})
    survivors = ["r0", "r2"]
    kept = {merchant: holder for merchant, holder in holders.items() if holder in survivors}
    after, _ = settle(names, survivors, kept)
    assert_balanced(names, survivors, after)
    assert all(after[merchant] == holder for merchant, holder in kept.items())


def test_a_join_takes_its_share_and_moves_no_more_than_that():
    names = [f"m{n}" for n in range(12)]
    holders, _ = settle(names, ["r0", "r1"], {})
    after, _ = settle(names, ["r0", "r1", "r2"], holders)
    assert_balanced(names, ["r0", "r1", "r2"], after)
    moved = [merchant for merchant in names if after[merchant] != holders[merchant]]
    assert len(moved) == 4
    assert all(after[merchant] == "r2" for merchant in moved)


def test_a_dead_replicas_merchants_are_taken_once_its_heartbeat_is_stale():
    names = [f"m{n}" for n in range(6)]
    # r2 died: its locks are gone with its session, so its merchants are free.
    holders = {"m0": "r0", "m1": "r0", "m2": "r1", "m3": "r1"}
    still_fresh = ["r0", "r1", "r2"]
    assert plan_moves("r0", merchants=names, live=still_fresh, holders=holders).acquire == ()
    stale = ["r0", "r1"]
    first = plan_moves("r0", merchants=names, live=stale, holders=holders)
    second = plan_moves("r1", merchants=names, live=stale, holders=holders)
    assert len(first.acquire) == 1
    assert len(second.acquire) == 1
    assert {*first.acquire, *second.acquire} <= {"m4", "m5"}


def test_nothing_is_released_while_nobody_else_needs_it():
    names = ["m0", "m1", "m2"]
    holders = {"m0": "r0", "m1": "r0", "m2": "r0"}
    # r1 is live by its heartbeat yet already holds its share of another configuration.
    moves = plan_moves("r0", merchants=names, live=["r0"], holders=holders)
    assert moves.release == ()
    moves = plan_moves("r0", merchants=names, live=["r0", "r1"], holders=holders)
    assert len(moves.release) == 1


def test_a_second_replica_for_one_merchant_changes_nothing():
    holders = {"m0": "r1"}
    for me in ("r0", "r1"):
        moves = plan_moves(me, merchants=["m0"], live=["r0", "r1"], holders=holders)
        assert moves.acquire == ()
        assert moves.release == ()


# -- replicas whose configurations differ --------------------------------


def settle_known(knows, holders, rounds=50):
    """``settle`` with each replica configured with its own merchants."""
    holders = dict(holders)
    for number in range(rounds):
        moved = False
        for me, merchants in knows.items():
            moves = plan_moves(me, merchants=merchants, live=knows, holders=holders)
            for merchant in moves.release:
                assert holders.pop(merchant) == me
                moved = True
            for merchant in moves.acquire:
                assert merchant in merchants, "only a merchant this replica knows"
                if merchant not in holders:
                    holders[merchant] = me
                    moved = True
        if not moved:
            return holders, number
    raise AssertionError(f"no convergence in {rounds} rounds: {holders}")


def test_a_merchant_only_one_replica_knows_is_held_whatever_the_shares():
    """A rolling update added a fifth merchant to one replica: the other held 1, this one its
    ceiling of 3 of the common ones, and nobody held the fifth for as long as it lasted."""
    common = ["m1", "m2", "m3", "m4"]
    knows = {"old": common, "new": [*common, "m5"]}
    stuck = {"m1": "new", "m2": "new", "m3": "new", "m4": "old"}
    holders, _ = settle_known(knows, stuck)
    assert set(holders) == {"m1", "m2", "m3", "m4", "m5"}
    assert holders["m5"] == "new"
    counts = sorted(list(holders.values()).count(replica) for replica in knows)
    assert counts == [2, 3]


def test_an_older_replica_that_says_nothing_is_taken_to_know_the_askers_merchants():
    merchants = ["m1", "m2", "m3", "m4"]
    moves = plan_moves("new", merchants=merchants, live={"new": merchants, "old": None}, holders={})
    assert len(moves.acquire) == 2


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_every_known_merchant_is_held_and_no_replica_could_take_one_off_a_busier_one(data):
    merchants = [f"m{n}" for n in range(data.draw(st.integers(0, 14)))]
    replicas = [f"r{n}" for n in range(data.draw(st.integers(1, 4)))]
    knows = {
        replica: sorted(data.draw(st.sets(st.sampled_from(merchants))) if merchants else [])
        for replica in replicas
    }
    start = {
        merchant: holder
        for merchant in merchants
        if (holder := data.draw(st.sampled_from([None, *replicas]))) is not None
        and merchant in knows[holder]
    }
    holders, _ = settle_known(knows, start)
    known = {merchant for configured in knows.values() for merchant in configured}
    assert set(holders) == known
    load = {replica: list(holders.values()).count(replica) for replica in replicas}
    for merchant, holder in holders.items():
        assert merchant in knows[holder]
        for other in replicas:
            if merchant in knows[other]:
                assert load[holder] - load[other] <= 1, (merchant, holder, other, load)


def test_a_merchant_free_two_ticks_running_is_taken_whoever_it_is_assigned_to():
    """A kill -9: the dead replica's locks are gone, its heartbeat still fresh, so the
    assignment may name it; a merchant nobody took for a tick is taken by anyone knowing it."""
    names = ["m0", "m1"]
    holders = {"m0": "alive"}
    assigned = plan_moves("alive", merchants=names, live=["alive", "dead"], holders=holders)
    assert assigned.acquire == ()  # the dead one, as least loaded, is named
    overdue = plan_moves(
        "alive", merchants=names, live=["alive", "dead"], holders=holders, overdue={"m1"}
    )
    assert overdue.acquire == ("m1",)
