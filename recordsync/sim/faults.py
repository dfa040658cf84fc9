"""Injected faults: when to misbehave and how (seeded, so a failing run can be replayed).

Each kind has a rate in ``FaultRates``; ``hit`` rolls the dice.  The page mutations work on
the JSON bytes of a page about to be sent and never on the store, so the cursor in a faulty
page stays valid and a retry gets the honest page.
"""

from __future__ import annotations

import email.utils
import random
import threading
from collections.abc import Callable
from enum import Enum
from typing import Any, Final

import orjson

from recordsync.sim.config import FaultRates

EXTRA_MEMBER: Final = b'"x_sim_extra":{"note":"unknown field","n":[1,2.5,null]}'
ENVELOPE_EXTRA: Final = b',"x_sim_trace":{"shard":7,"hops":["edge","projection"]}'
DATA_EXTRA: Final = b',"x_sim_page_hint":"ignore me"'

# Malformed amounts a strict client must refuse (spec: Conventions, Money).
_BAD_AMOUNTS: Final = ("1e5", "1,000.00", " 12.50", "+5.00", "12.345678", "NaN", 12.5)
_AMOUNT_FIELDS: Final = ("bet_amount", "refund_amount", "payout_amount", "net_amount")
_RECORD_FIELDS: Final = ("record_id", "currency", "status", "updated_at", "revision", "created_at")


P_SAME_RECORD: Final = 0.5  # a stale change of a record on the page, else of any record


class Malformation(Enum):
    INVALID_JSON = "invalid_json"
    TRUNCATED = "truncated"  # a consistent Content-Length, half a JSON document
    WRONG_CONTENT_TYPE = "wrong_content_type"
    SHORT_BODY = "short_body"  # Content-Length promises more than is sent, then the socket closes


class FaultInjector:
    def __init__(self, rates: FaultRates, seed: int) -> None:
        self._rates = rates.check()
        self._rng = random.Random(f"recordsync-sim:{seed}:faults")  # noqa: S311 -- not secrets
        self._lock = threading.Lock()

    @property
    def rates(self) -> FaultRates:
        return self._rates

    @rates.setter
    def rates(self, rates: FaultRates) -> None:
        self._rates = rates.check()

    def _draw(self, draw: Callable[[random.Random], Any]) -> Any:
        with self._lock:
            return draw(self._rng)

    def hit(self, kind: str) -> bool:
        rate: float = getattr(self._rates, kind)
        return rate > 0 and bool(self._draw(lambda rng: rng.random() < rate))

    def latency_seconds(self) -> float | None:
        rates = self._rates
        if rates.latency_ms <= 0 and rates.latency_jitter_ms <= 0:
            return None
        if not self.hit("latency"):
            return None
        jitter: float = self._draw(lambda rng: rng.uniform(0, rates.latency_jitter_ms))
        return (rates.latency_ms + jitter) / 1000.0

    def retry_after(self, now: float) -> str:
        """Sometimes delta-seconds, sometimes an HTTP-date (both are valid Retry-After)."""
        if self._draw(lambda rng: rng.random() < 0.5):  # noqa: PLR2004
            return "1"
        return email.utils.formatdate(now + 2, usegmt=True)

    def extra_fields(self, items: list[bytes], *, changes: bool) -> list[bytes]:
        """Unknown members around the records (spec: Versioning 3), never in one: a record's
        own members are its data, which the client keeps (``extra_fields``), and a platform
        sends the same record the same way every time (``AddedField`` makes that drift)."""
        if not changes:
            return items
        return [b"{" + EXTRA_MEMBER + b"," + item[1:] for item in items]

    def bad_record(self, items: list[bytes], *, changes: bool) -> list[bytes]:
        """One item with a malformed amount, a missing field or a wrongly typed field."""
        if not items:
            return items
        index, choice, amount, name = self._draw(
            lambda rng: (
                rng.randrange(len(items)),
                rng.random(),
                rng.choice(_BAD_AMOUNTS),
                rng.choice(_AMOUNT_FIELDS if rng.random() < 0.5 else _RECORD_FIELDS),  # noqa: PLR2004
            )
        )
        item = orjson.loads(items[index])
        record = item["record"] if changes else item
        if changes and choice < 0.2:  # noqa: PLR2004 -- the change itself is broken
            del item["sequence"]
        elif name in _AMOUNT_FIELDS:
            record[name] = amount
        elif choice < 0.6:  # noqa: PLR2004
            del record[name]
        else:
            record[name] = [record[name]]  # present, but of the wrong type
        out = list(items)
        out[index] = orjson.dumps(item)
        return out

    def stale_positions(
        self, start: int, end: int, previous: Callable[[int], int | None]
    ) -> list[int]:
        """Positions of older changes to send again with the page [start, end)."""
        if end <= start:
            return []
        picks = self._draw(
            lambda rng: [
                (
                    rng.random() < P_SAME_RECORD,
                    rng.randrange(start, end),
                    rng.randrange(max(0, start - 500), end),
                )
                for _ in range(rng.randint(1, 3))
            ]
        )
        positions = []
        for same_record, in_page, anywhere in picks:
            older = previous(in_page) if same_record else None
            positions.append(older if older is not None else anywhere)
        return positions

    def insert_stale(self, items: list[bytes], stale: list[bytes]) -> list[bytes]:
        out = list(items)
        for item in stale:
            at = self._draw(lambda rng: rng.randint(0, len(out)))
            out.insert(at, item)
        return out

    def malformation(self) -> Malformation:
        variant: Malformation = self._draw(lambda rng: rng.choice(list(Malformation)))
        return variant
