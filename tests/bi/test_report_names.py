"""BI that names things: the game catalogue joined to the summaries, in the views and in
``recordsync report --by game`` / ``--by provider``, on every backend (docs/bi.md)."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from decimal import Decimal

from sqlalchemy import text
from support.bi_data import AMOUNTS, MERCHANT, dataset, exact_text, expected_report

from recordsync.service.commands.report import report
from recordsync.warehouse import Warehouse
from recordsync.warehouse.reader import WarehouseReader


def run(store: Warehouse, **options) -> str:
    out = io.StringIO()
    report(
        WarehouseReader(store),
        MERCHANT,
        out=out,
        **options,
    )
    return out.getvalue()


def catalogue() -> dict:
    return {game.game_id: game for game in dataset().games}


def test_report_by_game_names_each_game_and_its_provider_and_keeps_the_uuid(loaded):
    document = json.loads(run(loaded, days=3, by="game", fmt="json"))
    games = catalogue()
    named = [row for row in document["rows"] if row["game_id"] in games]
    assert named, "the simulator's games are in the report"
    for row in named:
        game = games[row["game_id"]]
        assert (row["game_name"], row["provider_name"]) == (game.name, game.provider_name)
    unnamed = [row for row in document["rows"] if row["game_id"] not in games]
    assert unnamed, "the edge records' games are not in the catalogue"
    assert all(row["game_name"] is None and row["provider_name"] is None for row in unnamed)


def test_the_game_table_and_csv_show_names(loaded):
    shown = run(loaded, days=3, by="game", fmt="table")
    some = next(iter(catalogue().values()))
    line = next(line for line in shown.splitlines() if some.game_id in line)
    assert some.name in line
    assert some.provider_name in line
    header, *rows = csv.reader(io.StringIO(run(loaded, days=3, by="game", fmt="csv")))
    assert header[:4] == ["game_id", "game_name", "provider_name", "currency"]
    assert any(row[1] == some.name for row in rows)


def test_report_by_provider_sums_the_games_of_each_provider_exactly(loaded):
    document = json.loads(run(loaded, days=3, by="provider", fmt="json"))
    games = catalogue()
    _, _, per_game = expected_report(dataset().records[MERCHANT], by="game", days=3)
    expected: dict[tuple, dict] = defaultdict(lambda: dict.fromkeys(AMOUNTS, Decimal(0)))
    rounds: dict[tuple, int] = defaultdict(int)
    for (game_id, currency), sums in per_game.items():
        game = games.get(game_id)
        key = (None if game is None else game.provider_code, currency)
        rounds[key] += sums["rounds"]
        for amount in AMOUNTS:
            expected[key][amount] += sums[amount]
    got = {(row["provider_code"], row["currency"]): row for row in document["rows"]}
    assert set(got) == set(expected)
    for key, row in got.items():
        assert row["rounds"] == rounds[key]
        for amount in AMOUNTS:
            assert row[amount] == exact_text(expected[key][amount]), (key, amount)
        names = {game.provider_name for game in games.values() if game.provider_code == key[0]}
        assert row["provider_name"] == (names.pop() if key[0] is not None else None)
    shown = run(loaded, days=3, by="provider", fmt="table")
    assert "Nolimit Cíty" in shown, "non-ASCII provider names reach the table intact"


def test_the_named_view_carries_the_catalogue_beside_the_game_id(loaded):
    games = catalogue()
    with loaded.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT game_id, game_name, provider_code, provider_name, category, rounds "
                "FROM daily_game_summary_named WHERE merchant_id = :m"
            ),
            {"m": MERCHANT},
        ).all()
        plain = conn.execute(
            text("SELECT COUNT(*) FROM daily_game_summary WHERE merchant_id = :m"), {"m": MERCHANT}
        ).scalar_one()
    assert len(rows) == plain, "the LEFT JOIN keeps every summary row"
    for game_id, name, provider_code, provider_name, category, _ in rows:
        game = games.get(game_id)
        if game is None:
            assert (name, provider_code, provider_name) == (None, None, None)
        else:
            assert (name, provider_code, provider_name, category) == (
                game.name,
                game.provider_code,
                game.provider_name,
                game.category,
            )


def test_localized_names_join_by_language_on_every_backend(loaded):
    games = catalogue()
    with loaded.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT g.game_id, l.name FROM games g JOIN game_localizations l "
                "ON l.merchant_id = g.merchant_id AND l.game_id = g.game_id "
                "WHERE g.merchant_id = :m AND l.language = 'zh-CN'"
            ),
            {"m": MERCHANT},
        ).all()
    assert len(rows) == len(games)
    for game_id, name in rows:
        (expected,) = [
            item.name for item in games[game_id].localizations if item.language == "zh-CN"
        ]
        assert name == expected
        assert not name.isascii()
