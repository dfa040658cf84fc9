"""Replicas started in the same instant on an empty warehouse (a new Deployment with
``replicas: 5``) and a one-shot command beside them (a ``recordsync migrate`` Job, an
operator's ``backfill`` or ``verify``) all come up: one upgrades the schema under its lock,
the others wait for it and find it current.  Before the lock, one or two of five
exited 1 with a traceback in every run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.dbfixtures import SERVER_PARAMS, fresh_database
from support.fleettiming import QUICK
from support.synccheck import environment_for

from recordsync.sim import SimConfig, Simulator, running_simulator

pytestmark = pytest.mark.slow

# Each command once per backend in the suite (the suite stays under 10 minutes); the issue-30
# proof ran 10 rounds a backend: RECORDSYNC_START_TOGETHER_ROUNDS=10 runs it again.
ROUNDS = int(os.environ.get("RECORDSYNC_START_TOGETHER_ROUNDS", "3"))
REPLICAS = 5
# Beside them, one command started in the same instant, in turn: each must end as it would
# alone (verify exits 1 for what an empty warehouse lacks: a finding, not a failure).
ONE_SHOTS = ("migrate", "backfill", "verify")
# The replicas' and the command's tick and lease (``fleettiming``): a command that handed its
# work to the replicas takes it back a lease and a tick after they stopped.
TIMING = QUICK
ONE_SHOT_CODES = {"migrate": {0}, "backfill": {0}, "verify": {0, 1}}


def started(log: Path) -> bool:
    return log.exists() and '"daemon_started"' in log.read_text()


@pytest.mark.parametrize("kind", SERVER_PARAMS)
def test_replicas_and_a_command_started_together_on_an_empty_warehouse_all_come_up(kind, tmp_path):
    config = SimConfig(history_days=0.01, rounds_per_day=200, record_requests=50)
    failures: list[str] = []
    with running_simulator(config) as sim:
        for round_ in range(ROUNDS):
            folder = tmp_path / f"round-{round_}"
            folder.mkdir()
            with fresh_database(kind, folder) as url:
                one_shot = ONE_SHOTS[round_ % len(ONE_SHOTS)]
                env = environment_for(sim, url, **TIMING.env())
                problem = start_together(env, folder, one_shot, sim)
            if problem is not None:
                failures.append(f"round {round_}: {problem}")
    assert failures == []


def start_together(env: dict[str, str], folder: Path, one_shot: str, sim: Simulator) -> str | None:
    """Start the replicas and the command at once, stop the replicas once all have started;
    what went wrong, or None."""
    logs = [folder / f"replica-{n}.log" for n in range(REPLICAS)]
    outputs = [*logs, folder / f"{one_shot}.log"]
    span = ["--from", env["RECORDSYNC_HISTORY_FROM"], "--to", sim.now().isoformat()]
    command = [one_shot] if one_shot == "migrate" else [one_shot, *span]
    commands = [["run"]] * REPLICAS + [command]
    sinks = [path.open("wb") for path in outputs]
    processes = [
        subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "recordsync", *command],
            env={**env, "PATH": "/usr/bin:/bin"},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        for command, sink in zip(commands, sinks, strict=True)
    ]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(map(started, logs)):
            ended = [process.poll() for process in processes]
            if any(code not in {None, 0} for code in ended[:REPLICAS]) or ended[-1] not in {
                None,
                *ONE_SHOT_CODES[one_shot],
            }:
                break  # something exited as it should not have: stop waiting
            time.sleep(0.1)
        everyone_started = all(map(started, logs))
        for process in processes[:REPLICAS]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes = [process.wait(timeout=30) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for sink in sinks:
            sink.close()
    texts = [path.read_text() for path in outputs]
    expected = codes[:REPLICAS] == [0] * REPLICAS and codes[-1] in ONE_SHOT_CODES[one_shot]
    if not expected or any("Traceback" in text for text in texts):
        return f"exit codes {codes}: {_first(texts)}"
    return None if everyone_started else "a replica never started"


def _first(outputs: list[str]) -> str:
    """The first problem a process printed: its last lines."""
    for output in outputs:
        lines = [line for line in output.splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line.lower() or "Trace" in line]
        if errors:
            return errors[-1][:500]
    return json.dumps([output[-300:] for output in outputs])
