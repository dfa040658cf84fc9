"""deploy/Dockerfile: hadolint passes; the image runs what the CLI and the settings expect."""

from __future__ import annotations

import fnmatch
import json
import re

from support.deployfiles import DEPLOY, DOCKERFILE, ROOT, run_tool, setting_variables, tool

from recordsync.cli import build_parser
from recordsync.core.settings import DEFAULT_HTTP_PORT

DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"


def _instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    result = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def _only(keyword: str) -> str:
    (value,) = [rest for key, rest in _instructions() if key == keyword]
    return value


def test_dockerfile_passes_hadolint():
    result = run_tool(tool("hadolint"), "--no-color", DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_is_multi_stage_and_installs_only_the_built_wheels():
    stages = [rest for key, rest in _instructions() if key == "FROM"]
    assert len(stages) == 2
    assert stages[0].endswith(" AS build")
    runs = [rest for key, rest in _instructions() if key == "RUN"]
    assert any("pip wheel" in run and "--wheel-dir /wheels" in run for run in runs)
    (install,) = [run for run in runs if "pip install" in run]
    assert "from=build" in install
    assert "--no-index" in install
    base = _only("ARG").partition("=")[2]
    assert re.fullmatch(r"python:3\.1[1-9]-slim-\w+", base), base


def test_image_runs_recordsync_run_as_a_non_root_user():
    user = _only("USER")
    uid, _, gid = user.partition(":")
    assert int(uid) != 0
    assert int(gid) != 0
    entrypoint = json.loads(_only("ENTRYPOINT"))
    command = json.loads(_only("CMD"))
    assert entrypoint == ["recordsync"]
    assert build_parser().parse_args(command).command == "run"


def test_healthcheck_runs_status_check_which_the_cli_accepts():
    healthcheck = _only("HEALTHCHECK")
    _, _, exec_form = healthcheck.partition("CMD ")
    command = json.loads(exec_form)
    assert command == ["recordsync", "status", "--check"]
    args = build_parser().parse_args(command[1:])
    assert args.command == "status"


def test_image_environment_names_settings_and_exposes_the_metrics_port():
    env = _only("ENV")
    names = set(re.findall(r"(RECORDSYNC_\w+)=", env))
    assert names
    assert names - setting_variables() == set()
    assert f"RECORDSYNC_HTTP_PORT={DEFAULT_HTTP_PORT}" in env
    assert _only("EXPOSE") == str(DEFAULT_HTTP_PORT)


def test_build_context_keeps_what_the_copies_need():
    """deploy/Dockerfile.dockerignore (BuildKit reads it for this Dockerfile) lets sources in."""
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        verdict = False
        for pattern in patterns:
            negated = pattern.startswith("!")
            body = pattern.removeprefix("!").rstrip("/")
            if fnmatch.fnmatch(path, body) or path.startswith(body + "/"):
                verdict = not negated
        return verdict

    copied = [
        rest.split()[0] for key, rest in _instructions() if key == "COPY" and "--from" not in rest
    ]
    assert copied
    for source in copied:
        assert (ROOT / source).exists(), source
        assert not ignored(source), source
    assert not ignored("recordsync/cli.py")
    assert not ignored("migrations/env.py")
    assert ignored(".venv/bin/python")
    assert ignored("tests/conftest.py")
