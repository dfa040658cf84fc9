"""Every package's ``__all__`` is sorted and names exactly its public members (as httpx's
tests/test_exported_members.py keeps its own): a name added to a package is exported on
purpose or kept private, never half of each.  The packages without a facade (the
code imports their modules by name) export nothing, so that none grows one again unseen."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

PACKAGES = [
    "recordsync",
    "recordsync.core.settings",
    "recordsync.metrics",
    "recordsync.warehouse",
    "recordsync.service",
    "recordsync.sim",
]
WITHOUT_FACADE = [
    "recordsync.core",
    "recordsync.platform",
    "recordsync.sync",
    "recordsync.fleet",
]
# Dunder names a package exports on purpose.
EXPORTED_DUNDERS = {"__version__"}


def isort_style(name: str) -> tuple[int, str]:
    """The order ruff (RUF022) keeps ``__all__`` in: CONSTANTS, then Classes, then the rest."""
    if name.isupper():
        return 0, name
    return (1, name) if name[:1].isupper() else (2, name)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_names_every_public_member(name):
    package = importlib.import_module(name)
    exported = package.__all__
    assert exported == sorted(exported, key=isort_style)
    for member in exported:  # a package that imports its members on first use has them now
        getattr(package, member, None)
    public = {
        member
        for member, value in vars(package).items()
        if (not member.startswith("_") or member in EXPORTED_DUNDERS)
        # Submodules become attributes of their package once imported: not exports.
        and not isinstance(value, ModuleType)
    }
    assert set(exported) == public


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_exists(name):
    package = importlib.import_module(name)
    for member in package.__all__:
        assert hasattr(package, member), f"{name}.__all__ names {member}, which is missing"


@pytest.mark.parametrize("name", WITHOUT_FACADE)
def test_a_package_without_a_facade_exports_nothing(name):
    package = importlib.import_module(name)
    assert not hasattr(package, "__all__")
    public = {
        member
        for member, value in vars(package).items()
        if not member.startswith("_") and not isinstance(value, ModuleType)
    }
    assert public == set()
