"""What a committed page says aloud: unknown statuses are counted and logged, never dropped."""

from __future__ import annotations

from structlog.testing import capture_logs
from support.fakes import FakePlatform, FakeStore, make_context
from support.warehouse_samples import make_record


def warnings_after(statuses: list[str]) -> list[dict]:
    ctx = make_context(FakePlatform(), FakeStore())
    page = [make_record(f"r{n}", status=status) for n, status in enumerate(statuses)]
    with capture_logs() as logs:
        ctx.after_commit("snapshot", page, [], "req-1")
    return [entry for entry in logs if entry["event"] == "unknown_record_status"]


def test_unknown_statuses_are_counted_by_status() -> None:
    (warning,) = warnings_after(["OPEN", "PAUSED", "SETTLED", "PAUSED", "REVIEW", "VOID"])
    assert warning["statuses"] == {"PAUSED": 2, "REVIEW": 1}
    assert warning["action"] == "stored as received"
    assert warning["request_id"] == "req-1"


def test_known_statuses_say_nothing() -> None:
    assert warnings_after(["OPEN", "SETTLED", "VOID", "OPEN"]) == []
