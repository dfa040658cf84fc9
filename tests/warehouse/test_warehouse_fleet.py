"""The fleet session: merchants shared by replicas, one holder at a time, epochs, heartbeats,
announcements.

Each replica is a ``Warehouse`` of its own on the same database, as separate processes are;
a dead replica is a closed session, or a server session killed from an admin connection.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import create_engine, pool, select, text, update
from sqlalchemy.engine import make_url
from structlog.testing import capture_logs
from support.dbfixtures import SERVER_PARAMS
from support.netfaults import FaultProxy

from recordsync.core.errors import ConfigurationError, WarehouseUnavailableError
from recordsync.warehouse import Warehouse
from recordsync.warehouse.database_clock import read_database_now
from recordsync.warehouse.lease.epochs import epoch_floor
from recordsync.warehouse.lease.keys import lease_key, mysql_lock_name
from recordsync.warehouse.schema import merchant_leases, replicas

M1, M2 = "merchant-1", "merchant-2"
SQLITE_ONLY = [pytest.param("sqlite", id="sqlite")]
POSTGRES_ONLY = [param for param in SERVER_PARAMS if param.id == "postgres"]
NO_NOTIFY = [pytest.param("sqlite", id="sqlite"), *(p for p in SERVER_PARAMS if p.id == "mariadb")]


@pytest.fixture
def fleet(warehouse_url, warehouse):
    """``fleet(replica_id, **options)``: a session on a Warehouse of its own, closed after."""
    made = []

    def join(replica_id, *, clock=None, **options):
        extra = {} if clock is None else {"clock": clock}
        store = Warehouse.connect(warehouse_url, **extra)
        session = store.fleet_session(replica_id, **options)
        made.append((store, session))
        return session

    yield join
    for store, session in made:
        session.close()
        store.close()


def held_at(session, merchant_id) -> int:
    """The epoch ``session`` takes ``merchant_id`` at (it must get it)."""
    epoch = session.try_hold(merchant_id)
    assert epoch is not None, f"{session.replica_id} could not take {merchant_id}"
    return epoch


def lease_row(warehouse, merchant_id):
    with warehouse.engine.connect() as conn:
        return conn.execute(
            select(merchant_leases).where(merchant_leases.c.merchant_id == merchant_id)
        ).one()


def kill_lock_session(warehouse_url, merchant_id):
    """End, from an admin connection, the server session holding ``merchant_id``'s lock."""
    admin = create_engine(warehouse_url, poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if admin.dialect.name == "postgresql":
                key = lease_key(merchant_id)
                killed = conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_locks"
                        " WHERE locktype = 'advisory' AND granted"
                        " AND classid::bigint = :high AND objid::bigint = :low"
                        # pg_locks is the whole server's: another worker's test may hold the
                        # same merchant's key in its own database at this moment.
                        " AND database = (SELECT oid FROM pg_database"
                        " WHERE datname = current_database())"
                    ),
                    {"high": (key >> 32) & 0xFFFFFFFF, "low": key & 0xFFFFFFFF},
                ).all()
                assert killed == [(True,)]
            else:
                name = mysql_lock_name(make_url(warehouse_url).database, merchant_id)
                holder = conn.execute(text("SELECT IS_USED_LOCK(:n)"), {"n": name}).scalar()
                conn.execute(text(f"KILL CONNECTION {int(holder)}"))
    finally:
        admin.dispose()


# -- holding -------------------------------------------------------------------------------


def test_each_new_holder_raises_the_epoch(warehouse, fleet):
    first = fleet("replica-a")
    one = held_at(first, M1)
    first.close()
    second = fleet("replica-b")
    two = held_at(second, M1)
    assert two > one
    assert second.try_hold(M1) == two  # held already: the same epoch, not raised again
    row = lease_row(warehouse, M1)
    assert (row.epoch, row.holder, row.released_at) == (two, "replica-b", None)
    second.leave()
    assert lease_row(warehouse, M1).released_at is not None
    third = fleet("replica-c")
    three = held_at(third, M1)
    assert three > two
    other = held_at(third, M2)
    assert (warehouse.lease_epoch(M1), warehouse.lease_epoch(M2)) == (three, other)
    assert warehouse.lease_epoch("merchant-never-held") is None


