"""The shipped recipes for several merchants: the systemd drop-ins with the TOML example, and
the Kubernetes overlay deploy/kubernetes-merchants.  Each passes the real tools (systemd-analyze,
kustomize, kubernetes-validate) and loads as valid settings the way the daemon would see it:
the TOML where the unit or the pod puts it, every secret where it is mounted."""

from __future__ import annotations

import posixpath
import shlex
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from support.deployfiles import (
    DEPLOY,
    KUBERNETES,
    SYSTEMD,
    env_file,
    run_tool,
    tool,
    unit_file,
    yaml_documents,
)

from recordsync.cli import build_parser
from recordsync.core.settings import PREFIX, load_settings

DAEMON_DROP_IN = SYSTEMD / "recordsync.service.d" / "merchants.conf"
BACKFILL_DROP_IN = SYSTEMD / "recordsync-backfill@.service.d" / "merchants.conf"
TOML_EXAMPLE = SYSTEMD / "recordsync.toml.example"
ENV_EXAMPLE = SYSTEMD / "recordsync.env.example"
OVERLAY = DEPLOY / "kubernetes-merchants"
DROP_INS = [
    pytest.param(DAEMON_DROP_IN, id="daemon"),
    pytest.param(BACKFILL_DROP_IN, id="backfill"),
]
SYSTEM_UNIT_DIRS = (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))
MAX_EXPOSURE_TENTHS = "20"
SECRET = "s" * 43


def _secret(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SECRET + "\n", encoding="utf-8")
    path.chmod(0o600)


# -- systemd --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def drop_in_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The install notes' root with the units AND the merchants drop-ins in place."""
    root = tmp_path_factory.mktemp("root")
    system = next((d for d in SYSTEM_UNIT_DIRS if d.is_dir()), None)
    if system is None:
        pytest.skip("no systemd unit directory on this machine")
    shutil.copytree(system, root / "usr/lib/systemd/system", symlinks=True)
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    for unit in SYSTEMD.glob("*.service"):
        shutil.copy(unit, units / unit.name)
    for drop_ins in SYSTEMD.glob("*.service.d"):
        shutil.copytree(drop_ins, units / drop_ins.name)
    (command,) = unit_file(SYSTEMD / "recordsync.service")["Service"]["ExecStart"]
    executable = root / shlex.split(command)[0].lstrip("/")
    executable.parent.mkdir(parents=True)
    shutil.copy(Path(sys.executable).parent / "recordsync", executable)
    return root


@pytest.mark.parametrize("unit", ["recordsync.service", "recordsync-backfill@march.service"])
def test_units_with_the_drop_ins_pass_systemd_analyze_verify_and_stay_locked_down(
    drop_in_root, unit
):
    analyze = tool("systemd-analyze")
    result = run_tool(analyze, "verify", f"--root={drop_in_root}", unit)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    result = run_tool(
        analyze,
        "security",
        "--offline=true",
        f"--root={drop_in_root}",
        f"--threshold={MAX_EXPOSURE_TENTHS}",
        "--no-pager",
        unit,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _credentials(drop_in: Path) -> dict[str, str]:
    """The drop-in's credentials (ID -> path), after checking it first drops the unit's own."""
    service = unit_file(drop_in)["Service"]
    assert service["LoadCredential"][0] == "", "the unit's `secret` credential must go first"
    return dict(item.split(":", 1) for item in service["LoadCredential"][1:])


@pytest.mark.parametrize("drop_in", DROP_INS)
def test_drop_in_passes_the_toml_and_the_secrets_directory_instead_of_one_secret(drop_in):
    service = unit_file(drop_in)["Service"]
    credentials = _credentials(drop_in)
    (config,) = [v for v in service["Environment"] if v.startswith(f"{PREFIX}CONFIG=")]
    config_id = config.removeprefix(f"{PREFIX}CONFIG=%d/")
    assert credentials[config_id] == "/etc/recordsync/recordsync.toml"
    assert credentials["merchants"] == "/etc/recordsync/merchants"
    unset = {name for value in service["UnsetEnvironment"] for name in value.split()}
    assert {f"{PREFIX}SECRET_FILE", f"{PREFIX}MERCHANT_ID"} <= unset


def test_the_toml_example_loads_as_the_daemon_sees_it(tmp_path):
    """The unit's environment (the env example, the drop-in's unset variables gone) and its
    credentials directory: the TOML beside every merchants_<file> secret."""
    credentials_dir = tmp_path / "credentials"
    credentials = _credentials(DAEMON_DROP_IN)
    entries = tomllib.loads(TOML_EXAMPLE.read_text(encoding="utf-8"))["merchants"]
    for entry in entries:
        secret_file = entry["secret_file"]
        assert not posixpath.isabs(secret_file), "relative: beside the TOML in any unit"
        assert secret_file.startswith("merchants_")  # the directory credential's IDs
        assert "merchants" in credentials
        _secret(credentials_dir / secret_file)
    toml = credentials_dir / "recordsync.toml"
    shutil.copy(TOML_EXAMPLE, toml)
    unset = {
        name
        for value in unit_file(DAEMON_DROP_IN)["Service"]["UnsetEnvironment"]
        for name in value.split()
    }
    environ = {k: v for k, v in env_file(ENV_EXAMPLE).items() if k not in unset}
    environ[f"{PREFIX}CONFIG"] = str(toml)
    settings = load_settings(environ)
    assert [m.merchant_id for m in settings.merchants] == [e["merchant_id"] for e in entries]
    assert len(settings.merchants) >= 2
    assert len({m.history_from for m in settings.merchants}) == 2  # the defaults and an own
    assert settings.warnings == ()


def test_backfill_drop_in_names_the_merchant_from_its_range_file():
    (reset, command) = unit_file(BACKFILL_DROP_IN)["Service"]["ExecStart"]
    assert reset == ""
    instance = {
        "BACKFILL_MERCHANT": "brand-a",
        "BACKFILL_FROM": "2026-03-01T00:00:00Z",
        "BACKFILL_TO": "2026-03-08T00:00:00Z",
    }
    words = [
        instance.get(word.removeprefix("${").removesuffix("}"), word)
        for word in shlex.split(command)
    ]
    (daemon_command,) = unit_file(SYSTEMD / "recordsync.service")["Service"]["ExecStart"]
    assert words[0] == shlex.split(daemon_command)[0]
    args = build_parser().parse_args(words[1:])
    assert (args.command, args.merchant) == ("backfill", "brand-a")


# -- Kubernetes ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    result = run_tool(tool("kubectl"), "kustomize", OVERLAY)
    assert result.returncode == 0, result.stderr
    path = tmp_path_factory.mktemp("kustomize") / "merchants.yaml"
    path.write_text(result.stdout, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def resources(rendered) -> dict[tuple[str, str], Any]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in yaml_documents(rendered)}


def test_overlay_renders_and_passes_kubernetes_validate_strict(rendered):
    result = run_tool(tool("kubernetes-validate"), "--strict", rendered)
    unknown = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if "Couldn't find schema" in line
        and not any(f"kind {kind} " in line for kind in ("ServiceMonitor", "PrometheusRule"))
    ]
    assert unknown == []
    assert result.returncode == 0, result.stdout + result.stderr


