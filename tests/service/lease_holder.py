"""Helper process for test_lease.py: take the lease, print HELD, then sleep until killed.

Usage: python lease_holder.py <warehouse url> <merchant id> [<lease seconds>]

Logs go to stdout as JSON lines (one per event), so the test sees ``lease_waiting`` while
this copy stands by, and ``HELD`` once it holds the lease.
"""

import sys
import time

import structlog

from recordsync.service.lease import acquire_lease
from recordsync.warehouse import Warehouse


def main() -> None:
    url, merchant_id = sys.argv[1], sys.argv[2]
    lease_seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
    )
    acquire_lease(
        Warehouse.connect(url),
        merchant_id,
        sleep=time.sleep,
        poll=0.1,
        heartbeat=0.5,
        lease_seconds=lease_seconds,
        log_every=0.5,
    )
    print("HELD", flush=True)  # noqa: T201 - the test reads stdout
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
