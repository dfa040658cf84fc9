"""The change stream over loopback: starts, paging, sequences, retention, and the truth."""

from __future__ import annotations

from datetime import timedelta

from support.sim_platform import error_of, sim_now, small_config

from recordsync.core.times import format_time
from recordsync.platform.parsing import parse_changes_page
from recordsync.sim import SEQUENCE_BASE, ManualClock


def test_from_now_is_an_empty_page_with_a_cursor_that_sees_what_comes_next(platform, sim):
    page = platform.data("/v1/record-changes", [("from_now", "true")])

    assert page["items"] == []
    assert page["has_more"] is False
    assert page["next_cursor"]
    assert page["projection_as_of"].endswith("Z")

    again = platform.data("/v1/record-changes", [("cursor", page["next_cursor"])])
    assert again["items"] == []
    assert again["next_cursor"], "an empty page still carries a persistable cursor"

    sim.step(5)
    after = platform.data("/v1/record-changes", [("cursor", again["next_cursor"])])
    assert len(after["items"]) == 5
    assert int(after["items"][-1]["sequence"]) == int(sim.watermark())


def test_paging_walks_the_log_with_strictly_increasing_sequences_above_64_bits(platform, sim):
    start = format_time(sim_now(sim) - timedelta(days=1))
    first = platform.data("/v1/record-changes", [("since", start), ("limit", "100")])
    assert first["has_more"] is True
    assert len(first["items"]) == 100

    changes, cursor = platform.changes_until_caught_up([("since", start)], limit=100)

    sequences = [int(c["sequence"]) for c in changes]
    assert all(isinstance(c["sequence"], str) for c in changes)
    assert sequences == sorted(set(sequences))
    assert sequences[0] > 2**64
    assert sequences[-1] == int(sim.watermark())
    assert sequences == list(range(sequences[0], sequences[-1] + 1))
    changed = [c["changed_at"] for c in changes]
    assert changed == sorted(changed)
    assert changed[0] >= start
    last = platform.data("/v1/record-changes", [("cursor", cursor)])
    assert last["items"] == []
    assert last["has_more"] is False
    parsed = parse_changes_page(first)
    assert parsed.rejected == []
    assert all(c.revision == c.record.revision for c in parsed.changes)


def test_since_is_inclusive_to_the_millisecond(platform, sim):
    start = format_time(sim_now(sim) - timedelta(hours=12))
    some = platform.data("/v1/record-changes", [("since", start), ("limit", "3")])["items"]
    at = some[1]["changed_at"]
    just_after = at.replace("Z", "001Z")  # one microsecond later

    from_at = platform.data("/v1/record-changes", [("since", at), ("limit", "1")])["items"]
    after = platform.data("/v1/record-changes", [("since", just_after), ("limit", "1")])["items"]
    nano = at.replace("Z", "000001Z")
    after_nano = platform.data("/v1/record-changes", [("since", nano), ("limit", "1")])["items"]

    assert from_at[0]["changed_at"] == at
    assert after[0]["changed_at"] > at
    assert after_nano[0]["changed_at"] > at


def test_a_since_older_than_the_retention_is_410(start_sim):
    sim, platform = start_sim(small_config(history_days=3, retention_seconds=86400))
    now = sim_now(sim)

    too_old = platform.get("/v1/record-changes", [("since", format_time(now - timedelta(days=2)))])
    assert too_old.status_code == 410
    assert error_of(too_old)["code"] == "CURSOR_EXPIRED"
    recent = platform.get("/v1/record-changes", [("since", format_time(now - timedelta(hours=20)))])
    assert recent.status_code == 200


def test_the_default_retention_is_90_days(platform, sim):
    now = sim_now(sim)
    ok = platform.get("/v1/record-changes", [("since", format_time(now - timedelta(days=89)))])
    gone = platform.get("/v1/record-changes", [("since", format_time(now - timedelta(days=91)))])
    assert ok.status_code == 200
    assert gone.status_code == 410


def test_a_cursor_that_falls_out_of_the_retention_is_410(start_sim):
    clock = ManualClock()
    sim, platform = start_sim(small_config(history_days=2, retention_seconds=86400), clock=clock)
    start = format_time(sim_now(sim) - timedelta(hours=23))
    page = platform.data("/v1/record-changes", [("since", start), ("limit", "10")])
    caught_up = platform.changes_until_caught_up([("from_now", "true")])[1]

    clock.advance(2 * 3600)

    response = platform.get("/v1/record-changes", [("cursor", page["next_cursor"])])
    assert response.status_code == 410
    assert error_of(response)["code"] == "CURSOR_EXPIRED"
    # a cursor at the head of the log has nothing older than the retention to read
    assert platform.get("/v1/record-changes", [("cursor", caught_up)]).status_code == 200


def test_truth_equals_the_highest_revision_seen_after_a_full_rebuild(start_sim):
    """The spec's rebuild: from_now cursor, records windows, then changes from the cursor."""
    sim, platform = start_sim(small_config(history_days=3, live_rate=300.0))
    sim.start_live()
    saved = platform.data("/v1/record-changes", [("from_now", "true")])["next_cursor"]
    now = sim_now(sim)
    mirror = {r["record_id"]: r for r in platform.all_records(now - timedelta(days=4), now)}
    sim.stop_live()
    sim.step(50)
    changes, _ = platform.changes_until_caught_up([("cursor", saved)])
    for change in changes:
        current = mirror.get(change["record_id"])
        if current is None or change["revision"] > current["revision"]:
            mirror[change["record_id"]] = change["record"]

    assert changes, "live traffic ran during the rebuild"
    assert mirror == sim.truth()


def test_every_change_carries_the_full_record_at_its_revision(platform, sim):
    start = format_time(sim_now(sim) - timedelta(days=3))
    changes, _ = platform.changes_until_caught_up([("since", start)])
    by_record: dict[str, list[int]] = {}
    for change in changes:
        record = change["record"]
        assert change["record_id"] == record["record_id"]
        assert change["revision"] == record["revision"]
        assert change["changed_at"] == record["updated_at"]
        by_record.setdefault(change["record_id"], []).append(change["revision"])
    for revisions in by_record.values():
        assert revisions == list(range(1, len(revisions) + 1))
    truth = sim.truth()
    last = {c["record_id"]: c["record"] for c in changes}
    assert last == truth
    assert int(changes[0]["sequence"]) == SEQUENCE_BASE
