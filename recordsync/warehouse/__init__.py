"""The warehouse: schema, migrations, the revision-guarded upsert, revision history, sync state,
quarantine, the BI views, and the fleet: merchant locks, leases with epochs and fenced writes,
replicas, backfill and verify requests."""

from recordsync.warehouse.connection import create_warehouse_engine
from recordsync.warehouse.lease import FleetSession
from recordsync.warehouse.merchant_store import MerchantStore
from recordsync.warehouse.store import Warehouse
from recordsync.warehouse.values import (
    Availability,
    BackfillRequest,
    BackfillState,
    CatalogueResult,
    DailySummary,
    Freshness,
    GameName,
    JobStatus,
    QuarantinedRecord,
    VerifyRequest,
    WarehouseStatus,
    WriteResult,
)

__all__ = [
    "Availability",
    "BackfillRequest",
    "BackfillState",
    "CatalogueResult",
    "DailySummary",
    "FleetSession",
    "Freshness",
    "GameName",
    "JobStatus",
    "MerchantStore",
    "QuarantinedRecord",
    "VerifyRequest",
    "Warehouse",
    "WarehouseStatus",
    "WriteResult",
    "create_warehouse_engine",
]
