"""Work handed to a merchant's holder through the warehouse, so that the merchant's rate
budget is spent by one process: ``book`` is the one table's life; ``previous`` answers what a
previous version's command asks in the tables before it."""
