"""A merchant's store, fenced or not, is a ``SyncStore`` (and a ``CatalogueStore``): the sync
can be handed one without knowing the warehouse, and never names the merchant again.  mypy
checks the annotated assignments below (pyproject.toml names this file in ``[tool.mypy]
files``, so ``mypy`` fails when the store and the Protocols part); pytest runs it."""

from __future__ import annotations

from recordsync.sync.ports import CatalogueStore, SyncStore
from recordsync.warehouse import MerchantStore, Warehouse


def test_a_fenced_store_is_a_sync_store_for_its_merchant_at_its_epoch() -> None:
    warehouse = Warehouse.connect("sqlite://")
    try:
        store: SyncStore = warehouse.fenced("merchant-1", 7)
        catalogue: CatalogueStore = warehouse.fenced("merchant-1", 7)
        assert isinstance(store, MerchantStore)
        assert isinstance(catalogue, MerchantStore)
        assert (store.merchant_id, store.epoch) == ("merchant-1", 7)
        assert store.concurrent_writes is warehouse.pages.concurrent_writes
    finally:
        warehouse.close()


def test_an_unfenced_store_is_a_sync_store_bound_to_its_merchant() -> None:
    warehouse = Warehouse.connect("sqlite://")
    try:
        store: SyncStore = warehouse.for_merchant("merchant-1")
        assert isinstance(store, MerchantStore)
        assert (store.merchant_id, store.epoch) == ("merchant-1", None)
    finally:
        warehouse.close()
