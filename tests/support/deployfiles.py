"""What the deployment tests share: where the files are, their parsers, and the real checkers.

The external checkers (systemd-analyze, promtool, hadolint, kubectl, kubernetes-validate) are
installed by ``.ci/deploy-checks``.  A test that needs one SKIPS when it is missing, saying how
to get it, unless ``RECORDSYNC_REQUIRE_SERVICES=1`` (CI), when it FAILS: a missing checker can
never turn into a green run.  PyYAML (a dependency of kubernetes-validate) is treated the same
way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, Final

import pytest

from recordsync.core.settings import MERCHANT_KEYS, PREFIX, Settings
from recordsync.metrics import MetricName, RoundEventMetricName

ROOT: Final = Path(__file__).resolve().parents[2]
DEPLOY: Final = ROOT / "deploy"
SYSTEMD: Final = DEPLOY / "systemd"
KUBERNETES: Final = DEPLOY / "kubernetes"
PROMETHEUS: Final = DEPLOY / "prometheus"
DOCKERFILE: Final = DEPLOY / "Dockerfile"
DASHBOARD: Final = DEPLOY / "grafana" / "recordsync.json"
OPERATIONS: Final = ROOT / "docs" / "operations.md"

REQUIRE_ENV: Final = "RECORDSYNC_REQUIRE_SERVICES"
HOW_TO_INSTALL: Final = "bash .ci/deploy-checks installs it"
TOOL_TIMEOUT_S: Final = 60


def missing(what: str) -> None:
    """Skip (or, under RECORDSYNC_REQUIRE_SERVICES=1, fail) because ``what`` is absent."""
    reason = f"{what} is not installed ({HOW_TO_INSTALL})"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} [{REQUIRE_ENV}=1]", pytrace=False)
    pytest.skip(reason)


def tool(name: str) -> str:
    """Path of a checker: the project's venv first (PyPI checkers), then PATH (Debian's)."""
    in_venv = Path(sys.executable).parent / name
    if in_venv.is_file() and os.access(in_venv, os.X_OK):
        return str(in_venv)
    found = shutil.which(name)
    if found is None:
        missing(name)
    assert found is not None
    return found


def run_tool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - fixed checker commands on the repository's files
        [str(arg) for arg in args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=TOOL_TIMEOUT_S,
        check=False,
    )


def yaml_documents(path: Path) -> list[Any]:
    """Every YAML document in ``path`` (PyYAML's safe loader)."""
    try:
        import yaml  # noqa: PLC0415 - optional: installed with kubernetes-validate
    except ImportError:
        missing("PyYAML")
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def yaml_document(path: Path) -> Any:
    (document,) = yaml_documents(path)
    return document


# -- the code's contract -------------------------------------------------------------------


def setting_variables() -> frozenset[str]:
    """Every RECORDSYNC_* variable ``load_settings`` reads."""
    names = {
        PREFIX + field.name.upper()
        for field in fields(Settings)
        if field.name not in {"warnings", "merchants"}  # merchants: the file's [[merchants]]
    }
    # The single merchant's variables, the same keys as a [[merchants]] entry.
    names |= {PREFIX + key.upper() for key in MERCHANT_KEYS}
    return frozenset(names | {PREFIX + "CONFIG"})


METRIC_NAMES: Final = frozenset(str(name) for name in (*MetricName, *RoundEventMetricName))
HISTOGRAMS: Final = frozenset(
    {
        MetricName.PLATFORM_REQUEST_DURATION,
        MetricName.WAREHOUSE_WRITE_DURATION,
        RoundEventMetricName.REPLY_DURATION,
    }
)
# Series Prometheus itself adds to every scrape.
PROMETHEUS_SERIES: Final = frozenset({"up"})

_PROMQL_KEYWORDS: Final = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "offset",
        "bool",
        "inf",
        "nan",
    }
)


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, labels or keywords)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(
        r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text
    )  # label lists
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\boffset\s+\w+", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def exported_metric(name: str) -> str | None:
    """The MetricName a scraped series belongs to (histogram suffixes removed), else None."""
    if name in METRIC_NAMES:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and base in HISTOGRAMS:
            return base
    return None


def unknown_metrics(exprs: Iterable[str]) -> dict[str, set[str]]:
    """For each expression, the metric names neither the daemon nor Prometheus exports."""
    unknown: dict[str, set[str]] = {}
    for expr in exprs:
        bad = {
            name
            for name in promql_metric_names(expr)
            if exported_metric(name) is None and name not in PROMETHEUS_SERIES
        }
        if bad:
            unknown[expr] = bad
    return unknown


def promtool_check_exprs(exprs: Mapping[str, str], tmp_path: Path) -> None:
    """Parse each expression with promtool (as recording rules: same PromQL parser)."""
    promtool = tool("promtool")
    lines = ["groups:", "  - name: parsed", "    rules:"]
    for index, expr in enumerate(exprs.values()):
        lines += [f"      - record: parsed:expr_{index}", f"        expr: {_json_string(expr)}"]
    rules = tmp_path / "parsed.rules.yml"
    rules.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_tool(promtool, "check", "rules", rules)
    assert result.returncode == 0, result.stdout + result.stderr


def _json_string(text: str) -> str:
    import json  # noqa: PLC0415

    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


# -- systemd unit files --------------------------------------------------------------------


def unit_file(path: Path) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values in order]}}``: systemd allows a key more than once."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}: {line!r} before any section"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def env_file(path: Path) -> dict[str, str]:
    """KEY=value lines of an environment file (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: {raw!r} is not KEY=value"
        values[key.strip()] = value.strip()
    return values


def commented_variables(path: Path) -> set[str]:
    """RECORDSYNC_* names in commented-out assignments (``# RECORDSYNC_X=...``)."""
    pattern = re.compile(r"^#\s*(" + PREFIX + r"\w+)=", re.MULTILINE)
    return set(pattern.findall(path.read_text(encoding="utf-8")))


def seconds(value: str) -> float:
    """A systemd time span such as ``30s``, ``15min`` or ``1min 30s`` in seconds."""
    units = {"ms": 0.001, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "": 1}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(number) * units[unit]
    return total
