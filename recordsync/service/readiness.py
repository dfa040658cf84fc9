"""Whether a sync is doing its job, from the facts alone: the rule that ``/readyz`` answers
with for the merchants a daemon holds, and ``recordsync status --check`` applies to the
committed state.  Pure: the clock, the warehouse's answer and the commits are given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

DEFAULT_READY_MULTIPLE: Final = 30.0
DEFAULT_STARTUP_GRACE: Final = 120.0


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str


def assess_readiness(
    *,
    now: float,
    started_at: float,
    last_commit_at: float | None,
    warehouse_error: str | None,
    poll_interval: float,
    multiple: float = DEFAULT_READY_MULTIPLE,
    startup_grace: float = DEFAULT_STARTUP_GRACE,
) -> Readiness:
    """Is the sync doing its job?  All times in the same clock's seconds.

    ``warehouse_error`` is None when the warehouse answered, else why it did not.  A daemon in
    its first snapshot is ready while pages commit: the rule looks at commits, not at the
    phase.  A daemon that has not committed yet is ready during ``startup_grace`` after
    ``started_at`` (anchoring and the first page may take a while), not after.
    """
    if warehouse_error is not None:
        return Readiness(ready=False, reason=f"warehouse unavailable: {warehouse_error}")
    limit = multiple * poll_interval
    if last_commit_at is None:
        since_start = now - started_at
        if since_start <= startup_grace:
            return Readiness(ready=True, reason="starting: no page committed yet")
        return Readiness(
            ready=False,
            reason=f"no page committed in {since_start:.0f} s since start "
            f"(grace {startup_grace:.0f} s)",
        )
    age = now - last_commit_at
    if age <= limit:
        return Readiness(ready=True, reason=f"last page committed {max(age, 0.0):.0f} s ago")
    return Readiness(
        ready=False,
        reason=f"last page committed {age:.0f} s ago (limit {limit:.0f} s)",
    )


def assess_merchants(
    *,
    now: float,
    held: Mapping[str, tuple[float, float | None]],
    warehouse_error: str | None,
    poll_interval: float,
    multiple: float = DEFAULT_READY_MULTIPLE,
    startup_grace: float = DEFAULT_STARTUP_GRACE,
) -> Readiness:
    """``assess_readiness`` for every merchant this process holds (merchant -> when it was
    taken, its last commit): ready when each one is.  Holding none is ready: the other
    replicas hold them all (an unheld merchant is an alert, RecordsyncMerchantNotHeld)."""
    if warehouse_error is not None:
        return Readiness(ready=False, reason=f"warehouse unavailable: {warehouse_error}")
    if not held:
        return Readiness(ready=True, reason="holds no merchant (the other replicas hold them)")
    verdicts = {
        merchant_id: assess_readiness(
            now=now,
            started_at=since,
            last_commit_at=last_commit,
            warehouse_error=None,
            poll_interval=poll_interval,
            multiple=multiple,
            startup_grace=startup_grace,
        )
        for merchant_id, (since, last_commit) in sorted(held.items())
    }
    lagging = [f"{merchant}: {v.reason}" for merchant, v in verdicts.items() if not v.ready]
    if lagging:
        return Readiness(ready=False, reason="; ".join(lagging))
    return Readiness(ready=True, reason=f"{len(verdicts)} merchants committing recently")
