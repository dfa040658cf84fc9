"""``recordsync demo`` works every time: run twice, after Ctrl-C, after kill -9, and the
commands it prints at its end work as printed.  The real CLI in a subprocess, in a
folder of its own, as a newcomer runs it."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.leftovers import STARTED

DEADLINE = 90.0
SMALL = ("--history-days", "1", "--rounds-per-day", "300")
# Long enough to be interrupted in the middle: about 15 pages at 2 requests a second.
LONGER = ("--history-days", "3", "--rounds-per-day", "5000")


def _env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("RECORDSYNC_")}


def _demo(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _recordsync(folder, ["demo", *args])


def _demo_equals_the_truth(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A demo that ended well: exit 0, no traceback, the warehouse equal to the truth."""
    done = _demo(folder, *args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    _clean(done)
    assert "equals the simulator's truth" in " ".join(done.stdout.split())
    return done


def _recordsync(folder: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own interpreter, our or the demo's arguments
        [sys.executable, "-m", "recordsync", *args],
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


def _start_demo(folder: Path, *args: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-m", "recordsync", "demo", *args],
        cwd=folder,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    STARTED.append(process)
    return process


def _read_until(process: subprocess.Popen[str], needle: str) -> str:
    assert process.stdout is not None
    seen = ""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen += line
        if needle in line:
            return seen
    process.kill()
    pytest.fail(f"{needle!r} never came: {seen[-2000:]}")


def _wait_for_rows(database: Path) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if database.exists():
            reader = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
            # No table yet, or busy: look again.
            with contextlib.closing(reader), contextlib.suppress(sqlite3.OperationalError):
                if reader.execute("SELECT COUNT(*) FROM records").fetchone()[0]:
                    return
        time.sleep(0.05)
    pytest.fail("the demo stored no row")


def _printed_commands(out: str) -> list[list[str]]:
    """The recordsync command lines the demo printed, as argument lists."""
    commands = []
    for line in out.splitlines():
        text = line.strip()
        if text.startswith("recordsync --config"):
            text = text.split("   (", 1)[0]  # the verify line's note
            commands.append(shlex.split(text)[1:])
    return commands


def _clean(done: subprocess.CompletedProcess[str] | tuple[str, str]) -> None:
    out, err = (done.stdout, done.stderr) if not isinstance(done, tuple) else done
    assert "Traceback" not in out + err, (out + err)[-3000:]


@pytest.mark.slow
def test_the_demo_twice_in_one_folder_starts_afresh_and_its_commands_work(tmp_path):
    first = _demo_equals_the_truth(tmp_path, *SMALL)
    assert "a fresh demo warehouse" in first.stdout
    second = _demo_equals_the_truth(tmp_path, *SMALL)
    out = " ".join(second.stdout.split())
    assert "a previous demo's warehouse (recordsync-demo.db) was replaced" in out
    commands = _printed_commands(second.stdout)
    assert [args[2] for args in commands] == ["status", "report", "verify"]
    for args in commands[:2]:  # verify needs the simulator: the --serve test runs it
        done = _recordsync(tmp_path, args)
        assert done.returncode == 0, done.stderr
        _clean(done)
        assert "demo-merchant" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_a_demo_stopped_half_way_is_followed_by_one_that_works(tmp_path, how):
    process = _start_demo(tmp_path, *LONGER)
    _read_until(process, "simulator:")
    _wait_for_rows(tmp_path / "recordsync-demo.db")  # stopped in the middle of its sync
    if how == "ctrl-c":
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=DEADLINE)
        assert process.returncode == 130
        _clean((out, err))
        assert err.strip().splitlines()[-1] == (
            "recordsync: interrupted by SIGINT: the demo stopped before it caught up; run it "
            "again (it starts afresh)"
        )
    else:
        process.kill()
        process.communicate(timeout=DEADLINE)
    again = _demo_equals_the_truth(tmp_path, *SMALL)
    assert "was replaced" in " ".join(again.stdout.split())


@pytest.mark.slow
def test_a_second_demo_in_the_folder_of_a_running_one_is_refused_and_deletes_nothing(tmp_path):
    first = _start_demo(tmp_path, *LONGER)
    _read_until(first, "simulator:")
    _wait_for_rows(tmp_path / "recordsync-demo.db")
    second = _demo(tmp_path, *SMALL)
    assert second.returncode == 2
    _clean(second)
    assert second.stderr.strip() == (
        "recordsync: configuration: --database: recordsync-demo.db is in use by another "
        "process (a demo or a daemon): stop it first, or choose another --database"
    )
    _wait_for_rows(tmp_path / "recordsync-demo.db")  # the first one's warehouse is still there
    first.send_signal(signal.SIGINT)
    out, err = first.communicate(timeout=DEADLINE)
    assert first.returncode == 130
    _clean((out, err))


@pytest.mark.slow
def test_the_demo_serving_answers_the_verify_it_prints(tmp_path):
    process = _start_demo(tmp_path, *SMALL, "--serve")
    try:
        out = _read_until(process, "keeps serving")
        verify = [args for args in _printed_commands(out) if "verify" in args]
        assert len(verify) == 1
        done = _recordsync(tmp_path, verify[0])
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        _clean(done)
        assert "complete and exact" in done.stdout
    finally:
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=DEADLINE)
    assert process.returncode == 0
    _clean((rest, err))
