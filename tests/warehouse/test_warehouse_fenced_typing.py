"""The fenced view is a ``SyncStore``: the sync can be handed one without knowing the
warehouse.  mypy checks the annotated assignment below (pyproject.toml names this file in
``[tool.mypy] files``, so ``mypy`` fails when the view and the Protocol part); pytest runs it."""

from __future__ import annotations

from recordsync.sync.ports import SyncStore
from recordsync.warehouse import FencedWarehouse, Warehouse


def test_a_fenced_warehouse_is_a_sync_store_for_its_merchant() -> None:
    warehouse = Warehouse.connect("sqlite://")
    try:
        store: SyncStore = warehouse.fenced("merchant-1", 7)
        assert isinstance(store, FencedWarehouse)
        assert (store.merchant_id, store.epoch) == ("merchant-1", 7)
        assert store.concurrent_writes is warehouse.concurrent_writes
    finally:
        warehouse.close()
