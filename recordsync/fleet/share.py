"""Who syncs which merchant: the fair share of each live replica, and the moves toward it.

Pure: the membership loop (``member``) feeds it what the warehouse says (the live replicas
by the database's clock, who holds what) and carries out the moves.  Every replica computes
the same targets from the same facts, so they agree without talking to each other:

- with N merchants and K live replicas each should hold between floor(N/K) and ceil(N/K);
  nothing moves while that holds (a newcomer to one merchant and one holder changes nothing);
- a replica takes free merchants (held by nobody) up to floor(N/K), and up to ceil(N/K)
  with what the others short of floor(N/K) do not need (so a start needs no hand-over);
  one that died stops counting once its heartbeat is older than the staleness limit (a few
  heartbeats, by the database's clock), and the others' shares then cover its merchants,
  which its dead session no longer locks;
- a replica above ceil(N/K) gives the excess back, and one at ceil gives one back while
  another live replica is below floor(N/K), so nothing is released into the void;
- which merchants: each replica ranks them by a rendezvous hash of (merchant, replica), takes
  its most preferred free ones and gives back its least preferred, so a join or a departure
  moves few merchants and the same ones each time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Moves:
    acquire: tuple[str, ...]  # try to take these, in this order
    release: tuple[str, ...]  # hand these over (the page in hand first)


def targets(merchants: int, replicas: Sequence[str]) -> dict[str, int]:
    """The share of every live replica: floor or ceil of N/K, the extra ones to the first ids."""
    ordered = sorted(set(replicas))
    if not ordered:
        return {}
    base, extra = divmod(merchants, len(ordered))
    return {replica: base + (1 if index < extra else 0) for index, replica in enumerate(ordered)}


def preference(merchant_id: str, replica_id: str) -> bytes:
    """Rendezvous hash: a replica's stable, replica-specific ranking of the merchants."""
    return hashlib.sha256(f"{replica_id}\x00{merchant_id}".encode()).digest()


def plan_moves(
    me: str,
    *,
    merchants: Collection[str],
    live: Iterable[str],
    holders: Mapping[str, str],
) -> Moves:
    """What ``me`` should take and give back now.

    ``holders`` maps each held merchant to its holder (this replica included); merchants held
    by a replica that is not live count as held until its locks are gone, which the database
    sees to.  Merchants not configured here (another configuration) are left alone.
    """
    live_set = set(live) | {me}
    floor, extra = divmod(len(merchants), len(live_set))
    ceiling = floor + (1 if extra else 0)
    mine = sorted(
        (merchant for merchant in merchants if holders.get(merchant) == me),
        key=lambda merchant: preference(merchant, me),
    )
    free = sorted(
        (merchant for merchant in merchants if merchant not in holders),
        key=lambda merchant: preference(merchant, me),
    )
    counts = dict.fromkeys(live_set, 0)
    for merchant in merchants:
        holder = holders.get(merchant)
        if holder in counts:
            counts[holder] += 1
    # Up to floor(N/K) for itself; beyond, only what the others short of floor do not need.
    short_of_floor = max(floor - len(mine), 0)
    others_short = sum(max(floor - count, 0) for replica, count in counts.items() if replica != me)
    spare = max(len(free) - others_short - short_of_floor, 0)
    acquire = tuple(free[: min(max(ceiling - len(mine), 0), short_of_floor + spare)])
    give = 0
    if not free:  # free merchants go to whoever is short first; nothing to give meanwhile
        give = max(len(mine) - ceiling, 0)
        short = any(count < floor for replica, count in counts.items() if replica != me)
        if not give and short and len(mine) > floor:
            give = 1
    release = tuple(mine[len(mine) - give :]) if give else ()
    return Moves(acquire=acquire, release=release)
