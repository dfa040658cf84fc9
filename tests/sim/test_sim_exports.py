"""The simulator stays independent of the client, the sync and the warehouse (its ``__all__`` is
kept by tests/test_exported_members.py; lint-imports checks the same arrows in CI)."""

from __future__ import annotations

import ast
from pathlib import Path

import recordsync.sim


def test_the_simulator_imports_nothing_from_the_client_sync_or_warehouse():
    allowed = {
        "recordsync.platform.signing",
        "recordsync.core.times",
        "recordsync.core.money",
        "recordsync.core.errors",
        "recordsync.core.secret",
    }
    package = Path(recordsync.sim.__file__).parent
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                if module.startswith("recordsync") and not module.startswith("recordsync.sim"):
                    assert module in allowed, f"{path.name} imports {module}"
