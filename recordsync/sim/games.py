"""The simulated game catalogue of one merchant (spec: Game; Endpoints, Games; Game status).

Every game id the merchant's records use gets a catalogue entry, built from the seed so that
the same seed always serves the same catalogue: a name, a brand, a category with its detail,
a provider, a status, languages, a client version, icon asset references and localized names
(Chinese, Japanese, German and Russian ones among them, so a client that mangles non-ASCII
text shows it).  Tests steer it: ``retire`` takes a game out of the listing (it is no longer
authorized for the merchant), ``set_status`` and ``rename`` change an entry.

Pages are ordered by game id and continue after the last id of the page before, so a game
retired between two pages never shifts the rest (the cursor itself lives in ``cursors``).
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Final

import orjson

GAME_STATUSES: Final = ("AVAILABLE", "MAINTENANCE", "DISABLED")

# (code, name, localized names by language)
_PROVIDERS: Final = (
    ("PGS", "Pocket Games Studio", {"zh-CN": "口袋游戏", "ja": "ポケットゲームズ"}),
    ("EVO", "Evolution Live", {"de": "Evolution Live DE", "ru": "Эволюция"}),
    ("NLC", "Nolimit Cíty", {"zh-CN": "无限城", "de": "Nolimit Stadt"}),
)
# (code, name, localized names by language)
_CATEGORIES: Final = (
    ("SLOT", "Slots", {"zh-CN": "老虎机", "ja": "スロット", "de": "Spielautomaten"}),
    ("TABLE", "Table games", {"zh-CN": "桌面游戏", "ru": "Настольные игры"}),
    ("LIVE", "Live casino", {"ja": "ライブカジノ", "de": "Live-Kasino"}),
    ("FISH", "Fishing", {"zh-CN": "捕鱼", "ja": "フィッシング"}),
)
# (English word, Chinese, Japanese, German, Russian): game names are two words combined.
_WORDS: Final = (
    ("Dragon", "龙", "ドラゴン", "Drachen", "Дракон"),
    ("Fortune", "财富", "フォーチュン", "Glück", "Удача"),
    ("Lucky", "幸运", "ラッキー", "Glücks", "Счастливый"),
    ("Golden", "黄金", "ゴールデン", "Goldene", "Золотой"),
    ("Koi", "锦鲤", "鯉", "Koi", "Карп"),
    ("Panda", "熊猫", "パンダ", "Panda", "Панда"),
    ("Phoenix", "凤凰", "フェニックス", "Phönix", "Феникс"),
    ("Tiger", "老虎", "タイガー", "Tiger", "Тигр"),
)
_LANGUAGES: Final = ("en", "zh-CN", "ja", "de", "ru")
_BRANDS: Final = ("Classic", "Megaways", "Originals")
_LANGUAGE_SHARE: Final = 0.7  # how often a game offers each language beyond English


def _asset(seed_text: str) -> dict[str, Any]:
    """An asset reference (spec: Game, asset reference); never downloaded by recordsync."""
    digest = hashlib.sha256(seed_text.encode()).hexdigest()
    asset_id = f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-a{digest[17:20]}-{digest[20:32]}"
    return {
        "asset_id": asset_id,
        "sha256": digest,
        "content_type": "image/png",
        "size": 1024 + int(digest[:4], 16) % 4096,
        "url": f"/v1/catalog-assets/{asset_id}",
    }


def _localized(names: dict[str, str], tag: str) -> list[dict[str, Any]]:
    return [
        {"language": language, "name": name, "icon": _asset(f"{tag}:{language}")}
        for language, name in names.items()
    ]


@dataclass(frozen=True, slots=True)
class SimGame:
    """One catalogue entry, as the platform keeps it."""

    game_id: str
    name: str
    brand: str
    category: int  # index into _CATEGORIES
    provider: int  # index into _PROVIDERS
    status: str
    launch_supported: bool
    languages: tuple[str, ...]
    client_version: str
    localized: tuple[tuple[str, str], ...]  # (language, name)

    def wire(self) -> dict[str, Any]:
        """The Game resource as the spec's games page shows it."""
        provider_code, provider_name, provider_names = _PROVIDERS[self.provider]
        category_code, category_name, category_names = _CATEGORIES[self.category]
        return {
            "game_id": self.game_id,
            "name": self.name,
            "brand": self.brand,
            "category": category_code,
            "status": self.status,
            "launch_supported": self.launch_supported,
            "languages": list(self.languages),
            "client_version": self.client_version,
            "icon": _asset(f"game:{self.game_id}"),
            "localizations": _localized(dict(self.localized), f"game:{self.game_id}"),
            "provider": {
                "code": provider_code,
                "name": provider_name,
                "icon": _asset(f"provider:{provider_code}"),
                "localizations": _localized(provider_names, f"provider:{provider_code}"),
            },
            "category_detail": {
                "code": category_code,
                "name": category_name,
                "localizations": [
                    {"language": language, "name": name}
                    for language, name in category_names.items()
                ],
            },
        }


