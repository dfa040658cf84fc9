"""The lease protocol: how one merchant is synced by one process at a time, whatever fails.

A merchant's lease is three things, each in a module here:

1. A lock the database (or the kernel) frees when its holder dies or goes silent
   (``backends``: PostgreSQL advisory locks, MariaDB ``GET_LOCK``, a SQLite file lock; their
   names in ``keys``; the connection they live on and its silence limits in ``connection``).
2. An epoch (``epochs``): every new holder raises the merchant's row in ``merchant_leases`` to
   at least the database clock in milliseconds, and every write of the sync checks it in its
   own transaction (``epochs.check_epoch``), so a holder paused past its lock cannot commit.
3. A confirmation (``session``): a keeper thread re-reads the locks every few seconds; a
   merchant unconfirmed for ``lease_seconds - 2`` s is one whose caller must stop sending,
   before the database could let another take it.

``replicas`` says who is alive (heartbeats by the database's clock); ``support`` refuses the
servers and files where these guarantees cannot hold.  Who SHOULD hold what (balancing,
takeovers of overdue merchants) is policy, in ``recordsync.fleet``; the fenced store the sync
writes through is ``recordsync.warehouse.merchant_store``.  Nothing here imports either.
"""

from recordsync.warehouse.lease.session import FleetSession

__all__ = ["FleetSession"]
