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


def field_warnings(ctx, pages: list[list]) -> list[dict]:
    with capture_logs() as logs:
        for page in pages:
            ctx.after_commit("snapshot", page, [], "req-1")
    return [entry for entry in logs if entry["event"] == "record_field_unknown"]


def test_a_new_record_member_is_warned_of_once_naming_it_and_an_example_record() -> None:
    ctx = make_context(FakePlatform(), FakeStore())
    drifted = [
        make_record("r1"),
        make_record("r2", extra_fields='{"tax":"1.50","channel":"web"}'),
        make_record("r3", extra_fields='{"tax":2}'),
    ]
    warnings = field_warnings(
        ctx, [drifted, drifted, [make_record("r4", extra_fields='{"tax":1}')]]
    )
    assert [(w["field"], w["record_id"], w["rows"]) for w in warnings] == [
        ("tax", "r2", 2),
        ("channel", "r2", 1),
    ]
    assert all(w["merchant_id"] == ctx.options.merchant_id for w in warnings)


def test_pages_without_unknown_members_say_nothing_of_fields() -> None:
    ctx = make_context(FakePlatform(), FakeStore())
    assert field_warnings(ctx, [[make_record("r1"), make_record("r2")]]) == []
