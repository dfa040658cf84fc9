"""Operators' controls (``merchant_controls``, revision 0013) on every backend: a pause is
kept with who and why, a second pause keeps the first one's time (and, from another operator,
its owner's reason), a resume ends it when its caller allows."""

from __future__ import annotations

import threading

from recordsync.warehouse import Warehouse

M1, M2 = "m-controls-1", "m-controls-2"


def test_a_pause_is_kept_with_who_and_why_until_resumed(warehouse: Warehouse):
    controls = warehouse.controls
    assert controls.paused([M1, M2]) == {}
    first = controls.pause(M1, by="ops@host-a", reason="platform incident INC-7")
    assert (first.by, first.reason) == ("ops@host-a", "platform incident INC-7")
    assert controls.paused([M1, M2]) == {M1: first}
    assert controls.paused([M2]) == {}

    # Another operator's pause keeps the owner's, reason and all; the owner's replaces it.
    theirs = controls.pause(M1, by="ops@host-b", reason="contract on hold")
    assert (theirs.since, theirs.by, theirs.reason) == (first.since, "ops@host-a", first.reason)
    again = controls.pause(M1, by="ops@host-a", reason="still down")
    assert (again.since, again.by, again.reason) == (first.since, "ops@host-a", "still down")

    # Ending it is the caller's decision, taken on the pause found.
    kept = controls.resume(M1, by="ops@host-b", may_end=lambda pause: pause.by == "ops@host-b")
    assert kept is not None
    assert (kept.pause, kept.ended) == (again, False)
    assert controls.paused([M1]) == {M1: again}
    ended = controls.resume(M1, by="ops@host-b")
    assert ended is not None
    assert (ended.pause, ended.ended) == (again, True)
    assert controls.paused([M1]) == {}
    assert controls.resume(M1, by="ops@host-b") is None  # not paused: nothing ended
    assert controls.resume(M2, by="ops@host-b") is None  # never paused

    later = controls.pause(M1, by="ops@host-c", reason=None)
    assert later.since >= first.since
    assert (later.by, later.reason) == ("ops@host-c", None)
    assert controls.paused([]) == {}


def test_operators_pausing_at_the_same_instant_all_succeed(warehouse: Warehouse):
    """Eight pauses of one merchant released together, ten times over: none fails (a read,
    then an insert, raced: the second insert hit the key), one row, the first time kept."""
    url = warehouse.engine.url.render_as_string(hide_password=False)
    stores = [Warehouse.connect(url) for _ in range(8)]
    try:
        for round_ in range(10):
            merchant = f"m-controls-race-{round_}"
            barrier = threading.Barrier(len(stores))
            failures: list[BaseException] = []

            def pause(
                store: Warehouse,
                n: int,
                merchant: str = merchant,
                barrier: threading.Barrier = barrier,
                failures: list[BaseException] = failures,
            ) -> None:
                barrier.wait(10)
                try:
                    store.controls.pause(merchant, by=f"ops-{n}", reason="race")
                except BaseException as exc:  # noqa: BLE001 - collected, asserted below
                    failures.append(exc)

            threads = [
                threading.Thread(target=pause, args=(store, n)) for n, store in enumerate(stores)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert failures == []
            assert list(warehouse.controls.paused([merchant])) == [merchant]
    finally:
        for store in stores:
            store.close()
