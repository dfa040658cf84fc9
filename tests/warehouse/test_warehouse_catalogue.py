"""The game catalogue in the warehouse: a pass commits whole, a game that leaves keeps its row,
localized names survive every backend's text handling (spec: Game; docs/bi.md)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select
from support.clocks import FakeClock
from support.dbfixtures import SERVER_PARAMS
from support.lockwaits import bound_lock_waits
from support.warehouse_reads import fetch_games

from recordsync.core.errors import LeaseSupersededError
from recordsync.core.models import Game, Localization
from recordsync.warehouse import Warehouse
from recordsync.warehouse.catalogue import commit_pass
from recordsync.warehouse.connection import side_by_side_writer
from recordsync.warehouse.schema import games

MERCHANT = "m-cat"
# Where the backend cannot matter (pure bookkeeping over the same SQL), SQLite alone.
SQLITE_ONLY = pytest.mark.parametrize("warehouse_url", ["sqlite"], indirect=True)
T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def game(number: int, **overrides) -> Game:
    values = {
        "game_id": f"00000000-0000-4000-8000-{number:012d}",
        "name": f"Dragon Fortune {number}",
        "brand": "Megaways",
        "category": "SLOT",
        "category_name": "Slots",
        "status": "AVAILABLE",
        "launch_supported": True,
        "provider_code": "PGS",
        "provider_name": "Pocket Games Studio",
        "client_version": "2.4.1",
        "languages": ("en", "zh-CN", "ru"),
        "localizations": (
            Localization("zh-CN", f"龙之财富 {number}"),
            Localization("ru", f"Удача дракона {number}"),
            Localization("ja", "ドラゴン・フォーチュン 🐉"),
        ),
    }
    values.update(overrides)
    return Game(**values)


@pytest.fixture
def clocked(warehouse: Warehouse):
    clock = FakeClock(T0)
    store = Warehouse(warehouse.engine, clock=clock)
    return store, clock


def test_a_pass_stores_every_field_and_non_ascii_localized_names(clocked):
    store, _ = clocked
    result = store.games.commit_catalogue(MERCHANT, [game(1), game(2)])
    assert (result.listed, result.added, result.changed, result.unlisted) == (2, 2, 0, 0)
    row = fetch_games(store, MERCHANT)[game(1).game_id]
    assert row["name"] == "Dragon Fortune 1"
    assert (row["provider_code"], row["provider_name"]) == ("PGS", "Pocket Games Studio")
    assert (row["category"], row["category_name"], row["status"]) == ("SLOT", "Slots", "AVAILABLE")
    assert row["launch_supported"] is True
    assert row["languages"] == "en,zh-CN,ru"
    assert row["listed"] is True
    assert row["first_seen_at"] == row["last_seen_at"] == row["changed_at"] == T0
    assert row["localizations"] == {
        "zh-CN": "龙之财富 1",
        "ru": "Удача дракона 1",
        "ja": "ドラゴン・フォーチュン 🐉",
    }


def test_a_game_that_disappears_keeps_its_row_marked_not_seen_since(clocked):
    store, clock = clocked
    store.games.commit_catalogue(MERCHANT, [game(1), game(2), game(3)])
    clock.now = T0 + timedelta(hours=1)
    result = store.games.commit_catalogue(MERCHANT, [game(1), game(3)])
    assert (result.listed, result.added, result.changed, result.unlisted) == (2, 0, 0, 1)
    rows = fetch_games(store, MERCHANT)
    gone = rows[game(2).game_id]
    assert gone["listed"] is False
    assert gone["last_seen_at"] == T0, "not seen since the pass before"
    assert gone["name"] == "Dragon Fortune 2", "the row and its names stay for BI"
    assert gone["localizations"]["zh-CN"] == "龙之财富 2"
    assert rows[game(1).game_id]["last_seen_at"] == clock.now
    assert rows[game(1).game_id]["changed_at"] == T0, "seen again unchanged"
    # Listed again later: back in the catalogue.
    clock.now = T0 + timedelta(hours=2)
    store.games.commit_catalogue(MERCHANT, [game(1), game(2), game(3)])
    back = fetch_games(store, MERCHANT)[game(2).game_id]
    assert (back["listed"], back["last_seen_at"]) == (True, clock.now)


@SQLITE_ONLY
def test_a_changed_game_moves_changed_at_and_replaces_its_names(clocked):
    store, clock = clocked
    store.games.commit_catalogue(MERCHANT, [game(1)])
    clock.now = T0 + timedelta(hours=1)
    renamed = game(
        1,
        name="Dragon Fortune Deluxe",
        status="MAINTENANCE",
        launch_supported=False,
        localizations=(Localization("de", "Drachenglück Deluxe"),),
    )
    result = store.games.commit_catalogue(MERCHANT, [renamed])
    assert result.changed == 1
    row = fetch_games(store, MERCHANT)[renamed.game_id]
    assert (row["name"], row["status"], row["launch_supported"]) == (
        "Dragon Fortune Deluxe",
        "MAINTENANCE",
        False,
    )
    assert row["changed_at"] == clock.now
    assert row["localizations"] == {"de": "Drachenglück Deluxe"}


@SQLITE_ONLY
def test_a_game_that_could_not_be_read_counts_as_seen_not_gone(clocked):
    store, clock = clocked
    store.games.commit_catalogue(MERCHANT, [game(1), game(2)])
    clock.now = T0 + timedelta(hours=1)
    result = store.games.commit_catalogue(MERCHANT, [game(1)], kept_ids=[game(2).game_id])
    assert result.unlisted == 0
    row = fetch_games(store, MERCHANT)[game(2).game_id]
    assert (row["listed"], row["last_seen_at"], row["name"]) == (
        True,
        clock.now,
        "Dragon Fortune 2",
    )


@SQLITE_ONLY
def test_merchants_keep_their_own_catalogues(clocked):
    store, _ = clocked
    store.games.commit_catalogue(MERCHANT, [game(1)])
    store.games.commit_catalogue("other", [game(1, name="Другая игра")])
    store.games.commit_catalogue(MERCHANT, [])
    assert fetch_games(store, "other")[game(1).game_id]["listed"] is True
    assert store.games.game_names("other")[game(1).game_id].name == "Другая игра"
    assert store.games.game_names(MERCHANT)[game(1).game_id].listed is False


def test_a_reader_never_sees_half_a_pass(warehouse):
    """Readers count the listed games while passes of 100 replace passes of 100 others."""
    store = warehouse
    first = [game(number) for number in range(100)]
    second = [game(number) for number in range(100, 200)]
    store.games.commit_catalogue(MERCHANT, first)
    stop = threading.Event()
    seen: set[int] = set()

    def read() -> None:
        while not seen or not stop.is_set():
            with store.engine.connect() as conn:
                count = conn.execute(
                    select(func.count())
                    .select_from(games)
                    .where(games.c.merchant_id == MERCHANT, games.c.listed.is_(True))
                ).scalar_one()
            seen.add(count)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for batch in (second, first):
            store.games.commit_catalogue(MERCHANT, batch)
    finally:
        stop.set()
        reader.join()
    assert seen == {100}, f"a reader saw a partial pass: {sorted(seen)}"


@SQLITE_ONLY
def test_a_superseded_holder_cannot_commit_a_pass(warehouse):
    first = warehouse.fleet_session("replica-a")
    second = warehouse.fleet_session("replica-b")
    try:
        old = first.try_hold(MERCHANT)
        first.close()
        new = second.try_hold(MERCHANT)
        assert old is not None
        assert new is not None
        with pytest.raises(LeaseSupersededError):
            warehouse.fenced(MERCHANT, old).commit_catalogue([game(1)])
        assert fetch_games(warehouse, MERCHANT) == {}
        warehouse.fenced(MERCHANT, new).commit_catalogue([game(1)])
        assert list(fetch_games(warehouse, MERCHANT)) == [game(1).game_id]
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize(
    ("hostile", "reason"),
    [
        ({"game_id": "g" * 300}, "game_id: 300 characters"),
        ({"status": "S" * 65}, "status: 65 characters"),
        ({"name": "Dragon\x00Fortune"}, "name: contains a NUL"),
        ({"name": "名" * 30_000}, "name: more than 65535 bytes"),
        (
            {"localizations": (Localization("x" * 65, "name"),)},
            "localizations[0].language: 65 characters",
        ),
    ],
    ids=["long-id", "long-status", "nul", "name-past-text", "long-language"],
)
def test_a_game_the_columns_cannot_hold_is_left_out_and_the_pass_commits(
    warehouse, hostile, reason
):
    # Issue 29: one hostile entry failed every catalogue pass, on every backend differently.
    store = Warehouse(warehouse.engine, clock=FakeClock(T0))
    store.games.commit_catalogue(MERCHANT, [game(1), game(2)])
    result = store.games.commit_catalogue(MERCHANT, [game(1), game(2, **hostile), game(3)])
    assert result.unstorable == 1
    assert reason in (result.first_unstorable or "")
    stored = fetch_games(store, MERCHANT)
    assert set(stored) >= {game(1).game_id, game(3).game_id}
    if "game_id" not in hostile:  # the entry is kept as stored: seen, not gone
        assert stored[game(2).game_id]["listed"]
        assert stored[game(2).game_id]["name"] == "Dragon Fortune 2"


@pytest.mark.parametrize("warehouse_url", SERVER_PARAMS, indirect=True)
@pytest.mark.parametrize("renamed", [False, True], ids=["first-passes", "beside-a-rename"])
def test_two_merchants_passes_never_wait_for_each_other(warehouse, renamed):
    """One merchant's pass (its first, or one renaming every game it stored) while the next
    merchant's first pass is still open, on the connections the catalogue writes through: no
    lock of one is in the other's way.  At MariaDB's REPEATABLE READ a DELETE of names
    locked the gap after them, up to the next merchant's keys, and the two waited for each
    other: a deadlock every few passes when merchants start together."""
    writer = side_by_side_writer(warehouse.engine)
    games_of = [game(number) for number in range(5)]
    if renamed:
        with writer.begin() as conn:
            commit_pass(conn, "m-cat-a", games_of, now=T0)
        first_pass = [
            game(n, name=f"Renamed {n}", localizations=(Localization("de", f"Umbenannt {n}"),))
            for n in range(5)
        ]
    else:
        first_pass = games_of
    with writer.connect() as first, writer.connect() as second:
        for conn in (first, second):
            bound_lock_waits(conn, seconds=1)
        with first.begin():
            commit_pass(first, "m-cat-a", first_pass, now=T0)
            with second.begin():
                result = commit_pass(second, "m-cat-b", games_of, now=T0)
        assert result.added == 5
    stored = [fetch_games(warehouse, merchant) for merchant in ("m-cat-a", "m-cat-b")]
    assert set(stored[0]) == set(stored[1]) == {g.game_id for g in games_of}
    assert all(len(row["localizations"]) == 3 for row in stored[1].values())
