"""The warehouse: schema, migrations, the revision-guarded upsert, revision history, sync state,
quarantine, the BI views, and the fleet: merchant locks, leases with epochs and fenced writes,
replicas, and the requests commands hand to a merchant's holder."""

from recordsync.warehouse.connection import create_warehouse_engine
from recordsync.warehouse.lease import FleetSession
from recordsync.warehouse.merchant_store import MerchantStore
from recordsync.warehouse.pool import PoolDemand
from recordsync.warehouse.store import Warehouse
from recordsync.warehouse.values import (
    Availability,
    CatalogueResult,
    DailySummary,
    DriftCheckRun,
    Freshness,
    GameName,
    HolderRequest,
    JobStatus,
    Pause,
    QuarantinedRecord,
    ReplicaVersion,
    RequestKind,
    RequestState,
    WarehouseStatus,
    WriteResult,
)

__all__ = [
    "Availability",
    "CatalogueResult",
    "DailySummary",
    "DriftCheckRun",
    "FleetSession",
    "Freshness",
    "GameName",
    "HolderRequest",
    "JobStatus",
    "MerchantStore",
    "Pause",
    "PoolDemand",
    "QuarantinedRecord",
    "ReplicaVersion",
    "RequestKind",
    "RequestState",
    "Warehouse",
    "WarehouseStatus",
    "WriteResult",
    "create_warehouse_engine",
]
