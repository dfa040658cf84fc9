"""The fleet's timing of the daemons and commands a test starts (``RECORDSYNC_FLEET_TICK``,
``RECORDSYNC_LEASE_SECONDS``), and the waits that follow from it, as the code derives them.

The end-to-end tests of takeovers, hand-overs and joins wait ticks and leases, not work: at
the defaults (a tick of 2 s, a lease of 10 s) most of their time is spent waiting.  ``QUICK``
runs them at a quarter of the tick and 6 s of lease, the least whole lease the code allows
over a staleness of 3 ticks with room to spare (``core.settings``), and with write sessions
bounded at half of it, 3 s, still 15 times a loaded machine's slowest page commit.  A test
gives the same timing to every replica and command of its fleet (``env``, ``toml_lines``,
``settings``) and derives each bound it asserts from it, so that the bound still says what it
said at the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from recordsync.core.settings import DEFAULT_FLEET_TICK, DEFAULT_LEASE_SECONDS, STALE_TICKS
from recordsync.fleet.member import ANNOUNCE_WAIT


@dataclass(frozen=True, slots=True)
class FleetTiming:
    tick: float
    lease: int

    @property
    def stale_after(self) -> float:
        """A replica's heartbeat this old: it no longer counts as live."""
        return STALE_TICKS * self.tick

    @property
    def announce_wait(self) -> float:
        """What a starting replica waits after its first heartbeat (``Member._announce``)."""
        return min(self.tick, ANNOUNCE_WAIT)

    @property
    def take_back_after(self) -> float:
        """Alone this long, a command following work takes the lease back (``Handover``)."""
        return self.lease + self.tick

    def env(self) -> dict[str, str]:
        """The ``RECORDSYNC_*`` variables of a process started with this timing."""
        return {
            "RECORDSYNC_FLEET_TICK": f"{self.tick:g}",
            "RECORDSYNC_LEASE_SECONDS": str(self.lease),
        }

    def toml_lines(self) -> tuple[str, ...]:
        """The same, as lines of a ``--config`` file."""
        return (f"fleet_tick = {self.tick:g}", f"lease_seconds = {self.lease}")

    def settings(self) -> dict[str, Any]:
        """The same, as ``Settings`` fields (a daemon run in the test's process)."""
        return {"fleet_tick": self.tick, "lease_seconds": self.lease}


DEFAULT: Final = FleetTiming(DEFAULT_FLEET_TICK, DEFAULT_LEASE_SECONDS)
QUICK: Final = FleetTiming(0.5, 6)
# The quick tick at the default lease: for a test whose command must not take the lease back
# (alone for a lease and a tick) while a daemon restarts, which takes a process's start.
QUICK_TICK: Final = FleetTiming(QUICK.tick, DEFAULT_LEASE_SECONDS)
