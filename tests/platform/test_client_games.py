"""The game catalogue in the client: parsing and its own query budget (spec: Game; Games;
Capabilities, limits.query_requests / query_seconds)."""

import copy
import itertools
import random

import httpx
import pytest

from recordsync.core.errors import CursorExpiredError, ProtocolError
from recordsync.core.models import Localization
from recordsync.core.secret import Secret
from recordsync.platform.budget import Priority, RateBudget
from recordsync.platform.client import PlatformClient
from recordsync.platform.parsing import parse_game, parse_games_page

GAME = {
    "game_id": "6f1c1a3e-0a51-4d8e-9d35-3f0e8d1f2a11",
    "name": "Dragon Fortune",
    "brand": "Megaways",
    "category": "SLOT",
    "status": "AVAILABLE",
    "launch_supported": True,
    "languages": ["en", "zh-CN"],
    "client_version": "2.4.1",
    "icon": {"asset_id": "a", "sha256": "b", "content_type": "image/png", "size": 1, "url": "/u"},
    "localizations": [
        {"language": "zh-CN", "name": "龙之财富", "icon": {"asset_id": "c"}},
        {"language": "ru", "name": "Удача дракона"},
    ],
    "provider": {"code": "PGS", "name": "Pocket Games Studio", "localizations": []},
    "category_detail": {"code": "SLOT", "name": "Slots", "localizations": []},
    "a_field_added_later": {"ignored": True},
}


def games_reply(items, next_cursor=None, request_id="req-g"):
    data = {"items": items, "next_cursor": next_cursor, "has_more": next_cursor is not None}
    return httpx.Response(200, json={"data": data, "request_id": request_id})


def test_a_game_is_parsed_into_its_typed_model_with_non_ascii_names():
    game = parse_game(GAME)
    assert game.game_id == GAME["game_id"]
    assert (game.name, game.brand, game.category, game.category_name) == (
        "Dragon Fortune",
        "Megaways",
        "SLOT",
        "Slots",
    )
    assert (game.provider_code, game.provider_name) == ("PGS", "Pocket Games Studio")
    assert game.languages == ("en", "zh-CN")
    assert game.localizations == (
        Localization("zh-CN", "龙之财富"),
        Localization("ru", "Удача дракона"),
    )


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("game_id", None, "game_id"),
        ("launch_supported", "yes", "launch_supported"),
        ("languages", "en", "languages"),
        ("localizations", [{"language": "de"}], "name"),
        ("provider", "PGS", "provider"),
    ],
    ids=["no-id", "launch-not-bool", "languages-not-list", "localization-no-name", "provider"],
)
def test_a_malformed_game_is_rejected_with_its_reason_and_the_page_kept(field, value, reason):
    bad = copy.deepcopy(GAME)
    bad[field] = value
    page = parse_games_page({"items": [GAME, bad], "next_cursor": None, "has_more": False})
    assert [game.game_id for game in page.games] == [GAME["game_id"]]
    (rejected,) = page.rejected
    assert rejected.position == 1
    assert reason in rejected.reason


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"items": {}, "next_cursor": None, "has_more": False},
        {"items": [], "next_cursor": None, "has_more": True},
        {"items": [], "next_cursor": None},
    ],
    ids=["not-object", "items-not-list", "more-without-cursor", "no-has-more"],
)
def test_a_malformed_games_page_is_a_protocol_error(data):
    with pytest.raises(ProtocolError, match="malformed page"):
        parse_games_page(data, request_id="req-x")


class Scripted:
    def __init__(self, fake_time, answers):
        self.fake_time = fake_time
        self.answers = list(answers)
        self.requests = []
        self.at = []

    def __call__(self, request):
        self.requests.append(request)
        self.at.append(self.fake_time())
        return self.answers.pop(0)


