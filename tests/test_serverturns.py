"""The suite's workers take turns at the database servers (tests/serverturns.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from serverturns import RUN_ID_ENV, servers_turn


def test_a_restart_waits_for_running_tests_and_holds_back_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RUN_ID_ENV, "turns")
    order: list[str] = []
    running = threading.Event()
    finish_running = threading.Event()

    def running_test() -> None:
        with servers_turn(exclusive=False, lock_dir=tmp_path):
            order.append("running test")
            running.set()
            finish_running.wait(5)

    def restart() -> None:
        with servers_turn(exclusive=True, lock_dir=tmp_path):
            order.append("restart")

    def later_test() -> None:
        with servers_turn(exclusive=False, lock_dir=tmp_path):
            order.append("later test")

    first = threading.Thread(target=running_test)
    first.start()
    assert running.wait(5)
    restarting = threading.Thread(target=restart)
    restarting.start()
    restarting.join(0.3)
    assert restarting.is_alive(), "the restart must wait for the test in progress"
    later = threading.Thread(target=later_test)
    later.start()
    later.join(0.3)
    assert later.is_alive(), "a test starting while a restart waits must wait for it"
    finish_running.set()
    for thread in (first, restarting, later):
        thread.join(5)
    assert order == ["running test", "restart", "later test"]


def test_one_process_running_the_tests_in_turn_takes_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    with (
        servers_turn(exclusive=False, lock_dir=tmp_path),
        servers_turn(exclusive=True, lock_dir=tmp_path),
    ):
        pass
    assert list(tmp_path.iterdir()) == []
