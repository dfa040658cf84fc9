"""What operators set on a merchant that every replica obeys (``merchant_controls``): pause.

A paused merchant is held and synced by no replica: every fleet tick reads ``paused`` and
hands over what it holds of them, and no replica takes them (``fleet.member``).  The row lives
in the warehouse, the replicas' one shared truth, so a pause outlasts restarts, rebalances and
the replica that was told; ``resume`` clears it and the merchant is taken again at the next
tick.  Times are the database's.  A pause has one owner, who paused first (``paused_by``:
the operator and the database account, ``commands.control``); whether another may end it is
the caller's decision (``may_end``), taken with the row locked.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, case, func, select, update
from sqlalchemy.dialects import mysql, postgresql, sqlite

from recordsync.core.database_url import MYSQL_FAMILY
from recordsync.warehouse.connection import WRITE_OPTION, translate_errors
from recordsync.warehouse.database_clock import database_now
from recordsync.warehouse.schema import merchant_controls
from recordsync.warehouse.values import Pause


class ControlStore:
    """The controls on the warehouse's engine, each call one short transaction."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})

    def database_account(self) -> str | None:
        """The account this engine's sessions act as, by the database's own word (None on
        SQLite, which has none): what a pause records beside the operator's name, since a
        name from the environment proves nothing, and the grants are the only authority."""
        if self._engine.dialect.name == "sqlite":
            return None
        query = (
            "SELECT CURRENT_USER()"
            if self._engine.dialect.name in MYSQL_FAMILY
            else ("SELECT current_user")
        )
        with translate_errors("read the database account"), self._engine.connect() as conn:
            account = conn.exec_driver_sql(query).scalar_one()
        return str(account)

    def pause(self, merchant_id: str, *, by: str, reason: str | None) -> Pause:
        """Pause the merchant.  Paused already, the first pause's time and owner are kept;
        its reason is replaced only by its owner (another operator's pause adds nothing to
        it: the pause it met is returned, unchanged)."""
        with translate_errors("pause merchant"), self._writer.begin() as conn:
            return pause(conn, merchant_id, by=by, reason=reason)

    def resume(
        self,
        merchant_id: str,
        *,
        by: str,
        may_end: Callable[[Pause], bool] = lambda _pause: True,
    ) -> Resumed | None:
        """Resume the merchant, if ``may_end`` allows ending the pause found (asked with its
        row locked, so that the pause judged is the pause ended); None when not paused."""
        with translate_errors("resume merchant"), self._writer.begin() as conn:
            return resume(conn, merchant_id, by=by, may_end=may_end)

    def paused(self, merchant_ids: Collection[str]) -> dict[str, Pause]:
        """The merchants among ``merchant_ids`` that are paused, with their pause."""
        if not merchant_ids:
            return {}
        with translate_errors("read merchant controls"), self._engine.begin() as conn:
            return paused(conn, merchant_ids)


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a resume met: the ``pause`` found, and whether it was ``ended``."""

    pause: Pause
    ended: bool


def pause(conn: Connection, merchant_id: str, *, by: str, reason: str | None) -> Pause:
    """One statement, so that two operators pausing at once both succeed: an upsert keeping
    the first pause's time and who paused first, and its reason unless the same owner gives a
    new one (a read, then an insert, raced: the second insert hit the key)."""
    now = database_now()
    values = {
        "merchant_id": merchant_id,
        "paused_at": now,
        "paused_by": by,
        "reason": reason,
        "changed_at": now,
        "changed_by": by,
    }
    table = merchant_controls
    backend = conn.dialect.name
    if backend in MYSQL_FAMILY:
        mariadb = mysql.insert(table).values(values)
        new = mariadb.inserted
        statement: Any = mariadb.on_duplicate_key_update(
            # MariaDB assigns left to right: the reason is decided before the owner is set.
            reason=_owners_reason(table.c.paused_by, new.paused_by, table.c.reason, new.reason),
            paused_at=func.coalesce(table.c.paused_at, new.paused_at),
            paused_by=func.coalesce(table.c.paused_by, new.paused_by),
            changed_at=new.changed_at,
            changed_by=new.changed_by,
        )
    else:
        dialect = postgresql if backend == "postgresql" else sqlite
        upsert = dialect.insert(table).values(values)
        new = upsert.excluded
        statement = upsert.on_conflict_do_update(
            index_elements=[table.c.merchant_id],
            set_={
                "paused_at": func.coalesce(table.c.paused_at, new.paused_at),
                "paused_by": func.coalesce(table.c.paused_by, new.paused_by),
                "reason": _owners_reason(
                    table.c.paused_by, new.paused_by, table.c.reason, new.reason
                ),
                "changed_at": new.changed_at,
                "changed_by": new.changed_by,
            },
        )
    conn.execute(statement)
    paused_now = _pause_of(conn, merchant_id)
    assert paused_now is not None
    return paused_now


def _owners_reason(owner: Any, by: Any, reason: Any, new_reason: Any) -> Any:
    """The reason a pause keeps: the new one when nobody holds the pause or its owner gives
    it, the owner's otherwise."""
    return case((owner.is_(None) | (owner == by), new_reason), else_=reason)


def resume(
    conn: Connection, merchant_id: str, *, by: str, may_end: Callable[[Pause], bool]
) -> Resumed | None:
    locked = select(merchant_controls.c.merchant_id).where(
        merchant_controls.c.merchant_id == merchant_id
    )
    if conn.dialect.name != "sqlite":  # SQLite's write transaction holds the whole file
        conn.execute(locked.with_for_update())
    known = _pause_of(conn, merchant_id)
    if known is None:
        return None
    if not may_end(known):
        return Resumed(known, ended=False)
    conn.execute(
        update(merchant_controls)
        .where(merchant_controls.c.merchant_id == merchant_id)
        .values(
            paused_at=None,
            paused_by=None,
            reason=None,
            changed_at=database_now(),
            changed_by=by,
        )
    )
    return Resumed(known, ended=True)


def paused(conn: Connection, merchant_ids: Collection[str]) -> dict[str, Pause]:
    rows = conn.execute(
        select(merchant_controls).where(
            merchant_controls.c.merchant_id.in_(merchant_ids),
            merchant_controls.c.paused_at.is_not(None),
        )
    )
    return {row.merchant_id: Pause(row.paused_at, row.paused_by, row.reason) for row in rows}


def _pause_of(conn: Connection, merchant_id: str) -> Pause | None:
    return paused(conn, [merchant_id]).get(merchant_id)
