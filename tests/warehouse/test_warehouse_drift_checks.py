"""When a merchant's drift check last ran and since when it waits (``drift_checks``), on every
backend: the first deferral of a run is kept until the run ends, which clears it."""

from __future__ import annotations


def test_a_deferral_is_kept_from_its_first_until_the_run_ends(warehouse):
    assert warehouse.state.drift_check_run("m-1") is None
    warehouse.state.note_drift_check("m-1", deferred=True, epoch=None)
    first = warehouse.state.drift_check_run("m-1")
    assert first is not None
    assert first.last_run_at is None
    assert first.deferred_since is not None
    warehouse.state.note_drift_check("m-1", deferred=True, epoch=None)
    again = warehouse.state.drift_check_run("m-1")
    assert again is not None
    assert again.deferred_since == first.deferred_since
    warehouse.state.note_drift_check("m-1", deferred=False, epoch=None)
    ran = warehouse.state.drift_check_run("m-1")
    assert ran is not None
    assert ran.deferred_since is None
    assert ran.last_run_at is not None
    assert ran.last_run_at <= ran.read_at
    assert warehouse.state.drift_check_run("m-2") is None
