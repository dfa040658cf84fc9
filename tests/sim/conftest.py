"""Fixtures of the simulator tests: a small simulator on loopback and a signed helper."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.sim_platform import Platform, small_config

from recordsync.sim import MerchantProfile, SimConfig, Simulator, running_simulator

StartSim = Callable[..., tuple[Simulator, Platform]]


@pytest.fixture
def start_sim() -> Iterator[StartSim]:
    """start_sim(config=None, clock=..., **sim_kwargs) -> (simulator, signed helper)."""
    with contextlib.ExitStack() as stack:

        def start(
            config: SimConfig | None = None,
            *,
            clock: Callable[[], float] = time.time,
            **kwargs: Any,
        ) -> tuple[Simulator, Platform]:
            sim = stack.enter_context(
                running_simulator(config or small_config(), clock=clock, **kwargs)
            )
            platform = Platform(sim, clock=clock)
            stack.callback(platform.close)
            return sim, platform

        yield start


@pytest.fixture
def connect() -> Iterator[Callable[..., Platform]]:
    """connect(sim, merchant_profile) -> a signed helper for that merchant, closed afterwards."""
    with contextlib.ExitStack() as stack:

        def open_platform(sim: Simulator, merchant: MerchantProfile) -> Platform:
            platform = Platform(sim, merchant=merchant)
            stack.callback(platform.close)
            return platform

        yield open_platform


@pytest.fixture
def sim_and_platform(start_sim: StartSim) -> tuple[Simulator, Platform]:
    return start_sim()


@pytest.fixture
def sim(sim_and_platform: tuple[Simulator, Platform]) -> Simulator:
    return sim_and_platform[0]


@pytest.fixture
def platform(sim_and_platform: tuple[Simulator, Platform]) -> Platform:
    return sim_and_platform[1]
