"""The membership loop over an in-memory fleet: balance, takeover after a death, hand-over to
a newcomer with never two writers, a lost lease, a graceful leave, a lost connection."""

from __future__ import annotations

import threading

import pytest
from structlog.testing import capture_logs

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.core.stopping import Stopper
from recordsync.fleet.member import Member

STALE_AFTER = 6.0


class FakeDatabase:
    """Locks that die with their session, epochs, and heartbeats on the database's clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.locks: dict[str, str] = {}
        self.epochs: dict[str, int] = {}
        self.heartbeats: dict[str, float] = {}
        self.running: dict[str, set[str]] = {}  # merchant -> replicas syncing it right now
        self.configured: dict[str, frozenset[str]] = {}  # replica -> the merchants it knows

    def kill(self, replica: str) -> None:
        """kill -9: the session ends, the database frees its locks; the heartbeat row stays."""
        self.locks = {m: r for m, r in self.locks.items() if r != replica}


class FakeSession:
    exclusive = False

    def __init__(self, db: FakeDatabase, replica: str) -> None:
        self.db, self.replica = db, replica
        self.down = False
        self.heartbeat_fails = False  # a pool write fails; the lock connection is fine
        self.bug = False

    def _check(self) -> None:
        if self.down:
            raise WarehouseUnavailableError("connection lost")

    def try_hold(self, merchant_id):
        self._check()
        if merchant_id in self.db.locks:
            return None
        self.db.locks[merchant_id] = self.replica
        self.db.epochs[merchant_id] = self.db.epochs.get(merchant_id, 0) + 1
        return self.db.epochs[merchant_id]

    def release(self, merchant_id):
        # Never raises (the real one's contract): a lost connection freed the lock anyway.
        if self.db.locks.get(merchant_id) == self.replica:
            del self.db.locks[merchant_id]

    def confirmed(self, merchant_id):
        """The keeper's view: a lock seen held lately, on a connection that answers."""
        return not self.down and self.db.locks.get(merchant_id) == self.replica

    def still_held(self):
        self._check()
        return frozenset(m for m, r in self.db.locks.items() if r == self.replica)

    def heartbeat(self, merchants_held, *, merchants=None):
        self._check()
        if merchants is not None:
            self.db.configured[self.replica] = frozenset(merchants)
        if self.bug:
            raise KeyError("a bug in the tick")
        if self.heartbeat_fails:
            raise WarehouseUnavailableError("heartbeat: the pool's connection was reset")
        self.db.heartbeats[self.replica] = self.db.now

    def live_replicas(self, stale_after):
        self._check()
        return {
            r: self.db.configured.get(r)
            for r, at in sorted(self.db.heartbeats.items())
            if self.db.now - at < stale_after
        }

    def holders(self):
        self._check()
        return dict(self.db.locks)

    def wait_for_change(self, timeout):
        self._check()
        return False

    def leave(self):
        self.db.locks = {m: r for m, r in self.db.locks.items() if r != self.replica}
        self.db.heartbeats.pop(self.replica, None)


class FakeSyncs:
    def __init__(self, db: FakeDatabase, replica: str) -> None:
        self.db, self.replica = db, replica
        self.epochs: dict[str, int] = {}
        self.events: list[tuple[str, str]] = []

    def start(self, merchant_id, epoch):
        others = self.db.running.setdefault(merchant_id, set())
        assert not others, f"{merchant_id}: {self.replica} starts while {others} still write"
        others.add(self.replica)
        self.epochs[merchant_id] = epoch
        self.events.append(("start", merchant_id))

    def stop(self, merchant_id):
        self.db.running.get(merchant_id, set()).discard(self.replica)
        self.epochs.pop(merchant_id, None)
        self.events.append(("stop", merchant_id))

    def running(self):
        return frozenset(self.epochs)


MERCHANTS = [f"brand-{n}" for n in range(7)]


def member(db, replica, merchants=MERCHANTS):
    session, syncs = FakeSession(db, replica), FakeSyncs(db, replica)
    return Member(
        session,
        syncs,
        replica_id=replica,
        merchants=merchants,
        stopper=Stopper(),
        stale_after=STALE_AFTER,
    )


def tick(db, members, seconds=2.0, rounds=1):
    for _ in range(rounds):
        for one in members:
            one.step()
        db.now += seconds


def counts(members):
    return sorted(len(one.held) for one in members)


def assert_settled(db, members):
    assert sorted(db.locks) == sorted(MERCHANTS)
    for one in members:
        assert one.held == {m for m, r in db.locks.items() if r == one.replica_id}
        assert set(one.syncs.running()) == one.held
    low, high = counts(members)[0], counts(members)[-1]
    assert high - low <= 1


