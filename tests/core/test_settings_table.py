"""The key table (the ``Settings`` fields), its defaults and the README's table of settings
agree: a setting is read, defaulted and documented one way."""

from __future__ import annotations

import re
from typing import Any

import pytest
from support.deployfiles import ROOT, setting_variables

from recordsync.core.settings import PREFIX, SETTING_KINDS
from recordsync.core.settings.keys import DEFAULTS

README = ROOT / "README.md"
HEADER = "| variable | meaning | default |"


def readme_defaults() -> dict[str, str]:
    """Each variable of the README's table of settings, with its default cell.

    A row names one variable, several joined by `` / `` with as many defaults joined the same
    way, or alternatives joined by ``or`` sharing one default."""
    text = README.read_text(encoding="utf-8")
    lines = text[text.index(HEADER) :].splitlines()[2:]
    cells: dict[str, str] = {}
    for line in lines:
        if not line.startswith("|"):
            break
        first, *_, last = (cell.strip() for cell in line.strip("|").split("|"))
        variables = re.findall(r"`(RECORDSYNC_\w+)`", first)
        defaults = last.split(" / ") if " / " in first else [last] * len(variables)
        assert len(defaults) == len(variables), line
        for variable, default in zip(variables, defaults, strict=True):
            assert variable not in cells, f"{variable} is in the README's table twice"
            cells[variable] = default
    return cells


def written(value: Any) -> str | None:
    """A default as the README writes it: a value in backticks, or None for a default the
    README says in words ("none", "required", "by terminal")."""
    if value is None:
        return None
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


TOP_LEVEL: dict[str, Any] = {
    PREFIX + key.upper(): default
    for key, default in DEFAULTS.items()
    if key not in {"merchants", "warnings"}
}


def test_the_readme_documents_every_setting_and_nothing_else():
    assert set(readme_defaults()) == setting_variables()


@pytest.mark.parametrize("variable", sorted(TOP_LEVEL))
def test_the_readme_gives_each_setting_the_default_of_the_key_table(variable):
    cell = readme_defaults()[variable]
    expected = written(TOP_LEVEL[variable])
    if expected is None:
        assert "`" not in cell, f"{variable} has no default value, the README gives {cell}"
    else:
        assert cell == expected


@pytest.mark.parametrize("variable", sorted(setting_variables() - set(TOP_LEVEL)))
def test_the_merchants_keys_and_the_config_file_have_no_default_value(variable):
    """A merchant's keys are required or optional, never defaulted to a value."""
    assert "`" not in readme_defaults()[variable]


@pytest.mark.parametrize("key", sorted(key for key in SETTING_KINDS if DEFAULTS[key] is not None))
def test_each_default_is_a_value_its_own_kind_accepts(key):
    """An operator who writes a default back gets the default: the kind and the default of
    one key never disagree."""
    default = DEFAULTS[key]
    text = str(default).lower() if isinstance(default, bool) else str(default)
    assert SETTING_KINDS[key].parse(text) == default
