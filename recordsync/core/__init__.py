"""The core: the values and rules every layer shares, with no I/O of its own.

Records, pages and capabilities as typed values (``models``), exact money (``money``), platform
time (``times``), the sync's persistent state (``state``), the one exception hierarchy
(``errors``), the secret (``secret``), the frozen settings (``settings``) and the process's
cooperative stop (``stopping``, ``early_signals``).  It imports nothing else of recordsync.
"""

__all__: list[str] = []
