"""recordsync: an exact, gap-free copy of a game platform's records in your SQL warehouse."""

import time

# When this process started, on the monotonic clock, as early as the package is imported
# (before the command's own imports, some 0.5 s here): the rate budget's cold start counts
# from it (``commands.merchant_command``), since nothing this process sends can precede it.
PROCESS_STARTED = time.monotonic()

__version__ = "0.1.0"

__all__ = ["PROCESS_STARTED", "__version__"]
