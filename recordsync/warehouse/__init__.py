"""The warehouse: schema, migrations, the revision-guarded upsert, sync state and quarantine."""

from recordsync.warehouse.connection import create_warehouse_engine
from recordsync.warehouse.store import Warehouse
from recordsync.warehouse.values import JobStatus, QuarantinedRecord, WarehouseStatus, WriteResult

__all__ = [
    "JobStatus",
    "QuarantinedRecord",
    "Warehouse",
    "WarehouseStatus",
    "WriteResult",
    "create_warehouse_engine",
]
