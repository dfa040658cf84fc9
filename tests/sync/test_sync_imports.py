"""The sync reaches the client and the warehouse only through its Protocols."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import recordsync.sync

SYNC_MODULES = sorted(Path(recordsync.sync.__file__).parent.glob("*.py"))
# The concrete I/O and the layers above: the sync sees them through sync.ports or not at all.
FORBIDDEN = (
    "recordsync.platform.client",
    "recordsync.warehouse",
    "recordsync.service",
    "recordsync.sim",
    "recordsync.cli",
)


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("path", SYNC_MODULES, ids=lambda path: path.name)
def test_the_sync_imports_no_concrete_client_or_warehouse(path: Path):
    assert {name for name in imported_modules(path) if name.startswith(FORBIDDEN)} == set()
