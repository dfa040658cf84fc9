"""Fake time shared by the client tests: one clock that only moves when someone sleeps."""

import pytest
from support.clocks import FakeClock


@pytest.fixture
def fake_time():
    return FakeClock(1000.0)
