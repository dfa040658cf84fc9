"""The platform simulator: a faithful, fast fake of the platform's record side over real HTTP.

Used by the tests, the demo and the benchmarks, and by merchants to try recordsync::

    from recordsync.sim import Simulator, SimConfig

    with Simulator(SimConfig(seed=7)).start() as sim:
        print(sim.base_url)

Several merchants on one port, each with its own secret, history, rate limit and faults::

    config = SimConfig(history_days=2).with_merchants(3)  # demo-merchant-1 .. -3
    with running_simulator(config) as sim:
        for profile in config.profiles:
            print(profile.merchant_id, sim.stats(profile.merchant_id).total_requests)

Round-end notifications to a merchant's receiver (spec: Events, Round end)::

    config = SimConfig(events_url="http://127.0.0.1:9100", events_time_scale=0.01)
    with running_simulator(config, live=True) as sim:
        ...
        sim.wait_events()
        print(sim.stats().events.delivered, sim.announced())

An optional endpoint refused to one merchant (404, 403, 500, or a stall)::

    sim.refuse("games", Refusal(status=404), merchant_id="demo-merchant-2")

It imports only the core and ``recordsync.platform.signing`` from the package: never the
client, the sync, the warehouse or the service (``lint-imports`` holds it to that).
"""

from recordsync.sim.added_fields import FIELD_KINDS, AddedField
from recordsync.sim.config import (
    DEMO_MERCHANT_ID,
    DEMO_SECRET,
    OPTIONAL_ENDPOINTS,
    FaultRates,
    MerchantProfile,
    Refusal,
    SimConfig,
)
from recordsync.sim.events import Announcement
from recordsync.sim.replies import DEVIATION_KINDS
from recordsync.sim.simulator import Simulator
from recordsync.sim.stats import FAULT_KINDS, EventStats, SimStats
from recordsync.sim.store import SEQUENCE_BASE
from recordsync.sim.testing import ManualClock, running_simulator

__all__ = [
    "DEMO_MERCHANT_ID",
    "DEMO_SECRET",
    "DEVIATION_KINDS",
    "FAULT_KINDS",
    "FIELD_KINDS",
    "OPTIONAL_ENDPOINTS",
    "SEQUENCE_BASE",
    "AddedField",
    "Announcement",
    "EventStats",
    "FaultRates",
    "ManualClock",
    "MerchantProfile",
    "Refusal",
    "SimConfig",
    "SimStats",
    "Simulator",
    "running_simulator",
]
