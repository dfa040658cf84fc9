"""Helpers of the fleet's end-to-end tests: replicas as real processes, who holds what, and
the warehouse against the simulator's truth."""

from __future__ import annotations

import json
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path

from recordsync.sim import Simulator
from recordsync.warehouse import Warehouse
from support.synccheck import differences, start_daemon


def write_config(
    sim: Simulator, url: str, path: Path, *extra: str, only: list[str] | None = None
) -> Path:
    """Every merchant of ``sim`` (or those in ``only``) on ``url``, a fast poll; ``extra``
    TOML lines on top."""
    history_from = sim.now() - timedelta(days=sim.config.history_days + 1)
    lines = [
        f'base_url = "{sim.base_url}"',
        f'database_url = "{url}"',
        f'history_from = "{history_from.isoformat()}"',
        "http_port = 0",
        "page_size = 100",
        "poll_interval = 0.2",
        "snapshot_concurrency = 2",
        "drift_check_interval = 0",
        "http_timeout = 5",
        'log_format = "json"',
        *extra,
    ]
    for profile in sim.config.profiles:
        if only is not None and profile.merchant_id not in only:
            continue
        lines += ["[[merchants]]", f'merchant_id = "{profile.merchant_id}"']
        lines += [f'secret = "{profile.secret}"']
    path.write_text("\n".join(lines) + "\n")
    return path


class Replica:
    def __init__(self, config: Path, log: Path) -> None:
        self.log = log
        self.process = start_daemon({}, log, "--config", str(config), "run")
        self.killed_at: float | None = None

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.killed_at = time.time()

    def intervals(self) -> list[tuple[str, float, float]]:
        """(merchant, start, end) of every stretch this process synced a merchant."""
        opened: dict[str, float] = {}
        spans: list[tuple[str, float, float]] = []
        for line in self.log.read_text().splitlines():
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            merchant = event.get("merchant_id")
            at = datetime.fromisoformat(event["timestamp"]).timestamp()
            if event["event"] == "merchant_sync_started" and merchant:
                opened[merchant] = at
            elif event["event"] == "merchant_sync_stopped" and merchant in opened:
                spans.append((merchant, opened.pop(merchant), at))
        end = self.killed_at if self.killed_at is not None else float("inf")
        spans += [(merchant, start, end) for merchant, start in opened.items()]
        return spans


def holders(warehouse: Warehouse) -> dict[str, str]:
    session = warehouse.fleet_session("test-observer")
    try:
        return session.holders()
    finally:
        session.close()


def wait_until_all_held(warehouse: Warehouse, merchants: list[str], timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if set(holders(warehouse)) >= set(merchants):
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"not every merchant held within {timeout} s: {holders(warehouse)}")


def wait_until_balanced(warehouse: Warehouse, merchants: list[str], live: int, timeout: float):
    started = time.monotonic()
    low, high = len(merchants) // live, -(-len(merchants) // live)
    counts: list[int] = []
    while time.monotonic() - started < timeout:
        held = holders(warehouse)
        counts = sorted(list(held.values()).count(r) for r in set(held.values()))
        counts = [0] * (live - len(counts)) + counts
        if (
            set(held) >= set(merchants)
            and len(counts) == live
            and low <= counts[0] <= counts[-1] <= high
        ):
            return time.monotonic() - started, counts
        time.sleep(0.25)
    raise AssertionError(f"not balanced within {timeout} s: {counts}")


def assert_truth(warehouse: Warehouse, sim: Simulator, merchants: list[str]) -> None:
    """Every merchant equals the simulator's truth (waiting up to two minutes for the tails)."""
    deadline = time.monotonic() + 120
    problems = {merchant: ["not checked"] for merchant in merchants}
    while time.monotonic() < deadline:
        problems = {
            merchant: found
            for merchant in problems
            if (found := differences(warehouse, merchant, sim.truth(merchant)))
        }
        if not problems:
            return
        time.sleep(0.5)
    assert problems == {}, {m: p[:3] for m, p in problems.items()}


def events(log: Path) -> list[dict[str, object]]:
    """The JSON lines a replica logged."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
