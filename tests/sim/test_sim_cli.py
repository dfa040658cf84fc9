"""The simulator CLI as a real subprocess: prints its URL, serves, exits 0 on SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from recordsync.platform.signing import format_timestamp, sign
from recordsync.sim import DEMO_MERCHANT_ID, DEMO_SECRET
from recordsync.sim.cli import EXIT_CONFIGURATION, main
from recordsync.sim.config import derived_secret

CHANGES = "/v1/record-changes?from_now=true"


def read_line(process: subprocess.Popen[str], prefix: str, deadline: float) -> str:
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line.strip()[len(prefix) :]
    raise AssertionError(f"no {prefix!r} line before the deadline")


def signed_get(base_url: str, target: str, secret: str, merchant: str) -> httpx.Response:
    stamp = format_timestamp(time.time())
    signature = sign(secret, timestamp=stamp, method="GET", target=target)
    headers = {"X-Merchant-Id": merchant, "X-Timestamp": stamp, "X-Signature": signature}
    return httpx.get(base_url + target, headers=headers, timeout=10)


@contextlib.contextmanager
def serving(*options: str) -> Iterator[subprocess.Popen[str]]:
    """``python -m recordsync.sim --port 0 OPTIONS`` as a subprocess, killed if still running."""
    args = [sys.executable, "-m", "recordsync.sim", "--port", "0", *options]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(  # noqa: S603 -- our own module, fixed arguments
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as process:
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.parametrize("secret_file", [False, True], ids=["demo-secret", "secret-file"])
def test_the_cli_prints_its_url_serves_and_exits_0_on_sigterm(tmp_path, secret_file):
    args = ["--history-days", "0.5", "--rounds-per-day", "200", "--live-rate", "20", "--seed", "3"]
    secret, merchant = DEMO_SECRET, DEMO_MERCHANT_ID
    if secret_file:
        secret, merchant = "file-secret-" + "f" * 31, "m-file"
        path = tmp_path / "secret"
        path.write_text(secret + "\n", encoding="utf-8")
        args += ["--secret-file", str(path), "--merchant-id", merchant]
    with serving(*args) as process:
        deadline = time.monotonic() + 30
        base_url = read_line(process, "base_url=", deadline)
        assert read_line(process, "merchant_id=", deadline) == merchant
        # The public demo secret is printed; an operator's own never is.
        printed = read_line(process, "secret=", deadline)
        assert printed == (DEMO_SECRET if not secret_file else "(as given)")
        assert base_url.startswith("http://127.0.0.1:")

        response = signed_get(base_url, "/v1/record-changes?from_now=true", secret, merchant)
        assert response.status_code == 200
        assert response.json()["data"]["next_cursor"]

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        rest, errors = process.communicate(timeout=5)
        assert secret not in errors
        if secret_file:
            assert secret not in rest


def test_the_cli_serves_several_merchants_and_prints_each_id_and_secret():
    args = ["--merchants", "3", "--history-days", "0.5", "--rounds-per-day", "200", "--seed", "5"]
    with serving(*args) as process:
        deadline = time.monotonic() + 30
        base_url = read_line(process, "base_url=", deadline)
        lines = ["merchant_id=" + read_line(process, "merchant_id=", deadline) for _ in range(3)]
        printed = [dict(pair.split("=", 1) for pair in line.split()) for line in lines]

        ids = [f"{DEMO_MERCHANT_ID}-{number}" for number in (1, 2, 3)]
        assert [item["merchant_id"] for item in printed] == ids
        assert [item["secret"] for item in printed] == [derived_secret(5, id_) for id_ in ids]
        assert all(int(item["records"]) > 0 for item in printed)
        for item in printed:
            response = signed_get(base_url, CHANGES, item["secret"], item["merchant_id"])
            assert response.status_code == 200
        crossed = signed_get(base_url, CHANGES, printed[0]["secret"], printed[1]["merchant_id"])
        assert crossed.status_code == 401

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--merchants", "0"], "--merchants must be >= 1"),
        (["--merchants", "2", "--secret", "s" * 43], "--secret and --secret-file are for one"),
    ],
    ids=["no-merchants", "a-secret-for-several-merchants"],
)
def test_bad_merchant_options_are_configuration_errors(capsys, extra, message):
    assert main([*extra, "--port", "0"]) == EXIT_CONFIGURATION
    errors = capsys.readouterr().err
    assert message in errors
    assert "s" * 43 not in errors


def test_a_bad_fault_rate_is_a_configuration_error(capsys):
    assert main(["--fault-503", "1.5", "--port", "0"]) == EXIT_CONFIGURATION
    assert "projection_lag" in capsys.readouterr().err


def test_an_unreadable_secret_file_is_a_configuration_error(tmp_path, capsys):
    code = main(["--secret-file", str(tmp_path / "missing"), "--port", "0"])
    assert code == EXIT_CONFIGURATION
    assert "--secret-file" in capsys.readouterr().err


def test_connections_to_a_paused_simulator_wait_in_the_kernel_queue():
    """200 connections opened while the simulator is paused (SIGSTOP) each complete their
    handshake within 0.5 s, and it answers once resumed.  With socketserver's queue of 5 the
    seventh was dropped and its client tried again only after 1 s: a slow answer no platform
    gives, which a test of the daemon's timing would then blame on the daemon."""
    with serving("--history-days", "0.1", "--rounds-per-day", "50", "--seed", "7") as process:
        base_url = read_line(process, "base_url=", time.monotonic() + 30)
        port = int(base_url.rsplit(":", 1)[1])
        opened = []
        process.send_signal(signal.SIGSTOP)
        try:
            opened.extend(
                socket.create_connection(("127.0.0.1", port), timeout=0.5) for _ in range(200)
            )
        finally:
            process.send_signal(signal.SIGCONT)
            for sock in opened:
                sock.close()
        response = signed_get(base_url, CHANGES, DEMO_SECRET, DEMO_MERCHANT_ID)
        assert response.status_code == 200
