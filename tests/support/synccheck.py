"""Helpers shared by the end-to-end sync tests: settings for a simulator, and the one
comparison that matters: the warehouse equals the platform's truth, field by field."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy.exc import ProgrammingError

from recordsync.core.errors import WarehouseUnavailableError
from recordsync.core.models import Record
from recordsync.core.secret import Secret, SecretSource
from recordsync.core.settings import MerchantSettings, Settings
from recordsync.core.state import Window
from recordsync.platform.parsing import parse_record, usual_records_page
from recordsync.sim import SimConfig, Simulator
from recordsync.sync.events import SyncObserver
from recordsync.warehouse import Warehouse
from support.leftovers import STARTED
from support.summarycheck import summary_differences

RECORD_FIELDS = list(Record.__struct_fields__)


def settings_for(sim: Simulator, database_url: str, **overrides: Any) -> Settings:
    """Settings pointing at ``sim``, with the history start read off the simulator's clock."""
    merchant = MerchantSettings(
        merchant_id=sim.config.merchant_id,
        secret=SecretSource.given(Secret(sim.config.secret)),
        base_url=sim.base_url,
        history_from=sim.now() - timedelta(days=sim.config.history_days + 1),
    )
    values: dict[str, Any] = {
        "merchants": (merchant,),
        "database_url": database_url,
        "http_port": 0,
        "page_size": 200,
        "poll_interval": 0.2,
        "snapshot_concurrency": 3,
        "http_timeout": 5.0,
    }
    values.update(overrides)
    return Settings(**values)


def environment_for(sim: Simulator, database_url: str, **overrides: str) -> dict[str, str]:
    """The same, as the RECORDSYNC_* environment of a subprocess."""
    history_from = settings_for(sim, database_url).merchant().history_from
    assert history_from is not None
    env = {
        "RECORDSYNC_BASE_URL": sim.base_url,
        "RECORDSYNC_MERCHANT_ID": sim.config.merchant_id,
        "RECORDSYNC_SECRET": sim.config.secret,
        "RECORDSYNC_DATABASE_URL": database_url,
        "RECORDSYNC_HISTORY_FROM": history_from.isoformat(),
        "RECORDSYNC_HTTP_PORT": "0",
        "RECORDSYNC_PAGE_SIZE": "200",
        "RECORDSYNC_POLL_INTERVAL": "0.2",
        "RECORDSYNC_SNAPSHOT_CONCURRENCY": "3",
        "RECORDSYNC_HTTP_TIMEOUT": "5",
        "RECORDSYNC_LOG_FORMAT": "json",
    }
    env.update(overrides)
    return env


def differences(
    warehouse: Warehouse, merchant_id: str, truth: Mapping[str, dict[str, Any] | str]
) -> list[str]:
    """Every way the warehouse differs from the truth (empty when equal), readable in a
    failure: its rows against the platform's, and its daily summaries against a fresh
    aggregation of its rows (``summarycheck``).  ``truth``: the simulator's records as
    objects (``truth()``), or as the text sent (``truth_text()``), whose added members keep
    every digit and so are compared with ``extra_fields`` too."""
    problems = _row_differences(warehouse, merchant_id, truth)
    return problems + summary_differences(warehouse, merchant_id)


def _expected(raw: dict[str, Any] | str) -> Record:
    if isinstance(raw, dict):
        return parse_record(raw)
    body = (
        f'{{"data":{{"items":[{raw}],"has_more":false,"next_cursor":null,'
        f'"snapshot_watermark":"w"}},"request_id":"truth"}}'
    ).encode()
    page = usual_records_page(body)
    assert page is not None, f"the simulator's record is not a usual one: {raw[:200]}"
    return page.records[0]


def _comparable(name: str, value: Any) -> Any:
    """``extra_fields`` as the JSON it holds, every number exact: PostgreSQL's ``jsonb`` keeps
    the members' values but not their order or spacing."""
    if name != "extra_fields" or value is None:
        return value
    return json.loads(value, parse_float=Decimal)


def _row_differences(
    warehouse: Warehouse, merchant_id: str, truth: Mapping[str, dict[str, Any] | str]
) -> list[str]:
    rows = warehouse.records.fetch_records(merchant_id)
    problems = [f"missing {record_id}" for record_id in truth.keys() - rows.keys()]
    problems += [f"extra {record_id}" for record_id in rows.keys() - truth.keys()]
    for record_id in truth.keys() & rows.keys():
        expected = _expected(truth[record_id])
        row = rows[record_id]
        for name in RECORD_FIELDS:
            if _comparable(name, getattr(expected, name)) != _comparable(name, row[name]):
                problems.append(
                    f"{record_id}.{name}: warehouse {row[name]!r} != platform "
                    f"{getattr(expected, name)!r}"
                )
    return sorted(problems)


def assert_equals_truth(
    warehouse: Warehouse, merchant_id: str, truth: Mapping[str, dict[str, Any] | str]
) -> None:
    problems = differences(warehouse, merchant_id, truth)
    assert not problems, f"{len(problems)} differences, first: {problems[:10]}"


def start_daemon(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``recordsync ARGS`` (``run`` by default), its output in ``log``; killed at the end of
    the test if it still runs then (``leftovers``)."""
    with log.open("ab") as sink:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "recordsync", *(args or ("run",))],
            env={**os.environ, **env},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    STARTED.append(process)
    return process


def wait_for_log(log: Path, needle: str, timeout: float = 30.0) -> None:
    """Wait until ``needle`` appears in a daemon's log file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and needle in log.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} never appeared in {log}")


def wait_for_truth(sim: Simulator, url: str, timeout: float) -> list[str]:
    warehouse = Warehouse.connect(url)
    try:
        deadline = time.monotonic() + timeout
        problems = ["not checked yet"]
        while time.monotonic() < deadline:
            try:
                problems = differences(warehouse, sim.config.merchant_id, sim.truth_text())
            except WarehouseUnavailableError as exc:  # restarting
                problems = [str(exc)]
            except ProgrammingError as exc:  # the daemon has not migrated yet (a slow start)
                problems = [f"not migrated yet: {exc.orig}"]
            if not problems:
                return []
            time.sleep(0.5)
        return problems
    finally:
        warehouse.close()


def stop_gracefully(process: subprocess.Popen[bytes]) -> tuple[int, float]:
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=15)
    return code, time.monotonic() - started


class KillAfterSplit(SyncObserver):
    """Raises out of a page's commit hook (ending the run as a kill -9 would: nothing after
    it runs) once windows were re-planned by a split and ``pages`` pages were committed."""

    def __init__(self, pages: int) -> None:
        self.total: int | None = None  # windows planned, as last reported
        self.splits = 0  # reports of more windows than before
        self.pages = 0
        self.kill_at = pages

    def windows_planned(self, job: str, total: int, done: int) -> None:
        if self.total is not None and total > self.total:
            self.splits += 1
        self.total = total

    def window_page(self, job: str, window: Window, records: int, *, done: bool) -> None:
        self.pages += 1
        if self.splits and self.pages >= self.kill_at:
            raise RuntimeError("kill -9")


@contextlib.contextmanager
def running(config: SimConfig) -> Iterator[Simulator]:
    """A simulator on loopback for the block."""
    simulator = Simulator(config)
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()
