"""The core: the values and rules every layer shares, with no I/O of its own.

Records, pages and capabilities as typed values (``models``), exact money (``money``), platform
time (``times``), the sync's persistent state (``state``), the one exception hierarchy
(``errors``), the secret and where it comes from (``secret``), the frozen settings with their
merchants (``settings``) and the process's cooperative stop (``stopping``, ``early_signals``).
It imports nothing else of recordsync.

No facade: each module is imported by its own name (``from recordsync.core.<module> import
...``), so that importing one part never loads the rest.
"""
