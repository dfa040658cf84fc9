"""The fleet: which of the live replicas syncs which merchant, decided through the warehouse
(``share``: the pure rule; ``member``: the loop that heartbeats, takes and gives merchants).

It knows the core only; the service gives it the warehouse's fleet session and the means to
start and stop one merchant's sync.

No facade: each module is imported by its own name (``from recordsync.fleet.<module> import
...``), so that importing one part never loads the rest.
"""
