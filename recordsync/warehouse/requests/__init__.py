"""Work handed to a merchant's holder through the warehouse (``backfill``, ``verify``), so the
merchant's rate budget is spent by one process; ``rows`` is the life both share."""
