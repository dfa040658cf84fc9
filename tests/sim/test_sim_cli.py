"""The simulator CLI as a real subprocess: prints its URL, serves, exits 0 on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from recordsync.platform.signing import format_timestamp, sign
from recordsync.sim import DEMO_MERCHANT_ID, DEMO_SECRET
from recordsync.sim.cli import EXIT_CONFIGURATION, main


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


@pytest.mark.parametrize("secret_file", [False, True], ids=["demo-secret", "secret-file"])
def test_the_cli_prints_its_url_serves_and_exits_0_on_sigterm(tmp_path, secret_file):
    args = [
        sys.executable,
        "-m",
        "recordsync.sim",
        "--port",
        "0",
        "--history-days",
        "0.5",
        "--rounds-per-day",
        "200",
        "--live-rate",
        "20",
        "--seed",
        "3",
    ]
    secret, merchant = DEMO_SECRET, DEMO_MERCHANT_ID
    if secret_file:
        secret, merchant = "file-secret-" + "f" * 31, "m-file"
        path = tmp_path / "secret"
        path.write_text(secret + "\n", encoding="utf-8")
        args += ["--secret-file", str(path), "--merchant-id", merchant]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(  # noqa: S603 -- our own module, fixed arguments
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 30
        base_url = read_line(process, "base_url=", deadline)
        assert read_line(process, "merchant_id=", deadline) == merchant
        assert base_url.startswith("http://127.0.0.1:")

        response = signed_get(base_url, "/v1/record-changes?from_now=true", secret, merchant)
        assert response.status_code == 200
        assert response.json()["data"]["next_cursor"]

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        _, errors = process.communicate(timeout=5)
        assert secret not in errors
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_bad_fault_rate_is_a_configuration_error(capsys):
    assert main(["--fault-503", "1.5", "--port", "0"]) == EXIT_CONFIGURATION
    assert "projection_lag" in capsys.readouterr().err


def test_an_unreadable_secret_file_is_a_configuration_error(tmp_path, capsys):
    code = main(["--secret-file", str(tmp_path / "missing"), "--port", "0"])
    assert code == EXIT_CONFIGURATION
    assert "--secret-file" in capsys.readouterr().err
