"""A one-shot step gives up on a platform it cannot reach after its bound, naming the cause;
the daemon's never does, and any answer from the platform restarts the count."""

from __future__ import annotations

import pytest
from support.clocks import FakeClock

from recordsync.core.errors import (
    PlatformUnreachableError,
    ServerError,
    TransportError,
)
from recordsync.core.stopping import Stopper
from recordsync.sync.events import SyncObserver
from recordsync.sync.resilience import StepRunner


class SleepyStopper(Stopper):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self._clock = clock

    def sleep(self, seconds: float) -> None:
        self._clock.sleep(seconds)


def unreachable() -> None:
    raise TransportError(
        "no answer (ConnectError: the name 'x.invalid' does not resolve)", endpoint="records"
    )


def runner(clock: FakeClock, give_up_after: float | None) -> StepRunner:
    return StepRunner(
        stopper=SleepyStopper(clock),
        observer=SyncObserver(),
        fatal_is_final=True,
        give_up_after=give_up_after,
        clock=clock,
    )


def test_a_step_that_never_reaches_the_platform_gives_up_naming_the_cause():
    clock = FakeClock(0.0)
    with pytest.raises(PlatformUnreachableError) as raised:
        runner(clock, give_up_after=60).run(unreachable, what="read")
    assert 60 <= clock.now < 60 + 61  # at most one backoff (60 s) beyond the bound
    assert "could not be reached" in str(raised.value)
    assert "the name 'x.invalid' does not resolve" in str(raised.value)


def test_the_bound_counts_from_the_attempt_whose_client_retries_took_it_past():
    clock = FakeClock(0.0)

    def slow_unreachable() -> None:
        clock.sleep(20)  # the client's own retries of the request
        unreachable()

    with pytest.raises(PlatformUnreachableError):
        runner(clock, give_up_after=10).run(slow_unreachable, what="read")
    assert clock.now == 20  # the first failure already took longer than the bound


def test_an_answer_from_the_platform_restarts_the_count():
    clock = FakeClock(0.0)
    calls = iter([unreachable] * 3 + [ServerError("500", endpoint="records")] + [unreachable] * 3)

    def step() -> str:
        failure = next(calls, None)
        if failure is None:
            return "read"
        if isinstance(failure, ServerError):
            raise failure
        failure()
        return "unreachable"

    assert runner(clock, give_up_after=1000).run(step, what="read") == "read"


def test_without_a_bound_the_runner_keeps_trying():
    clock = FakeClock(0.0)
    failures = iter(range(50))

    def step() -> str:
        if next(failures, None) is not None:
            unreachable()
        return "read"

    assert runner(clock, give_up_after=None).run(step, what="read") == "read"
    assert clock.now > 600  # far beyond any bound: nothing gave up