def _game(rng: random.Random, game_id: str, number: int) -> SimGame:
    first, second = rng.sample(range(len(_WORDS)), 2)
    words = [_WORDS[first], _WORDS[second]]
    name = f"{words[0][0]} {words[1][0]} {number}"
    localized = (
        ("zh-CN", f"{words[0][1]}{words[1][1]} {number}"),
        ("ja", f"{words[0][2]}・{words[1][2]} {number}"),
        ("de", f"{words[0][3]} {words[1][3]} {number}"),
        ("ru", f"{words[0][4]} {words[1][4]} {number}"),
    )
    # Mostly available; a few in maintenance or disabled, as a real catalogue has.
    status = rng.choices(GAME_STATUSES, weights=(8, 1, 1))[0]
    return SimGame(
        game_id=game_id,
        name=name,
        brand=rng.choice(_BRANDS),
        category=rng.randrange(len(_CATEGORIES)),
        provider=rng.randrange(len(_PROVIDERS)),
        status=status,
        launch_supported=status == "AVAILABLE",
        languages=tuple(
            language
            for language in _LANGUAGES
            if language == "en" or rng.random() < _LANGUAGE_SHARE
        ),
        client_version=f"{rng.randint(1, 3)}.{rng.randint(0, 9)}.{rng.randint(0, 20)}",
        localized=localized,
    )


@dataclass(frozen=True, slots=True)
class GamesPage:
    items: list[bytes]
    last_game_id: str | None
    has_more: bool


class GameCatalogue:
    """A merchant's catalogue: one entry per game id its records use; thread-safe."""

    def __init__(self, seed: int, game_ids: Iterable[str]) -> None:
        rng = random.Random(f"recordsync-sim:{seed}:games")  # noqa: S311 -- data, not secrets
        self._lock = threading.Lock()
        self._games = {
            game_id: _game(rng, game_id, number) for number, game_id in enumerate(game_ids, start=1)
        }
        self._retired: set[str] = set()

    def listed(self) -> list[SimGame]:
        """The entries served now, ordered by game id."""
        with self._lock:
            return [
                self._games[game_id]
                for game_id in sorted(self._games)
                if game_id not in self._retired
            ]

    def game(self, game_id: str) -> SimGame:
        with self._lock:
            return self._games[game_id]

    def retire(self, game_id: str) -> None:
        """Take a game out of the listing (no longer authorized for the merchant)."""
        with self._lock:
            if game_id not in self._games:
                raise KeyError(game_id)
            self._retired.add(game_id)

    def set_status(self, game_id: str, status: str) -> None:
        if status not in GAME_STATUSES:
            raise ValueError(f"unknown game status {status!r}")
        with self._lock:
            self._games[game_id] = replace(
                self._games[game_id], status=status, launch_supported=status == "AVAILABLE"
            )

    def rename(self, game_id: str, name: str) -> None:
        with self._lock:
            self._games[game_id] = replace(self._games[game_id], name=name)

    def page(self, *, status: str | None, after: str | None, limit: int) -> GamesPage:
        """Up to ``limit`` entries after the game id ``after``, with ``status`` if given."""
        chosen = [
            game
            for game in self.listed()
            if (status is None or game.status == status) and (after is None or game.game_id > after)
        ]
        items = chosen[:limit]
        return GamesPage(
            items=[orjson.dumps(game.wire()) for game in items],
            last_game_id=items[-1].game_id if items else None,
            has_more=len(chosen) > limit,
        )