def client_for(fake_time, scripted, *, record_budget, query_budget):
    wall = itertools.count(1_767_225_600)
    return PlatformClient(
        base_url="https://platform.example",
        merchant_id="merchant-7",
        secret=Secret("S3cr3t-value-that-must-never-leak-0123456789"),
        budget=record_budget,
        query_budget=query_budget,
        transport=httpx.MockTransport(scripted),
        clock=lambda: next(wall),
        sleep=fake_time.sleep,
        rng=random.Random(7),
    )


def test_games_pages_go_through_the_query_budget_never_the_record_budget(fake_time):
    record_budget = RateBudget(1, 60.0, clock=fake_time, sleep=fake_time.sleep)
    query_budget = RateBudget(2, 1.0, clock=fake_time, sleep=fake_time.sleep, margin=0.0)
    scripted = Scripted(fake_time, [games_reply([GAME], "next")] * 4)
    with client_for(
        fake_time, scripted, record_budget=record_budget, query_budget=query_budget
    ) as client:
        for _ in range(4):
            client.games(cursor="c", status="AVAILABLE", limit=1000)
        before = fake_time()
        slot = record_budget.acquire(Priority.TAIL)
    assert slot.acquired_at == before, "the record budget saw none of the catalogue's requests"
    assert scripted.at[2] - scripted.at[0] >= 1.0, "two per second: the third waited"
    assert scripted.requests[0].url.raw_path == b"/v1/games?status=AVAILABLE&cursor=c&limit=1000"


def test_a_429_on_games_pauses_the_query_budget_by_retry_after_only(fake_time):
    record_budget = RateBudget(10, 1.0, clock=fake_time, sleep=fake_time.sleep)
    query_budget = RateBudget(10, 1.0, clock=fake_time, sleep=fake_time.sleep)
    refused = httpx.Response(
        429,
        json={
            "error": {"code": "RATE_LIMITED", "message": "m", "retryable": True},
            "request_id": "r",
        },
        headers={"Retry-After": "5"},
    )
    scripted = Scripted(fake_time, [refused, games_reply([GAME])])
    with client_for(
        fake_time, scripted, record_budget=record_budget, query_budget=query_budget
    ) as client:
        page = client.games()
        record_budget.acquire(Priority.TAIL)
    assert [game.name for game in page.games] == ["Dragon Fortune"]
    assert scripted.at[1] - scripted.at[0] == pytest.approx(5.0)
    assert query_budget.waited_seconds_total == pytest.approx(5.0)
    assert record_budget.waited_seconds_total == 0, "the record budget was not paused"


def test_an_expired_games_cursor_is_cursor_expired(fake_time):
    gone = httpx.Response(
        410,
        json={
            "error": {"code": "CURSOR_EXPIRED", "message": "m", "retryable": False},
            "request_id": "r",
        },
    )
    budget = RateBudget(10, 1.0, clock=fake_time, sleep=fake_time.sleep)
    with (
        client_for(
            fake_time, Scripted(fake_time, [gone]), record_budget=budget, query_budget=budget
        ) as client,
        pytest.raises(CursorExpiredError),
    ):
        client.games(cursor="old")


def test_capabilities_resize_the_query_budget_apart_from_the_record_budget(fake_time):
    record_budget = RateBudget(2, 1.0, clock=fake_time, sleep=fake_time.sleep)
    query_budget = RateBudget(1, 1.0, clock=fake_time, sleep=fake_time.sleep)
    limits = {
        "record_requests": 5,
        "record_seconds": 2,
        "query_requests": 7,
        "query_seconds": 3,
        "max_page_size": 1000,
    }
    reply = httpx.Response(200, json={"data": {"limits": limits}, "request_id": "r"})
    with client_for(
        fake_time,
        Scripted(fake_time, [reply]),
        record_budget=record_budget,
        query_budget=query_budget,
    ) as client:
        client.apply_capabilities()
    assert (record_budget.requests, record_budget.seconds) == (5, 2)
    assert (query_budget.requests, query_budget.seconds) == (7, 3)
