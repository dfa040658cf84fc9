"""The game catalogue in the warehouse: one pass committed whole, read back for BI.

A catalogue pass (every page of ``GET /v1/games``) is handed over complete and written in ONE
transaction (``commit_pass``), so a reader sees the catalogue before the pass or after it,
never half of it.  Within it, per game:

- a game seen for the first time is inserted (``first_seen_at`` = ``last_seen_at`` =
  ``changed_at`` = the pass time) with its localized names;
- a game seen again gets ``last_seen_at`` = the pass time, and when anything BI shows differs
  (name, status, provider, localizations...), its fields, its names and ``changed_at``;
- a stored game the pass did not list keeps its row: ``listed`` becomes false and
  ``last_seen_at`` stays at the last pass that listed it ("not seen since"); when the
  catalogue lists it again it is ``listed`` again.

A game the columns cannot hold (an id past its column, a NUL, a name past MariaDB's TEXT) is
left out of the pass like a rejected item, kept as stored, and counted in the result: one
hostile entry never fails every pass.

``kept_ids`` are games the pass saw but could not read (a rejected item with a game id): they
count as seen, their stored fields untouched, so a malformed entry never looks like a game
that left the catalogue.  The pass time comes from the warehouse's clock: bookkeeping, not a
sync boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, delete, insert, select, update

from recordsync.core.models import Game
from recordsync.core.state import EndpointAvailability
from recordsync.warehouse import availability
from recordsync.warehouse.connection import side_by_side_writer, translate_errors
from recordsync.warehouse.fencing import fenced_write
from recordsync.warehouse.schema import CODE_LENGTH, ID_LENGTH, game_localizations, games
from recordsync.warehouse.values import Availability, CatalogueResult, GameName

_COMPARED = (
    "name",
    "brand",
    "category",
    "category_name",
    "status",
    "launch_supported",
    "provider_code",
    "provider_name",
    "client_version",
    "languages",
)


def _fields(game: Game) -> dict[str, Any]:
    return {
        "name": game.name,
        "brand": game.brand,
        "category": game.category,
        "category_name": game.category_name,
        "status": game.status,
        "launch_supported": game.launch_supported,
        "provider_code": game.provider_code,
        "provider_name": game.provider_name,
        "client_version": game.client_version,
        "languages": ",".join(game.languages),
    }


# MariaDB's TEXT holds 65,535 bytes; the other backends more.
TEXT_BYTES = 65_535


def game_unstorable(game: Game) -> str | None:
    """Why the catalogue's columns cannot hold ``game``, or None when they can."""
    limited = {
        "game_id": (game.game_id, ID_LENGTH),
        "category": (game.category, ID_LENGTH),
        "provider_code": (game.provider_code, ID_LENGTH),
        "client_version": (game.client_version, ID_LENGTH),
        "status": (game.status, CODE_LENGTH),
        **{
            f"localizations[{index}].language": (item.language, CODE_LENGTH)
            for index, item in enumerate(game.localizations)
        },
    }
    for name, (value, limit) in limited.items():
        if value is not None and len(value) > limit:
            return f"{name}: {len(value)} characters, more than the column holds ({limit})"
    texts = {
        "name": game.name,
        "brand": game.brand,
        "category_name": game.category_name,
        "provider_name": game.provider_name,
        "languages": ",".join(game.languages),
        **{f"localizations[{i}].name": item.name for i, item in enumerate(game.localizations)},
    }
    every = {**{name: value for name, (value, _) in limited.items()}, **texts}
    for name, value in every.items():
        if value is not None and "\x00" in value:
            return f"{name}: contains a NUL character, which the warehouse cannot store"
    for name, value in texts.items():
        if value is not None and len(value.encode("utf-8", "surrogatepass")) > TEXT_BYTES:
            return f"{name}: more than {TEXT_BYTES} bytes, more than the column holds"
    return None


def _names(game: Game) -> dict[str, str]:
    """language -> name; a language given twice keeps its last name (one row per language)."""
    return {item.language: item.name for item in game.localizations}