def test_three_replicas_share_seven_merchants_within_one():
    db = FakeDatabase()
    members = [member(db, f"r{n}") for n in range(3)]
    tick(db, members, rounds=4)
    assert_settled(db, members)
    assert counts(members) == [2, 2, 3]
    starts = [event for one in members for event in one.syncs.events if event[0] == "start"]
    for merchant in MERCHANTS:  # every start under a new epoch, none twice
        assert db.epochs[merchant] == starts.count(("start", merchant))


def test_a_dead_replicas_merchants_are_taken_over_at_once_and_balanced_once_it_is_stale():
    db = FakeDatabase()
    members = [member(db, f"r{n}") for n in range(3)]
    tick(db, members, rounds=4)
    dead = members.pop()
    lost = set(dead.held)
    epochs = dict(db.epochs)
    db.kill(dead.replica_id)
    dead.syncs.epochs.clear()
    db.running = {m: {r for r in rs if r != dead.replica_id} for m, rs in db.running.items()}
    seconds = 0.0
    while set(db.locks) != set(MERCHANTS):
        tick(db, members)
        seconds += 2.0
        # Free two ticks running: taken, though the dead one's heartbeat is not stale yet.
        assert seconds <= 4.0, "every merchant held within two ticks of the kill"
    tick(db, members, rounds=5)  # the dead one goes stale: the shares even out
    assert_settled(db, members)
    assert all(db.epochs[m] > epochs[m] for m in lost)  # a new holder, a new epoch


def test_a_newcomer_gets_its_share_through_clean_hand_overs():
    db = FakeDatabase()
    members = [member(db, f"r{n}") for n in range(2)]
    tick(db, members, rounds=4)
    before = dict(db.locks)
    members.append(member(db, "r2"))
    tick(db, members, rounds=6)  # FakeSyncs.start asserts one writer at a time throughout
    assert_settled(db, members)
    moved = [m for m in MERCHANTS if db.locks[m] != before[m]]
    assert len(moved) == 2
    assert all(db.locks[m] == "r2" for m in moved)
    givers = [one for one in members[:2] if any(("stop", m) in one.syncs.events for m in moved)]
    assert givers


def test_a_lease_lost_to_the_database_stops_that_sync():
    db = FakeDatabase()
    alone = member(db, "r0", merchants=["brand-0"])
    tick(db, [alone])
    assert alone.held == {"brand-0"}
    del db.locks["brand-0"]  # the session was ended by the server (idle timeout)
    db.locks["brand-0"] = "someone-else"
    alone.step()
    assert alone.held == set()
    assert alone.syncs.running() == frozenset()


def test_a_graceful_leave_hands_every_merchant_over_at_once():
    db = FakeDatabase()
    members = [member(db, f"r{n}") for n in range(2)]
    tick(db, members, rounds=4)
    leaving = members.pop()
    leaving.leave()
    assert leaving.held == set()
    assert leaving.syncs.running() == frozenset()
    assert leaving.replica_id not in db.heartbeats
    tick(db, members)  # the next tick of the other one takes everything: no staleness wait
    assert sorted(db.locks) == sorted(MERCHANTS)


def test_a_lost_connection_stops_every_sync_of_the_replica():
    db = FakeDatabase()
    alone = member(db, "r0")
    tick(db, [alone])
    assert len(alone.held) == len(MERCHANTS)
    alone.session.down = True
    alone.step()
    assert alone.held == set()
    assert alone.syncs.running() == frozenset()
    assert db.locks == {}, "nothing held while nothing is synced"


def test_a_failing_tick_keeps_syncing_what_its_lease_still_confirms_and_backs_off():
    db = FakeDatabase()
    alone = member(db, "r0")
    tick(db, [alone])
    alone.session.heartbeat_fails = True
    pauses = []
    for _ in range(4):
        alone.step()
        pauses.append(alone.pause())
    assert alone.held == set(MERCHANTS)
    assert alone.syncs.running() == frozenset(MERCHANTS)
    assert pauses == [4.0, 8.0, 16.0, 30.0]  # doubled, at most MAX_BACKOFF
    alone.session.heartbeat_fails = False
    alone.step()
    assert alone.pause() == 2.0


