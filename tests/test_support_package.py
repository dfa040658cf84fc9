"""The tests' helpers live in one support package: a module under tests/ is a test
module, a conftest, or a part of ``support``; a test imports its helpers from there, never
from another test module or a conftest."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parent


def test_every_helper_module_is_in_the_support_package():
    strays = sorted(
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("*.py")
        if not path.name.startswith("test_")
        and path.name not in {"conftest.py", "__init__.py"}
        and path.parent.name != "support"
    )
    assert strays == []


def test_no_test_imports_from_another_test_module_or_a_conftest():
    borrowed = re.compile(r"^\s*from\s+[\w.]*\b(test_\w+|conftest)\s+import", re.MULTILINE)
    offenders = sorted(
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("*.py")
        if borrowed.search(path.read_text())
    )
    assert offenders == []