def test_overlay_keeps_the_base_and_changes_only_the_merchants(resources):
    base = {
        (doc["kind"], doc["metadata"]["name"])
        for name in yaml_documents(KUBERNETES / "kustomization.yaml")[0]["resources"]
        for doc in yaml_documents(KUBERNETES / name)
    }
    assert base <= set(resources)
    (generated,) = [
        name
        for kind, name in resources
        if kind == "ConfigMap" and name.startswith("recordsync-merchants-")
    ]
    assert generated  # hash-suffixed: a new TOML rolls the pods
    assert f"{PREFIX}MERCHANT_ID" not in resources["ConfigMap", "recordsync"]["data"]


def test_overlay_pod_loads_every_merchant_with_its_secret_where_it_is_mounted(resources, tmp_path):
    """The pod's environment, the TOML and the secrets as the kubelet mounts them (under
    tmp_path), loaded by the settings: every merchant, every secret found."""
    pod = resources["Deployment", "recordsync"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert f"{PREFIX}SECRET_FILE" not in env
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    assert all("subPath" not in mount for mount in mounts.values()), "no rotation on subPath"

    config_path = env[f"{PREFIX}CONFIG"]["value"]
    config_dir, config_key = posixpath.split(config_path)
    config_map = volumes[mounts[config_dir]["name"]]["configMap"]["name"]
    toml_text = resources["ConfigMap", config_map]["data"][config_key]
    entries = tomllib.loads(toml_text)["merchants"]
    for entry in entries:
        secret_dir, key = posixpath.split(entry["secret_file"])
        mount = mounts[secret_dir]
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["secret"]["secretName"] == "recordsync-merchants"
        _secret(tmp_path / secret_dir.lstrip("/") / key)
        toml_text = toml_text.replace(
            f'"{entry["secret_file"]}"', f'"{tmp_path}{entry["secret_file"]}"'
        )
    toml = tmp_path / config_path.lstrip("/")
    toml.parent.mkdir(parents=True, exist_ok=True)
    toml.write_text(toml_text, encoding="utf-8")

    environ = dict(resources["ConfigMap", "recordsync"]["data"])
    for name, item in env.items():
        environ[name] = item.get("value", "postgresql+psycopg://recordsync:pw@db:5432/warehouse")
    environ[f"{PREFIX}CONFIG"] = str(toml)
    settings = load_settings(environ)
    assert [m.merchant_id for m in settings.merchants] == [e["merchant_id"] for e in entries]
    assert len(settings.merchants) >= 2
    assert settings.database_url.startswith("postgresql")
