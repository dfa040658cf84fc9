"""deploy/systemd: the units pass systemd-analyze and agree with the CLI and the settings."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import pytest
from support.deployfiles import (
    SYSTEMD,
    commented_variables,
    env_file,
    run_tool,
    seconds,
    setting_variables,
    tool,
    unit_file,
)

from recordsync.cli import EXIT_CONFIG, build_parser
from recordsync.core.settings import DEFAULT_HTTP_PORT, PREFIX, load_settings

DAEMON = SYSTEMD / "recordsync.service"
BACKFILL = SYSTEMD / "recordsync-backfill@.service"
ENV_EXAMPLE = SYSTEMD / "recordsync.env.example"
UNITS = [pytest.param(DAEMON, id="daemon"), pytest.param(BACKFILL, id="backfill")]
# recordsync exits 0 within 10 s of SIGTERM; systemd must not SIGKILL it before then.
GRACEFUL_SHUTDOWN_S = 10
# systemd-analyze security shows exposure from 0.0 (locked down) to 10.0 (wide open); its
# --threshold is in tenths.  The units score 1.2; fail above 2.0.
MAX_EXPOSURE_TENTHS = "20"
SYSTEM_UNIT_DIRS = (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))


def _exec_start(path: Path) -> list[str]:
    (command,) = unit_file(path)["Service"]["ExecStart"]
    return shlex.split(command)


@pytest.fixture(scope="module")
def unit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root as the install notes leave it: the units in /etc, recordsync where ExecStart says.

    ``--root`` keeps systemd-analyze off this machine's own /etc; the system's own units
    (targets the units are ordered after) are copied in from the host.
    """
    root = tmp_path_factory.mktemp("root")
    system = next((d for d in SYSTEM_UNIT_DIRS if d.is_dir()), None)
    if system is None:
        pytest.skip("no systemd unit directory on this machine")
    shutil.copytree(system, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    for unit in (DAEMON, BACKFILL):
        shutil.copy(unit, root / "etc/systemd/system" / unit.name)
    executable = root / _exec_start(DAEMON)[0].lstrip("/")
    executable.parent.mkdir(parents=True)
    shutil.copy(Path(sys.executable).parent / "recordsync", executable)
    return root


@pytest.mark.parametrize(
    "unit",
    ["recordsync.service", "recordsync-backfill@march.service"],
    ids=["daemon", "backfill"],
)
def test_unit_passes_systemd_analyze_verify_without_a_warning(unit_root, unit):
    # verify exits 0 on unknown keys and bad values (it only warns), so any output fails.
    result = run_tool(tool("systemd-analyze"), "verify", f"--root={unit_root}", unit)
    assert result.returncode == 0
    assert result.stdout + result.stderr == ""


@pytest.mark.parametrize(
    "unit",
    ["recordsync.service", "recordsync-backfill@march.service"],
    ids=["daemon", "backfill"],
)
def test_unit_sandbox_exposure_stays_low(unit_root, unit):
    result = run_tool(
        tool("systemd-analyze"),
        "security",
        "--offline=true",
        f"--root={unit_root}",
        f"--threshold={MAX_EXPOSURE_TENTHS}",
        "--no-pager",
        unit,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr


@pytest.mark.parametrize("path", UNITS)
def test_secret_comes_as_a_credential_file_named_by_the_settings_variable(path):
    service = unit_file(path)["Service"]
    assert service["LoadCredential"] == ["secret:/etc/recordsync/secret"]
    assert f"{PREFIX}SECRET_FILE=%d/secret" in service["Environment"]
    assert not any(value.startswith(f"{PREFIX}SECRET=") for value in service["Environment"])
    assert "/etc/recordsync/recordsync.env" in service["EnvironmentFile"]


@pytest.mark.parametrize("path", UNITS)
def test_unit_is_hardened(path):
    service = unit_file(path)["Service"]
    expected = {
        "DynamicUser": "yes",
        "StateDirectory": "recordsync",
        "ProtectSystem": "strict",
        "NoNewPrivileges": "yes",
        "PrivateTmp": "yes",
        "CapabilityBoundingSet": "",
        "AmbientCapabilities": "",
    }
    assert {key: service.get(key, [None])[-1] for key in expected} == expected
    assert "@system-service" in service["SystemCallFilter"]
    assert service["WorkingDirectory"] == ["%S/recordsync"]


@pytest.mark.parametrize("path", UNITS)
def test_stop_timeout_leaves_room_for_the_graceful_shutdown(path):
    service = unit_file(path)["Service"]
    assert service["KillSignal"] == ["SIGTERM"]
    assert seconds(service["TimeoutStopSec"][-1]) >= 2 * GRACEFUL_SHUTDOWN_S


# Measured with one daemon holding 1 to 80 merchants (docs/operations.md, "Sizing per
# merchant"): about 27 threads plus one per merchant held; about 85 MiB plus 2-3 per merchant.
BASE_THREADS = 27
BASE_RSS_MIB = 85
LEAST_RSS_PER_MERCHANT_MIB = 2


def test_task_limit_lets_a_host_hold_every_merchant_its_memory_allows():
    """A host may hold every merchant while the others are down: the memory limit, not the
    thread limit, must be what bounds it (a thread that cannot start stops the daemon)."""
    service = unit_file(DAEMON)["Service"]
    memory_max = service["MemoryMax"][-1]
    assert memory_max.endswith("M")
    merchants = (int(memory_max.removesuffix("M")) - BASE_RSS_MIB) // LEAST_RSS_PER_MERCHANT_MIB
    assert int(service["TasksMax"][-1]) >= BASE_THREADS + merchants


def test_daemon_restarts_with_backoff_but_not_on_configuration_errors():
    unit = unit_file(DAEMON)
    assert unit["Service"]["Restart"] == ["on-failure"]
    assert seconds(unit["Service"]["RestartSec"][-1]) >= 5
    assert unit["Service"]["RestartPreventExitStatus"] == [str(EXIT_CONFIG)]
    assert int(unit["Unit"]["StartLimitBurst"][-1]) >= 1
    assert seconds(unit["Unit"]["StartLimitIntervalSec"][-1]) >= 60


def test_daemon_command_is_recordsync_run():
    command = _exec_start(DAEMON)
    assert Path(command[0]).name == "recordsync"
    assert build_parser().parse_args(command[1:]).command == "run"


def test_backfill_command_parses_with_the_range_from_its_instance_file():
    unit = unit_file(BACKFILL)["Service"]
    assert "/etc/recordsync/backfill-%i.env" in unit["EnvironmentFile"]
    assert unit["Environment"].count(f"{PREFIX}HTTP_PORT=0") == 1
    instance = {"BACKFILL_FROM": "2026-03-01T00:00:00Z", "BACKFILL_TO": "2026-03-08T00:00:00Z"}
    command = [
        instance.get(word.removeprefix("${").removesuffix("}"), word)
        for word in _exec_start(BACKFILL)
    ]
    args = build_parser().parse_args(command[1:])
    assert args.command == "backfill"
    assert (args.start.isoformat(), args.end.isoformat()) == (
        "2026-03-01T00:00:00+00:00",
        "2026-03-08T00:00:00+00:00",
    )


def test_env_example_names_only_variables_the_settings_read():
    names = set(env_file(ENV_EXAMPLE)) | commented_variables(ENV_EXAMPLE)
    assert names - setting_variables() == set()
    assert f"{PREFIX}SECRET" not in names
    assert f"{PREFIX}SECRET_FILE" not in names  # the units set it to the credential


def test_env_example_with_the_credential_loads_as_valid_settings(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s" * 43 + "\n", encoding="utf-8")
    secret.chmod(0o600)
    environ = env_file(ENV_EXAMPLE) | {f"{PREFIX}SECRET_FILE": str(secret)}
    settings = load_settings(environ)
    assert settings.http_port == DEFAULT_HTTP_PORT
    assert settings.merchant().history_from is not None
    assert settings.warnings == ()
