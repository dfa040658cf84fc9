"""The public surface of recordsync.sim stays in step with its ``__all__``."""

from __future__ import annotations

import ast
from pathlib import Path

import recordsync.sim


def isort_style(name: str) -> tuple[int, str]:
    """The order ruff keeps ``__all__`` in: CONSTANTS, then Classes, then functions."""
    if name.isupper():
        return 0, name
    return (1, name) if name[:1].isupper() else (2, name)


def test_all_is_sorted_and_names_every_public_member():
    names = recordsync.sim.__all__
    assert names == sorted(names, key=isort_style)
    public = {
        name
        for name, value in vars(recordsync.sim).items()
        if not name.startswith("_") and not isinstance(value, type(recordsync))
    }
    assert set(names) == public


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
