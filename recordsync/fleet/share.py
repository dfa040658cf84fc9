"""Who syncs which merchant: a balanced assignment of the merchants to the live replicas that
know them, and the moves toward it.

Pure: the membership loop (``member``) feeds it what the warehouse says (the live replicas and
the merchants each is configured with, by the database's clock; who holds what) and carries
out the moves.  Every replica computes the same assignment from the same facts, so they agree
without talking to each other:

- **every merchant some live replica knows is held, before any balance**: a merchant nobody
  holds goes to the least loaded live replica that knows it, whatever the shares;
- **then balance, counting only what each replica can hold**: while some replica holds two or
  more merchants more than another that could take one of them (directly, or along a chain of
  replicas each able to take one merchant of the one before), one merchant moves along that
  chain.  With the same configuration everywhere that ends at floor or ceil of N/K each;
  with configurations that differ (a rolling update adding a merchant, a canary), at the
  fairest split the configurations allow (two replicas knowing 4 and 5 merchants share the 4
  common ones so that the one knowing the fifth holds it too);
- **holders keep what they hold** unless balance needs a move, so a join or a departure moves
  few merchants; which merchant moves is the giver's least preferred by a rendezvous hash of
  (merchant, replica), the same each time.

Merchants held by a replica that is not live count as held (its locks are the database's to
free), and a replica that published no configuration (an older version) is taken to know the
asking replica's merchants.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Moves:
    acquire: tuple[str, ...]  # try to take these, in this order
    release: tuple[str, ...]  # hand these over (the page in hand first)


def targets(merchants: int, replicas: Sequence[str]) -> dict[str, int]:
    """The share of every live replica that knows every merchant: floor or ceil of N/K."""
    ordered = sorted(set(replicas))
    if not ordered:
        return {}
    base, extra = divmod(merchants, len(ordered))
    return {replica: base + (1 if index < extra else 0) for index, replica in enumerate(ordered)}


def preference(merchant_id: str, replica_id: str) -> bytes:
    """Rendezvous hash: a replica's stable, replica-specific ranking of the merchants."""
    return hashlib.sha256(f"{replica_id}\x00{merchant_id}".encode()).digest()


def assign(knows: Mapping[str, Collection[str]], holders: Mapping[str, str]) -> dict[str, str]:
    """merchant -> the live replica that should hold it (see the module docstring).

    ``knows`` maps every live replica to the merchants it is configured with; ``holders``
    who holds what now (live or not).
    """
    replicas = sorted(knows)
    known = {replica: frozenset(knows[replica]) for replica in replicas}
    universe = sorted(frozenset().union(*known.values())) if replicas else []
    candidates = {m: [r for r in replicas if m in known[r]] for m in universe}
    owner: dict[str, str] = {}
    load = dict.fromkeys(replicas, 0)
    for merchant in universe:  # holders keep what they hold
        holder = holders.get(merchant)
        if holder in load and merchant in known[holder]:
            owner[merchant] = holder
            load[holder] += 1
    # Every merchant held: the free ones, fewest knowers first, to the least loaded knower.
    free = [m for m in universe if m not in owner and m not in holders]
    for merchant in sorted(free, key=lambda m: (len(candidates[m]), m)):
        chosen = min(candidates[merchant], key=lambda r: (load[r], preference(merchant, r)))
        owner[merchant] = chosen
        load[chosen] += 1
    # Balance: move one merchant along a chain while that lowers the most loaded replica.
    for _ in range(len(universe) * max(len(replicas), 1) + 1):
        chain = _improving_chain(replicas, known, owner, load)
        if chain is None:
            break
        for merchant, receiver in chain:
            load[owner[merchant]] -= 1
            owner[merchant] = receiver
            load[receiver] += 1
    return owner


def _improving_chain(
    replicas: Sequence[str],
    known: Mapping[str, frozenset[str]],
    owner: Mapping[str, str],
    load: Mapping[str, int],
) -> list[tuple[str, str]] | None:
    """Moves (merchant, to replica) that take one merchant off a most loaded replica and give
    one to a replica holding at least two fewer, each step a merchant its receiver knows;
    None when there is no such chain (the assignment is as fair as the configurations allow)."""
    held: dict[str, list[str]] = {replica: [] for replica in replicas}
    for merchant, replica in owner.items():
        held[replica].append(merchant)
    for giver in sorted(replicas, key=lambda r: (-load[r], r)):
        # Breadth first from the giver: each edge gives one merchant to a replica knowing it.
        came_from: dict[str, tuple[str, str]] = {}
        queue = deque([giver])
        seen = {giver}
        while queue:
            current = queue.popleft()
            for merchant in sorted(
                held[current], key=lambda m: preference(m, current), reverse=True
            ):
                for receiver in replicas:
                    if receiver in seen or merchant not in known[receiver]:
                        continue
                    seen.add(receiver)
                    came_from[receiver] = (current, merchant)
                    if load[receiver] <= load[giver] - 2:
                        return _path(came_from, receiver, giver)
                    queue.append(receiver)
    return None


def _path(came_from: Mapping[str, tuple[str, str]], end: str, start: str) -> list[tuple[str, str]]:
    moves: list[tuple[str, str]] = []
    replica = end
    while replica != start:
        previous, merchant = came_from[replica]
        moves.append((merchant, replica))
        replica = previous
    return list(reversed(moves))


def plan_moves(
    me: str,
    *,
    merchants: Collection[str],
    live: Mapping[str, Collection[str] | None] | Iterable[str],
    holders: Mapping[str, str],
    overdue: Collection[str] = (),
) -> Moves:
    """What ``me`` should take and give back now.

    ``live``: the live replicas, each with the merchants it is configured with (None, or a
    plain list of ids: the same as ``merchants``).  A merchant this replica holds but that the
    assignment gives another is handed over, only ever to a replica that will take it (a live
    one that knows it); should it not, a merchant nobody holds is the first thing every
    replica's assignment gives out again: nothing stays released into the void.

    ``overdue``: merchants nobody has held for a while (the caller saw them free at its last
    tick too).  This replica takes those it knows whoever the assignment names: that one may
    be dead with a heartbeat not yet stale (a kill -9), and holding every merchant comes
    before balance, which the next ticks restore.
    """
    mine_known = frozenset(merchants)
    knows: dict[str, frozenset[str]] = {}
    if isinstance(live, Mapping):
        for replica, configured in live.items():
            knows[replica] = mine_known if configured is None else frozenset(configured)
    else:
        knows = dict.fromkeys(live, mine_known)
    knows[me] = mine_known
    owner = assign(knows, holders)
    free = [m for m in mine_known if m not in holders]
    assigned = sorted((m for m in free if owner.get(m) == me), key=lambda m: preference(m, me))
    late = sorted(
        (m for m in free if m in overdue and owner.get(m) != me), key=lambda m: preference(m, me)
    )
    acquire = (*assigned, *late)
    giving = sorted(
        (m for m, holder in holders.items() if holder == me and owner.get(m, me) != me),
        key=lambda m: preference(m, me),
        reverse=True,
    )
    return Moves(acquire=acquire, release=tuple(giving))
