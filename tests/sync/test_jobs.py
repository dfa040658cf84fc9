"""The job runner: generations of jobs on one shared host, bounded pools, failures routed to
the generation they belong to, and a wake-up that runs a periodic job at once."""

from __future__ import annotations

import threading
import time

import pytest

from recordsync.core.stopping import Stopper
from recordsync.sync.jobs import JobHost, Jobs


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


def test_wake_runs_a_periodic_job_now(host):
    stopper = Stopper()
    jobs = Jobs(stopper, workers=1, host=host)
    runs = []
    jobs.every("tail", 3600, lambda: runs.append(time.monotonic()), now=True)
    thread, _raised = run_in_thread(jobs)
    wait_until(lambda: len(runs) == 1)
    woken = time.monotonic()
    jobs.wake("tail")
    wait_until(lambda: len(runs) == 2)
    assert runs[1] - woken < 1.0
    stopper.stop()
    thread.join(5)
    jobs.wake("tail")  # after the generation ended: nothing happens, nothing raised
