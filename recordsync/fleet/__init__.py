"""The fleet: which of the live replicas syncs which merchant, decided through the warehouse
(``share``: the pure rule; ``member``: the loop that heartbeats, takes and gives merchants).

It knows the core only; the service gives it the warehouse's fleet session and the means to
start and stop one merchant's sync.
"""

from recordsync.fleet.member import FleetSession, Member, Syncs
from recordsync.fleet.share import Moves, plan_moves, targets

__all__ = ["FleetSession", "Member", "Moves", "Syncs", "plan_moves", "targets"]
