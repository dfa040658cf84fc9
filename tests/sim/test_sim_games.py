"""The simulator's game catalogue: GET /v1/games (spec: Game; Endpoints, Games; Limits)."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from support.sim_platform import small_config

from recordsync.sim import ManualClock


def all_games(platform, *params, limit=5):
    page = platform.data("/v1/games", [*params, ("limit", str(limit))])
    items = list(page["items"])
    while page["has_more"]:
        page = platform.data(
            "/v1/games", [*params, ("cursor", page["next_cursor"]), ("limit", str(limit))]
        )
        items.extend(page["items"])
    assert page["next_cursor"] is None
    return items


def test_games_pages_cover_exactly_the_game_ids_of_the_records(sim, platform):
    games = all_games(platform, limit=5)
    ids = [game["game_id"] for game in games]
    assert ids == sorted(ids), "ordered by game id, no repeats across pages"
    assert len(set(ids)) == len(ids)
    used = {record["game_id"] for record in sim.truth().values()}
    assert used <= set(ids)
    assert set(ids) == {game.game_id for game in sim.games().listed()}


def test_a_game_has_every_field_of_the_spec_with_non_ascii_localizations(platform):
    game = all_games(platform, limit=100)[0]
    assert {
        "game_id",
        "name",
        "brand",
        "category",
        "status",
        "launch_supported",
        "languages",
        "client_version",
        "icon",
        "localizations",
        "provider",
        "category_detail",
    } <= set(game)
    assert set(game["icon"]) == {"asset_id", "sha256", "content_type", "size", "url"}
    assert {"code", "name", "icon", "localizations"} <= set(game["provider"])
    assert {"code", "name", "localizations"} <= set(game["category_detail"])
    assert game["category_detail"]["code"] == game["category"]
    names = {item["language"]: item["name"] for item in game["localizations"]}
    assert not names["zh-CN"].isascii()
    assert not names["ru"].isascii()


@pytest.mark.parametrize("status", ["AVAILABLE", "MAINTENANCE", "DISABLED"])
def test_the_status_filter_serves_only_that_status(sim, platform, status):
    games = all_games(platform, ("status", status), limit=2)
    expected = [game.game_id for game in sim.games().listed() if game.status == status]
    assert [game["game_id"] for game in games] == expected
    assert all(game["launch_supported"] == (status == "AVAILABLE") for game in games)


def test_a_cursor_is_bound_to_its_status_filter(platform):
    page = platform.data("/v1/games", [("status", "AVAILABLE"), ("limit", "1")])
    response = platform.get(
        "/v1/games", [("status", "DISABLED"), ("cursor", page["next_cursor"]), ("limit", "1")]
    )
    assert response.status_code == 400
    assert orjson.loads(response.content)["error"]["code"] == "CURSOR_INVALID"


def test_a_games_cursor_expires_24_hours_after_the_first_page(start_sim):
    clock = ManualClock()
    _, platform = start_sim(clock=clock)
    first = platform.data("/v1/games", [("limit", "3")])
    clock.advance(timedelta(hours=23, minutes=59).total_seconds())
    second = platform.data("/v1/games", [("cursor", first["next_cursor"]), ("limit", "3")])
    clock.advance(timedelta(minutes=2).total_seconds())
    response = platform.get("/v1/games", [("cursor", second["next_cursor"]), ("limit", "3")])
    assert response.status_code == 410
    assert orjson.loads(response.content)["error"]["code"] == "CURSOR_EXPIRED"


def test_a_retired_game_leaves_the_listing_without_shifting_the_next_page(sim, platform):
    first = platform.data("/v1/games", [("limit", "4")])
    listed = sim.games().listed()
    sim.games().retire(listed[5].game_id)
    rest = platform.data("/v1/games", [("cursor", first["next_cursor"]), ("limit", "100")])
    assert [game["game_id"] for game in rest["items"]] == [
        game.game_id for game in listed[4:] if game is not listed[5]
    ]


def test_the_query_limit_is_its_own_and_counts_violations(start_sim):
    sim, platform = start_sim(small_config(query_requests=2, query_seconds=60))
    assert platform.get("/v1/games").status_code == 200
    assert platform.get("/v1/games").status_code == 200
    refused = platform.get("/v1/games")
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    # The record limit is untouched by the catalogue's requests, and the other way round.
    assert platform.get("/v1/record-changes", [("from_now", "true")]).status_code == 200
    stats = sim.stats()
    assert stats.query_limit_violations == 1
    assert stats.rate_limit_violations == 0
    limits = platform.data("/v1/capabilities")["limits"]
    assert (limits["query_requests"], limits["query_seconds"]) == (2, 60)


def test_unknown_parameters_and_statuses_are_refused(platform):
    for params in ([("status", "GONE")], [("page", "2")], [("limit", "1001")]):
        response = platform.get("/v1/games", params)
        assert response.status_code == 400
        assert orjson.loads(response.content)["error"]["code"] == "VALIDATION_FAILED"
