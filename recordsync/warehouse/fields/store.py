"""The field store: the record members the platform added, where each merchant's pages carried
them (``sightings``), and the ones promoted to typed columns (``promotion``, ``promoted``),
each call's errors translated."""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Engine

from recordsync.warehouse.connection import translate_errors
from recordsync.warehouse.fields import promotion
from recordsync.warehouse.fields.promoted import PromotedCache
from recordsync.warehouse.fields.promotion import FieldsView, PromotionPlan, PromotionResult
from recordsync.warehouse.fields.sightings import Sighting, read_sightings


class FieldStore:
    """The fields on the warehouse's engine.  ``schema_engine`` gives where schema changes run
    (the warehouse builds it when first needed); ``promoted`` is the writers' view of the
    promoted fields, whose age a promotion waits out; ``sleep`` is that wait."""

    def __init__(
        self,
        engine: Engine,
        *,
        schema_engine: Callable[[], Engine],
        promoted: PromotedCache,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._engine = engine
        self._schema_engine = schema_engine
        self._promoted = promoted
        self._sleep = sleep

    def list_fields(self) -> FieldsView:
        """The promoted fields and the unknown ones (``recordsync fields list``)."""
        with translate_errors("read fields"):
            return promotion.list_fields(self._engine)

    def promotion_plan(self, field: str, kind: str) -> PromotionPlan:
        """What promoting ``field`` would do: the rows carrying it now."""
        with translate_errors("read promotion"):
            return promotion.plan(self._engine, field, kind)

    def promote_field(
        self,
        field: str,
        kind: str,
        *,
        batch: int = promotion.BATCH,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> PromotionResult:
        """Promote ``field`` to a column of type ``kind`` (``promotion``), waiting for every
        writer to see it first (twice its view's age and a page's transaction)."""
        with translate_errors("promote field"):
            return promotion.promote(
                self._schema_engine(),
                field,
                kind,
                settle=2 * self._promoted.ttl + 1.0,
                sleep=self._sleep,
                batch=batch,
                on_batch=on_batch,
            )

    def unknown_fields(self, merchant_id: str) -> list[Sighting]:
        """The record members the merchant's pages carried that recordsync does not know."""
        with translate_errors("read unknown fields"), self._engine.begin() as conn:
            return read_sightings(conn, merchant_id)
