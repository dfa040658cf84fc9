"""The warehouse: schema, migrations, the revision-guarded upsert, revision history, sync state,
quarantine, and the BI views."""

from recordsync.warehouse.connection import create_warehouse_engine
from recordsync.warehouse.store import Warehouse
from recordsync.warehouse.values import (
    DailySummary,
    Freshness,
    JobStatus,
    QuarantinedRecord,
    WarehouseStatus,
    WriteResult,
)

__all__ = [
    "DailySummary",
    "Freshness",
    "JobStatus",
    "QuarantinedRecord",
    "Warehouse",
    "WarehouseStatus",
    "WriteResult",
    "create_warehouse_engine",
]