def test_an_epoch_is_at_least_the_databases_clock_so_a_failover_never_reuses_one(warehouse, fleet):
    """A failover to an asynchronous replica may lose the last raises; the next raise reads
    the new primary's clock, later than every lost raise: its epoch is above them all."""
    with warehouse.engine.connect() as conn:
        before = epoch_floor(read_database_now(conn))
    lost_primary = fleet("replica-a")
    lost = held_at(lost_primary, M1)
    assert lost >= before
    lost_primary.close()
    with warehouse.engine.begin() as conn:  # the replica lacks that raise: an older row
        conn.execute(update(merchant_leases).values(epoch=lost - 1000))
    time.sleep(0.01)
    assert held_at(fleet("replica-b"), M1) > lost


def test_two_sessions_never_hold_one_merchant_at_once(warehouse, fleet):
    first, second = fleet("replica-a"), fleet("replica-b")
    one = held_at(first, M1)
    assert second.try_hold(M1) is None
    assert warehouse.lease_epoch(M1) == one  # a failed attempt raises nothing
    assert first.still_held() == {M1}
    assert second.still_held() == frozenset()
    assert second.held() == {}


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_sessions_racing_for_the_same_merchants_split_them(fleet):
    merchants = [f"merchant-{i}" for i in range(30)]
    sessions = [fleet("replica-a"), fleet("replica-b")]
    won: dict[str, list[str]] = {"replica-a": [], "replica-b": []}

    def grab(session, order):
        for merchant_id in order:
            if session.try_hold(merchant_id) is not None:
                won[session.replica_id].append(merchant_id)

    threads = [
        threading.Thread(target=grab, args=[sessions[0], merchants]),
        threading.Thread(target=grab, args=[sessions[1], merchants[::-1]]),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not set(won["replica-a"]) & set(won["replica-b"])
    assert sorted(won["replica-a"] + won["replica-b"]) == sorted(merchants)
    assert sessions[0].still_held() == set(won["replica-a"])


def test_a_closed_sessions_merchants_are_free_at_once(fleet):
    first, second = fleet("replica-a"), fleet("replica-b")
    epochs = (held_at(first, M1), held_at(first, M2))
    first.close()
    first.close()  # safe twice
    assert first.held() == {}
    assert held_at(second, M1) > epochs[0]
    assert held_at(second, M2) > epochs[1]


@pytest.mark.parametrize("warehouse_url", SQLITE_ONLY, indirect=True)
def test_on_sqlite_one_file_lock_covers_every_merchant_until_the_last_is_released(fleet):
    first, second = fleet("replica-a"), fleet("replica-b")
    held_at(first, M1)
    held_at(first, M2)
    first.release(M1)  # one file lock covers every merchant: M2, still held, keeps it
    assert second.try_hold(M1) is None
    assert second.try_hold(M2) is None
    assert second.still_held() == frozenset()
    first.release(M2)  # the last one: the file is let go, as a command handing back does
    held_at(second, M1)
    held_at(second, M2)
    assert second.still_held() == {M1, M2}
    assert first.try_hold(M1) is None
    second.close()
    held_at(first, M1)


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_a_killed_sessions_merchants_are_free_at_once_and_it_learns_so(warehouse_url, fleet):
    first, second = fleet("replica-a"), fleet("replica-b")
    one, other = held_at(first, M1), held_at(first, M2)
    lost: list[frozenset[str]] = []
    first._on_lost = lost.append  # the keeper may be the first to learn it
    kill_lock_session(warehouse_url, M1)
    assert held_at(second, M1) > one
    with contextlib.suppress(WarehouseUnavailableError):  # this call learnt it, or the keeper
        assert first.still_held() == frozenset()
    assert first.held() == {}
    assert not first.confirmed(M1)
    assert not first.confirmed(M2)
    assert frozenset().union(*lost) == {M1, M2}
    assert first.still_held() == frozenset()
    assert held_at(first, M2) > other  # a new connection: it holds only what it takes again
    assert first.still_held() == {M2}


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_the_server_frees_a_cut_off_sessions_locks_but_not_a_kept_ones(warehouse_url, fleet):
    """``lease_seconds`` reaches the server: a session cut off (the network blackholed, as
    for a paused or partitioned holder) loses its locks after about that long, and stops
    counting on them before; one whose keeper runs keeps them with no call of ours."""
    parsed = make_url(warehouse_url)
    with FaultProxy((parsed.host or "127.0.0.1", parsed.port or 0)) as proxy:
        cut_store = Warehouse.connect(
            parsed.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        )
        silent = cut_store.fleet_session("replica-a", lease_seconds=2)
        kept, taker = fleet("replica-b", lease_seconds=2), fleet("replica-c")
        try:
            silent_epoch = held_at(silent, M1)
            held_at(kept, M2)
            proxy.blackhole()
            started = time.monotonic()
            taken = None
            while taken is None and time.monotonic() - started < 8:
                time.sleep(0.25)
                taken = taker.try_hold(M1)
                if silent.confirmed(M1):
                    assert taken is None, "taken while its holder still counted on it"
            assert taken is not None
            assert taken > silent_epoch
            assert not silent.confirmed(M1)
            time.sleep(max(0.0, 4 - (time.monotonic() - started)))  # past kept's lease too
            assert taker.try_hold(M2) is None
            assert kept.confirmed(M2)
            assert kept.still_held() == {M2}
        finally:
            proxy.heal()
            silent.close()
            cut_store.close()


# -- heartbeats and who is alive --------------------------------------------------------------


def test_heartbeats_are_stamped_and_aged_by_the_database_clock(warehouse, fleet):
    wrong_clock = lambda: datetime(2001, 1, 1, tzinfo=UTC)  # noqa: E731 - a local clock far off
    first = fleet("replica-a", clock=wrong_clock)
    second = fleet("replica-b", clock=wrong_clock)
    first.heartbeat(3)
    second.heartbeat(0)
    with warehouse.engine.begin() as conn:
        now = read_database_now(conn)
        row = conn.execute(select(replicas).where(replicas.c.replica_id == "replica-a")).one()
    assert abs(row.heartbeat_at - now) < timedelta(minutes=1)
    assert row.merchants_held == 3
    assert row.pid > 0
    assert row.hostname
    assert list(first.live_replicas(30)) == ["replica-a", "replica-b"]

    with warehouse.engine.begin() as conn:  # replica-a last beat a minute ago
        conn.execute(
            update(replicas)
            .where(replicas.c.replica_id == "replica-a")
            .values(heartbeat_at=row.heartbeat_at - timedelta(seconds=60))
        )
    assert list(second.live_replicas(30)) == ["replica-b"]
    assert list(second.live_replicas(120)) == ["replica-a", "replica-b"]
    first.heartbeat(3)
    assert list(second.live_replicas(30)) == ["replica-a", "replica-b"]


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_replicas_joining_side_by_side_all_get_a_row(fleet):
    """Their first heartbeats insert rows next to one another at the same moment."""
    sessions = [fleet(f"replica-{i}") for i in range(8)]
    start = threading.Barrier(len(sessions))
    failures = []

    def join(session):
        start.wait(10)
        try:
            session.heartbeat(0)
            session.try_hold(f"merchant-of-{session.replica_id}")
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            failures.append(error)

    threads = [threading.Thread(target=join, args=[session]) for session in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failures == []
    assert list(sessions[0].live_replicas(60)) == sorted(s.replica_id for s in sessions)


def test_a_replica_silent_for_a_day_is_forgotten_when_another_joins(warehouse, fleet):
    fleet("replica-a").heartbeat(0)
    with warehouse.engine.begin() as conn:
        day_ago = read_database_now(conn) - timedelta(days=1, minutes=1)
        conn.execute(update(replicas).values(heartbeat_at=day_ago))
    fleet("replica-b").heartbeat(0)
    with warehouse.engine.connect() as conn:
        assert list(conn.execute(select(replicas.c.replica_id)).scalars()) == ["replica-b"]


def test_leaving_frees_every_merchant_and_the_replica_row_at_once(warehouse, fleet):
    leaving, staying = fleet("replica-a"), fleet("replica-b")
    one = held_at(leaving, M1)
    held_at(leaving, M2)
    leaving.heartbeat(2)
    staying.heartbeat(0)
    leaving.leave()
    assert leaving.held() == {}
    assert list(staying.live_replicas(60)) == ["replica-b"]
    assert held_at(staying, M1) > one
    assert lease_row(warehouse, M2).released_at is not None


def holders_within(session, expected, *, seconds):
    deadline = time.monotonic() + seconds
    while session.holders() != expected:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_holders_are_the_replicas_holding_each_merchant_now(fleet):
    first, second = fleet("replica-a"), fleet("replica-b")
    held_at(first, M1)
    held_at(second, M2)
    expected = {M1: "replica-a", M2: "replica-b"}
    assert first.holders() == expected
    assert second.holders() == expected
    first.close()  # died: its lease row still names it, but its lock is gone
    # The server ends the closed session's backend (and frees its locks) a moment after the
    # client has let go: asked at once, pg_locks may still show it for a few milliseconds.
    assert holders_within(second, {M2: "replica-b"}, seconds=5)
    second.release(M2)
    assert second.holders() == {}


@pytest.mark.parametrize("warehouse_url", SQLITE_ONLY, indirect=True)
def test_on_sqlite_holders_are_the_file_lock_holders_merchants(fleet):
    first, second = fleet("replica-a"), fleet("replica-b")
    held_at(first, M1)
    held_at(first, M2)
    assert second.holders() == {M1: "replica-a", M2: "replica-a"}
    first.close()
    assert second.holders() == {}
    held_at(second, M1)
    assert second.holders() == {M1: "replica-b"}


# -- announcements ------------------------------------------------------------------------------


def release_m1(giver, _fleet):
    giver.release(M1)


def leave(giver, _fleet):
    giver.leave()


def join(_giver, fleet):
    fleet("replica-c").heartbeat(0)


@pytest.mark.parametrize("warehouse_url", POSTGRES_ONLY, indirect=True)
@pytest.mark.parametrize("change", [release_m1, leave, join], ids=["release", "leave", "join"])
def test_waiting_for_a_change_returns_as_soon_as_another_replica_announces_one(fleet, change):
    giver, waiter = fleet("replica-a"), fleet("replica-b")
    giver.heartbeat(1)
    held_at(giver, M1)
    assert waiter.try_hold(M1) is None  # connected, listening
    timer = threading.Timer(0.2, change, args=[giver, fleet])
    started = time.monotonic()
    timer.start()
    try:
        assert waiter.wait_for_change(10) is True
    finally:
        timer.join()
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("warehouse_url", POSTGRES_ONLY, indirect=True)
def test_a_replicas_own_announcements_and_later_heartbeats_do_not_wake_it(fleet):
    first, other = fleet("replica-a"), fleet("replica-b")
    first.heartbeat(0)
    held_at(first, M1)
    first.release(M1)
    assert first.wait_for_change(0.2) is False
    other.heartbeat(0)
    assert first.wait_for_change(0.2) is True  # the other one joined
    other.heartbeat(0)
    assert first.wait_for_change(0.2) is False


@pytest.mark.parametrize("warehouse_url", NO_NOTIFY, indirect=True)
def test_waiting_for_a_change_sleeps_where_the_database_cannot_notify(fleet):
    slept = []
    session = fleet("replica-a", sleep=slept.append)
    assert session.wait_for_change(2.5) is False
    assert slept == [2.5]


@pytest.mark.parametrize(
    ("replica_id", "lease_seconds"),
    [("", 10), ("r" * 256, 10), ("replica-a", 0)],
    ids=["empty-id", "id-too-long", "no-lease-time"],
)
def test_a_bad_replica_id_or_lease_time_is_a_configuration_error(
    warehouse, replica_id, lease_seconds
):
    with pytest.raises(ConfigurationError):
        warehouse.fleet_session(replica_id, lease_seconds=lease_seconds).close()


@pytest.mark.parametrize("warehouse_url", POSTGRES_ONLY, indirect=True)
def test_a_stale_write_stuck_in_the_middle_of_a_copy_is_ended_by_the_new_holder(
    warehouse_url, fleet
):
    """Issue 30: PostgreSQL never ends a transaction whose client stopped in the middle of a
    COPY (it waits for the rows in ClientRead, where neither timeout applies).  An old holder
    paused there after its fence check held the lease row for as long as it stayed paused;
    the new holder's raise now ends that session after a second and goes on."""
    old = fleet("replica-a")
    epoch = held_at(old, M1)
    old.close()  # its lock gone; one of its writes is still in flight:
    stuck = psycopg.connect(
        make_url(warehouse_url).set(drivername="postgresql").render_as_string(False)
    )
    stuck.execute("SELECT epoch FROM merchant_leases WHERE merchant_id = %s FOR SHARE", (M1,))
    stuck.execute("CREATE TEMPORARY TABLE rows_in_flight (a int)")
    copy = stuck.cursor().copy("COPY rows_in_flight (a) FROM STDIN")
    copy.__enter__()  # the COPY began; its rows never come
    try:
        started = time.monotonic()
        with capture_logs() as logs:
            new_epoch = held_at(fleet("replica-b"), M1)
        took = time.monotonic() - started
    finally:
        with contextlib.suppress(Exception):
            stuck.close()
    assert new_epoch > epoch
    assert 0.9 < took < 4.0  # not the 5 s lock wait, and never for as long as it stays stuck
    (ended,) = [entry for entry in logs if entry["event"] == "stale_write_ended"]
    assert ended["merchant_id"] == M1


# -- one merchant's slow takeover stalls no other ------------------------


def poll_confirmed(session, merchant_id, *, every, until, seen):
    """What a merchant's sync does before each request: ask ``confirmed`` every ``every`` s
    until ``until`` is set, recording (when, how long the answer took, the answer)."""
    while not until.is_set():
        asked = time.monotonic()
        answer = session.confirmed(merchant_id)
        seen.append((asked, time.monotonic() - asked, answer))
        until.wait(every)


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
def test_a_takeover_stuck_for_15_s_in_its_write_leaves_the_other_merchants_confirmed(
    warehouse_url, warehouse
):
    """A takeover whose epoch raise waits (here for the pool's only connection, which
    another thread holds for 15 s: longer than a lease's confirmation) must not hold up
    ``confirmed`` of the merchants already held, nor the keeper that keeps them confirmed:
    every merchant's requests are checked against it."""
    store = Warehouse.connect(warehouse_url, pool_size=1, max_overflow=0, pool_timeout=30)
    session = store.fleet_session("replica-a")
    merchants = [f"merchant-{n}" for n in range(10)]
    stop = threading.Event()
    try:
        for merchant_id in merchants:
            held_at(session, merchant_id)
        polls: dict[str, list[tuple[float, float, bool]]] = {m: [] for m in merchants}
        pollers = [
            threading.Thread(
                target=poll_confirmed,
                args=(session, m),
                kwargs={"every": 0.2, "until": stop, "seen": polls[m]},
                daemon=True,
            )
            for m in merchants
        ]
        taken: list[int | None] = []
        with capture_logs() as logs, store.engine.connect():  # the pool's one connection
            takeover = threading.Thread(
                target=lambda: taken.append(session.try_hold("merchant-new")), daemon=True
            )
            takeover.start()
            for poller in pollers:
                poller.start()
            time.sleep(15)
            stuck = takeover.is_alive()
        takeover.join(10)
        stop.set()
        for poller in pollers:
            poller.join(5)
        assert stuck, "the takeover did not wait for the pool: the test proves nothing"
        assert taken
        assert taken[0] is not None
        answers = [seen for merchant_polls in polls.values() for seen in merchant_polls]
        assert all(answer for _asked, _took, answer in answers)
        # Fast as well as true: the bound, p99 under 10 ms (0.02 ms measured; an
        # answer that waited for the takeover took seconds), and no answer near a second.
        took = sorted(took for _asked, took, _answer in answers)
        assert took[int(0.99 * (len(took) - 1))] < 0.010
        assert took[-1] < 1.0
        for merchant_id, seen in polls.items():  # each kept its interval throughout
            gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(seen)]
            assert len(seen) > 50, merchant_id
            assert max(gaps) < 1.0, merchant_id
        assert not [entry for entry in logs if entry["event"] == "fleet_locks_lost"]
        assert session.still_held() == {*merchants, "merchant-new"}
    finally:
        stop.set()
        session.close()
        store.close()
