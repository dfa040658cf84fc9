"""The job runner: generations of jobs on one shared host, bounded pools, failures routed to
the generation they belong to, and jobs that must wait give their thread back."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from recordsync.core.errors import AuthenticationError
from recordsync.core.stopping import Stopper
from recordsync.core.waiting import Deferred, may_wait
from recordsync.sync.events import SyncObserver
from recordsync.sync.jobs import JobHost, Jobs
from recordsync.sync.resilience import FATAL_BACKOFF, StepRunner


def run_in_thread(jobs: Jobs, **kwargs) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def target() -> None:
        try:
            jobs.run_until_stopped(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, raised


def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.fixture
def host():
    shared = JobHost(periodic_threads=2, worker_threads=2)
    yield shared
    shared.shutdown()


def test_generations_on_one_host_stop_independently(host):
    ticks = {"a": 0, "b": 0}
    stoppers = {name: Stopper() for name in ticks}
    generations = {name: Jobs(stoppers[name], workers=1, host=host) for name in ticks}
    for name, jobs in generations.items():
        jobs.every(
            "tail", 0.02, lambda name=name: ticks.__setitem__(name, ticks[name] + 1), now=True
        )
    threads = {name: run_in_thread(jobs)[0] for name, jobs in generations.items()}
    wait_until(lambda: ticks["a"] > 2 and ticks["b"] > 2)

    stoppers["a"].stop()
    threads["a"].join(5)
    assert not threads["a"].is_alive()
    stopped_at = ticks["a"]
    before = ticks["b"]
    wait_until(lambda: ticks["b"] > before + 3)  # the other generation goes on
    assert ticks["a"] == stopped_at  # none of the stopped generation's jobs runs again
    assert not [job for job in host.scheduler.get_jobs() if job.id.startswith("g1:")]
    stoppers["b"].stop()
    threads["b"].join(5)


def test_a_generation_ends_only_after_its_running_jobs_finish(host):
    stopper = Stopper()
    jobs = Jobs(stopper, workers=1, host=host)
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(5)
        finished.set()

    jobs.once("worker", slow)
    thread, _raised = run_in_thread(jobs)
    assert started.wait(5)
    stopper.stop()
    time.sleep(0.3)
    assert thread.is_alive()  # still waiting for the worker in hand
    release.set()
    thread.join(5)
    assert finished.is_set()
    assert not thread.is_alive()


def test_a_failure_stops_only_the_generation_it_belongs_to(host):
    good, bad = Stopper(), Stopper()
    ticks = []
    good_jobs = Jobs(good, workers=1, host=host)
    good_jobs.every("tail", 0.02, lambda: ticks.append(1), now=True)
    bad_jobs = Jobs(bad, workers=1, host=host)

    def broken() -> None:
        raise KeyError("a bug")

    bad_jobs.once("worker", broken)
    good_thread, good_raised = run_in_thread(good_jobs)
    bad_thread, bad_raised = run_in_thread(bad_jobs)
    bad_thread.join(5)
    assert [type(exc) for exc in bad_raised] == [KeyError]
    count = len(ticks)
    wait_until(lambda: len(ticks) > count + 2)
    assert good_thread.is_alive()
    assert good_raised == []
    good.stop()
    good_thread.join(5)


def test_workers_beyond_the_pool_wait_for_a_thread(host):
    stopper = Stopper()
    jobs = Jobs(stopper, workers=1, host=host)
    running, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()
    done = []

    def worker() -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(5)
        with lock:
            running[0] -= 1
            done.append(1)

    for number in range(5):
        jobs.once(f"worker-{number}", worker)
    thread, _raised = run_in_thread(jobs)
    wait_until(lambda: running[0] == 2)
    time.sleep(0.2)
    assert peak[0] == 2  # the host's worker pool has two threads
    release.set()
    wait_until(lambda: len(done) == 5)
    stopper.stop()
    thread.join(5)


@pytest.fixture
def one_thread():
    """A host whose pools have one thread each: any job that held it would stop the rest."""
    shared = JobHost(periodic_threads=1, worker_threads=1)
    yield shared
    shared.shutdown()


def refused_step():
    raise AuthenticationError("signature mismatch", endpoint="games", status=401)


def test_a_step_that_fails_fatally_holds_no_thread_and_another_job_runs_on_time(one_thread):
    """The rule: a waiting step gives its thread back.  Its runner would sleep
    300 s; in the only thread of the pool, every other job would wait that long."""
    stopper = Stopper()
    jobs = Jobs(stopper, workers=1, host=one_thread)
    runner = StepRunner(stopper=stopper, observer=SyncObserver(), fatal_is_final=False)
    failed_runs, ticks = [], []

    def failing() -> None:
        failed_runs.append(time.monotonic())
        runner.run(refused_step, what="read catalogue")

    jobs.every("catalogue", 3600, failing, now=True)
    jobs.every("other", 0.05, lambda: ticks.append(time.monotonic()), now=True)
    thread, raised = run_in_thread(jobs)
    wait_until(lambda: len(failed_runs) == 1)
    started = time.monotonic()
    wait_until(lambda: len([tick for tick in ticks if tick > started]) >= 10, timeout=2.0)
    late = [tick for tick in ticks if tick > started]
    assert max(b - a for a, b in itertools.pairwise(late)) < 0.5
    assert len(failed_runs) == 1  # deferred for FATAL_BACKOFF, not run again meanwhile
    assert runner.failures == 1
    (job,) = [job for job in one_thread.scheduler.get_jobs() if job.id.endswith(":catalogue")]
    assert job.next_run_time.timestamp() - time.time() > FATAL_BACKOFF - 10
    stopper.stop()
    thread.join(5)
    assert raised == []


def test_a_deferred_one_off_job_runs_again_after_the_wait_and_keeps_its_state(one_thread):
    stopper = Stopper()
    jobs = Jobs(stopper, workers=1, host=one_thread)
    runs, done = [], threading.Event()
    pages = iter([Deferred(0.2, "first page failed"), Deferred(0.1, "again"), None])

    def worker() -> None:
        runs.append(time.monotonic())
        outcome = next(pages)  # the state a deferral keeps: where the worker stands
        if outcome is not None:
            raise outcome
        done.set()

    jobs.once("snapshot-0", worker)
    thread, raised = run_in_thread(jobs, done=done)
    thread.join(5)
    assert raised == []
    assert len(runs) == 3
    assert runs[1] - runs[0] >= 0.2
    assert runs[2] - runs[1] >= 0.1


def test_a_deferred_periodic_job_runs_again_after_the_wait_then_at_its_interval(one_thread):
    stopper = Stopper()
    jobs = Jobs(stopper, workers=1, host=one_thread)
    runs = []

    def check() -> None:
        runs.append(time.monotonic())
        if len(runs) == 1:
            raise Deferred(0.3, "the warehouse restarts")

    jobs.every("drift-check", 3600, check, now=True)
    thread, _raised = run_in_thread(jobs)
    wait_until(lambda: len(runs) == 2)
    assert runs[1] - runs[0] >= 0.3
    time.sleep(0.3)
    assert len(runs) == 2  # then its interval: an hour
    stopper.stop()
    thread.join(5)


def test_inside_a_job_no_failure_is_waited_out_outside_one_it_is(one_thread):
    seen = []
    stopper = Stopper()
    jobs = Jobs(stopper, workers=1, host=one_thread)
    jobs.once("look", lambda: seen.append(may_wait()))
    thread, _raised = run_in_thread(jobs)
    wait_until(lambda: seen)
    stopper.stop()
    thread.join(5)
    assert seen == [False]
    assert may_wait()


def test_a_job_deferred_as_its_generation_ends_is_not_scheduled_again(one_thread):
    stopper = Stopper()
    jobs = Jobs(stopper, workers=1, host=one_thread)
    started, release = threading.Event(), threading.Event()

    def worker() -> None:
        started.set()
        release.wait(5)
        raise Deferred(0.05, "deferred while the generation closes")

    jobs.once("snapshot-0", worker)
    thread, raised = run_in_thread(jobs)
    assert started.wait(5)
    stopper.stop()
    time.sleep(0.1)
    release.set()
    thread.join(5)
    assert raised == []
    time.sleep(0.2)
    assert not [job for job in one_thread.scheduler.get_jobs() if job.id.startswith("g1:")]
