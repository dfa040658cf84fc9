"""Fake time shared by the client tests: one clock that only moves when someone sleeps."""

import threading

import pytest


class FakeTime:
    """A monotonic clock and a sleep that advances it instantly; thread-safe."""

    def __init__(self, start=1000.0):
        self._now = start
        self._lock = threading.Lock()
        self.sleeps = []

    def __call__(self):
        with self._lock:
            return self._now

    def sleep(self, seconds):
        assert seconds >= 0
        with self._lock:
            self.sleeps.append(seconds)
            self._now += seconds

    def advance(self, seconds):
        with self._lock:
            self._now += seconds


@pytest.fixture
def fake_time():
    return FakeTime()
