"""A round-end notification as recordsync keeps it (spec: Events, "Round end").

The receiver (``service.ports.round_events``) builds it from a verified request, the
warehouse stores it, the cross-check compares its round with ``records``.  Only ``ROUND_ENDED``
is acted on; another ``type`` is stored as received and otherwise left alone (the spec says
other kinds of event are "not shown", so a new one must not be refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

ROUND_ENDED: Final = "ROUND_ENDED"


@dataclass(frozen=True, slots=True)
class RoundEvent:
    event_id: str
    merchant_id: str
    round_id: str
    parent_round_id: str | None
    external_player_id: str
    currency: str
    type: str
    occurred_at: datetime  # aware UTC

    @property
    def acted_on(self) -> bool:
        """Whether this kind wakes the tail and is cross-checked."""
        return self.type == ROUND_ENDED


@dataclass(frozen=True, slots=True)
class RoundEventReceipt:
    """What storing an event gave: when it was first accepted, and whether this was a repeat."""

    accepted_at: datetime
    duplicate: bool
