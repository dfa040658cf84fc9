"""Operators' controls (``merchant_controls``, revision 0013) on every backend: a pause is
kept with who and why, a second pause keeps the first one's time, a resume ends it."""

from __future__ import annotations

from recordsync.warehouse import Warehouse

M1, M2 = "m-controls-1", "m-controls-2"


def test_a_pause_is_kept_with_who_and_why_until_resumed(warehouse: Warehouse):
    controls = warehouse.controls
    assert controls.paused([M1, M2]) == {}
    first = controls.pause(M1, by="ops@host-a", reason="platform incident INC-7")
    assert (first.by, first.reason) == ("ops@host-a", "platform incident INC-7")
    assert controls.paused([M1, M2]) == {M1: first}
    assert controls.paused([M2]) == {}

    again = controls.pause(M1, by="ops@host-b", reason="still down")
    assert (again.since, again.by, again.reason) == (first.since, "ops@host-a", "still down")

    assert controls.resume(M1, by="ops@host-b") == again
    assert controls.paused([M1]) == {}
    assert controls.resume(M1, by="ops@host-b") is None  # not paused: nothing ended
    assert controls.resume(M2, by="ops@host-b") is None  # never paused

    later = controls.pause(M1, by="ops@host-c", reason=None)
    assert later.since >= first.since
    assert (later.by, later.reason) == ("ops@host-c", None)
    assert controls.paused([]) == {}