def test_a_bug_in_a_tick_is_logged_and_tried_again_never_the_end_of_the_fleet():
    db = FakeDatabase()
    alone = member(db, "r0")
    tick(db, [alone])
    alone.session.bug = True
    with capture_logs() as logs:
        alone.step()
    (event,) = [entry for entry in logs if entry["event"] == "fleet_tick_failed"]
    assert event["kind"] == "KeyError"
    assert "test_member.py" in event["where"]
    assert alone.held == set(MERCHANTS)  # still confirmed: still synced
    alone.session.bug = False
    alone.step()
    assert alone.failures == 0


@pytest.mark.parametrize("replicas", [1, 2, 4, 7, 9], ids=lambda n: f"{n}-replicas")
def test_any_number_of_replicas_settles(replicas):
    db = FakeDatabase()
    members = [member(db, f"r{n}") for n in range(replicas)]
    tick(db, members, rounds=6)
    assert_settled(db, members)


def test_replicas_started_together_see_each_other_before_taking_merchants():
    db = FakeDatabase()
    members = [member(db, f"r{n}") for n in range(3)]
    for one in members:
        one._announce()  # what run() does first, before its first tick
    tick(db, members, rounds=2)
    assert_settled(db, members)
    assert all(epoch == 1 for epoch in db.epochs.values())  # nothing was handed over twice


class ExclusiveSession(FakeSession):
    """SQLite: one lock for every merchant; whoever holds one holds the file."""

    exclusive = True

    def try_hold(self, merchant_id):
        if any(holder != self.replica for holder in self.db.locks.values()):
            return None
        return super().try_hold(merchant_id)


def test_with_one_lock_for_everything_the_holder_keeps_all_and_the_other_stands_by():
    db = FakeDatabase()
    members = []
    for replica in ("r0", "r1"):
        one = member(db, replica)
        one.session = ExclusiveSession(db, replica)
        members.append(one)
    tick(db, members, rounds=5)
    assert len(members[0].held) == len(MERCHANTS)
    assert members[1].held == set()
    members[0].leave()
    tick(db, members[1:], rounds=1)
    assert len(members[1].held) == len(MERCHANTS)


def test_an_outage_while_waiting_for_the_next_tick_is_waited_out():
    db = FakeDatabase()
    alone = member(db, "r0")
    alone.tick = 0.01
    alone.session.down = True
    threading.Timer(0.2, alone.stopper.stop).start()
    alone.run()  # would raise WarehouseUnavailableError from wait_for_change
    assert alone.held == set()


# -- pause ---------------------------------------------------------------------------


def pausing_member(db, replica, paused: set[str], reported: list[frozenset[str]]):
    session, syncs = FakeSession(db, replica), FakeSyncs(db, replica)
    return Member(
        session,
        syncs,
        replica_id=replica,
        merchants=MERCHANTS,
        stopper=Stopper(),
        stale_after=STALE_AFTER,
        paused=lambda: frozenset(paused),
        on_paused=reported.append,
    )


def test_a_paused_merchant_is_handed_over_by_its_holder_and_taken_by_nobody():
    db, paused, reported = FakeDatabase(), set(), []
    members = [pausing_member(db, f"r{n}", paused, reported) for n in range(3)]
    tick(db, members, rounds=4)
    holder = next(one for one in members if "brand-0" in one.held)
    paused.add("brand-0")
    with capture_logs() as logs:
        tick(db, members, rounds=6)
    assert "brand-0" not in db.locks
    assert all("brand-0" not in one.held for one in members)
    assert (
        holder.syncs.events[-1] == ("stop", "brand-0") or ("stop", "brand-0") in holder.syncs.events
    )
    assert [e["merchant_id"] for e in logs if e["event"] == "merchant_paused"] == ["brand-0"]
    # The six others are shared as if brand-0 did not exist: 2 each.
    assert counts(members) == [2, 2, 2]
    assert reported[-1] == frozenset({"brand-0"})


def test_a_paused_merchant_stays_unheld_when_its_holder_dies_and_is_taken_once_resumed():
    db, paused, reported = FakeDatabase(), {"brand-3"}, []
    members = [pausing_member(db, f"r{n}", paused, reported) for n in range(3)]
    tick(db, members, rounds=4)
    assert "brand-3" not in db.locks
    dead = members.pop(0)
    db.kill(dead.replica_id)  # kill -9: its syncs end with it
    dead.syncs.epochs.clear()
    db.running = {m: {r for r in rs if r != dead.replica_id} for m, rs in db.running.items()}
    tick(db, members, rounds=6)  # its merchants are taken over, brand-3 still by nobody
    assert sorted(db.locks) == sorted(set(MERCHANTS) - {"brand-3"})
    paused.clear()
    tick(db, members, rounds=1)
    assert "brand-3" in db.locks
    tick(db, members, rounds=4)
    assert_settled(db, members)