def commit_pass(
    conn: Connection,
    merchant_id: str,
    listed: Sequence[Game],
    *,
    kept_ids: Collection[str] = (),
    now: datetime,
) -> CatalogueResult:
    """Write one whole catalogue pass inside the caller's transaction (module docstring)."""
    stored = {
        row["game_id"]: row
        for row in conn.execute(select(games).where(games.c.merchant_id == merchant_id)).mappings()
    }
    stored_names: dict[str, dict[str, str]] = {}
    for name_row in conn.execute(
        select(game_localizations).where(game_localizations.c.merchant_id == merchant_id)
    ).mappings():
        stored_names.setdefault(name_row["game_id"], {})[name_row["language"]] = name_row["name"]
    unique = {game.game_id: game for game in listed}  # a repeated game: its last entry
    unfit = {game_id: why for game_id, game in unique.items() if (why := game_unstorable(game))}
    for game_id in unfit:
        del unique[game_id]
    kept_ids = [*kept_ids, *(game_id for game_id in unfit if len(game_id) <= ID_LENGTH)]
    added = changed = 0
    for game_id, game in unique.items():
        fields, names = _fields(game), _names(game)
        row = stored.get(game_id)
        key = and_(games.c.merchant_id == merchant_id, games.c.game_id == game_id)
        if row is None:
            added += 1
            conn.execute(
                insert(games).values(
                    merchant_id=merchant_id,
                    game_id=game_id,
                    listed=True,
                    first_seen_at=now,
                    last_seen_at=now,
                    changed_at=now,
                    **fields,
                )
            )
        elif (
            any(row[name] != fields[name] for name in _COMPARED)
            or names != stored_names.get(game_id, {})
            or not row["listed"]
        ):
            changed += 1
            conn.execute(
                update(games)
                .where(key)
                .values(listed=True, last_seen_at=now, changed_at=now, **fields)
            )
        else:
            conn.execute(update(games).where(key).values(last_seen_at=now))
        if names != stored_names.get(game_id, {}):
            _replace_names(conn, merchant_id, game_id, names, stored=game_id in stored_names)
    seen = set(unique) | set(kept_ids)
    kept = [game_id for game_id in kept_ids if game_id in stored and game_id not in unique]
    if kept:
        conn.execute(
            update(games)
            .where(games.c.merchant_id == merchant_id, games.c.game_id.in_(kept))
            .values(last_seen_at=now)
        )
    gone = [game_id for game_id, row in stored.items() if game_id not in seen and row["listed"]]
    if gone:
        conn.execute(
            update(games)
            .where(games.c.merchant_id == merchant_id, games.c.game_id.in_(gone))
            .values(listed=False, changed_at=now)
        )
    first = next(iter(unfit.items()), None)
    return CatalogueResult(
        listed=len(unique),
        added=added,
        changed=changed,
        unlisted=len(gone),
        unstorable=len(unfit),
        first_unstorable=f"{first[0][:ID_LENGTH]}: {first[1]}" if first else None,
    )


def _replace_names(
    conn: Connection, merchant_id: str, game_id: str, names: dict[str, str], *, stored: bool
) -> None:
    """The game's names now ``names``; the old ones deleted only when there are some
    (``stored``): a game seen for the first time has none, one statement fewer per new game."""
    if stored:
        conn.execute(
            delete(game_localizations).where(
                game_localizations.c.merchant_id == merchant_id,
                game_localizations.c.game_id == game_id,
            )
        )
    if names:
        conn.execute(
            insert(game_localizations),
            [
                {"merchant_id": merchant_id, "game_id": game_id, "language": lang, "name": name}
                for lang, name in names.items()
            ],
        )


def game_names(conn: Connection, merchant_id: str) -> dict[str, GameName]:
    """game_id -> how the catalogue names it, every game ever listed (listed or not)."""
    rows = conn.execute(
        select(
            games.c.game_id,
            games.c.name,
            games.c.provider_code,
            games.c.provider_name,
            games.c.category,
            games.c.listed,
        ).where(games.c.merchant_id == merchant_id)
    ).mappings()
    return {
        row["game_id"]: GameName(
            game_id=row["game_id"],
            name=row["name"],
            provider_code=row["provider_code"],
            provider_name=row["provider_name"],
            category=row["category"],
            listed=bool(row["listed"]),
        )
        for row in rows
    }


def _utc_now() -> datetime:
    return datetime.now(UTC)


class GameStore:
    """The game catalogue and which optional endpoints the platform serves each merchant
    (``availability``), on the warehouse's engine: each call one transaction of its own,
    every write fenced (``fencing``).  ``clock`` stamps the pass and ``since``."""

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self._engine = engine
        self._writer = side_by_side_writer(engine)  # merchants side by side
        self._clock = clock

    def commit_catalogue(
        self,
        merchant_id: str,
        games: Sequence[Game],
        *,
        kept_ids: Collection[str] = (),
        epoch: int | None = None,
    ) -> CatalogueResult:
        """Store one whole catalogue pass in one transaction (module docstring)."""
        now = self._clock()
        with fenced_write(self._writer, "commit catalogue", merchant_id, epoch) as conn:
            return commit_pass(conn, merchant_id, games, kept_ids=kept_ids, now=now)

    def game_names(self, merchant_id: str) -> dict[str, GameName]:
        """game_id -> its name and provider from the catalogue (every game ever listed)."""
        with translate_errors("read game names"), self._engine.begin() as conn:
            return game_names(conn, merchant_id)

    def record_availability(
        self, merchant_id: str, seen: EndpointAvailability, *, epoch: int | None = None
    ) -> None:
        """Store whether the platform serves ``seen.endpoint`` to the merchant (``availability``
        says how ``since`` moves)."""
        now = self._clock()
        action = "record endpoint availability"
        with fenced_write(self._writer, action, merchant_id, epoch) as conn:
            availability.record(conn, merchant_id, seen, now=now)

    def availability(self, merchant_id: str) -> list[Availability]:
        """The optional endpoints recorded for the merchant (``recordsync status``)."""
        with translate_errors("read endpoint availability"), self._engine.begin() as conn:
            return availability.read(conn, merchant_id)
