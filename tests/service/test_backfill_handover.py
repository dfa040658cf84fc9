"""``recordsync backfill`` of a merchant a daemon holds: handed to the holder, and taken back
by the command when the merchant is left with no holder at all (a wait on nobody
was a hang).  The holder here is a fleet session of this test that holds the merchant's lock
and, for the second case, marks the request running as a holder does before it stops."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from structlog.testing import capture_logs
from support.synccheck import assert_equals_truth, settings_for

from recordsync.core.state import backfill_job
from recordsync.core.times import floor_ms
from recordsync.service.commands.backfill import run_backfill
from recordsync.sim import SimConfig, Simulator
from recordsync.warehouse import RequestState, Warehouse

MERCHANT = "m-backfill"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(
        SimConfig(
            merchant_id=MERCHANT,
            secret="backfill-secret-0123456789abcdefghijklmnopq",
            seed=17,
            history_days=1.0,
            rounds_per_day=300,
            record_requests=50,
        )
    )
    simulator.start()
    try:
        yield simulator
    finally:
        simulator.stop()


@pytest.mark.parametrize("started", [False, True], ids=["before-taking-it", "in-the-middle"])
def test_a_backfill_whose_holder_goes_away_is_finished_by_the_command(sim, tmp_path, started):
    url = f"sqlite:///{tmp_path / 'handover.db'}"
    store = Warehouse.connect(url)
    store.migrate()
    end = floor_ms(sim.now())
    start = end - timedelta(days=1, hours=1)
    holder = store.fleet_session("a-holder-about-to-stop")
    outcome: dict[str, object] = {}

    def backfill() -> None:
        outcome["code"] = run_backfill(settings_for(sim, url), start, end)

    try:
        assert holder.try_hold(MERCHANT) is not None
        with capture_logs() as logs:
            command = threading.Thread(target=backfill, daemon=True)
            command.start()
            deadline = time.monotonic() + 30
            while not any(entry["event"] == "backfill_handed_over" for entry in logs):
                assert time.monotonic() < deadline, logs
                time.sleep(0.05)
            if started:
                store.requests.start(1, "a-holder-about-to-stop")
            time.sleep(1.5)  # the command follows a holder that is there: it takes nothing
            assert not any(entry["event"] == "backfill_taken_back" for entry in logs)
            holder.close()
            command.join(timeout=60)
        assert not command.is_alive()
        assert outcome["code"] == 0
        names = [entry["event"] for entry in logs]
        assert "backfill_taken_back" in names
        assert "backfill_finished" in names
        request = store.requests.get(1)
        assert request is not None
        assert request.state is RequestState.DONE
        assert store.requests.unfinished((MERCHANT,)) == []
        windows = store.state.load_windows(MERCHANT, backfill_job(start, end))
        assert windows
        assert all(window.done for window in windows)
        assert_equals_truth(store, MERCHANT, sim.truth())  # the range covers the history
    finally:
        holder.close()
        store.close()


def test_a_backfill_for_a_person_ends_with_one_plain_line(sim, tmp_path, capsys):
    """With a console log the last line says what was done, plain; with a JSON log on stdout
    the backfill_finished event is the last line (a log shipper reads only JSON)."""
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    end = floor_ms(sim.now())
    start = end - timedelta(hours=6)
    assert run_backfill(settings_for(sim, url, log_format="console"), start, end) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"merchant {MERCHANT}: backfill of [{start.isoformat()}, ")
    assert " done here: " in last
    assert last.endswith(" windows")
    assert run_backfill(settings_for(sim, url, log_format="json"), start, end) == 0
    assert " done here: " not in capsys.readouterr().out
