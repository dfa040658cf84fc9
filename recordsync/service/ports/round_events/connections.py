"""How the notification port stays open to the platform while strangers hold sockets on it.

The port faces the internet (through a proxy, or not), so anyone may open connections and
never finish a request.  uvicorn times out only an idle keep-alive connection, and only after
a response: a connection that sends nothing, half a request head, or a body a byte a minute
is held for ever.  Its ``limit_concurrency`` answers 503 to a *new request* once the open
connections reach the limit, so strangers' silent sockets would lock the platform out while
costing them nothing; it is not used.  ``guarded_h11`` adds what is missing, in the protocol
where the connection's state is known:

- **a head deadline**: a request head must be complete ``head_timeout`` after the connection
  opens, or after the first byte of a later request on it; else the connection is closed
  without a reply (nobody is waiting for one);
- **a connection cap**: at ``max_connections`` a new connection closes the *oldest* one with
  no complete request in hand (silent, idle between requests, or still sending its head or
  body) that never had a request answered, then, only when there is none, the oldest idle
  one that had; only when every connection has a request being answered is the newcomer
  closed.  The platform sends a notification whole within milliseconds of connecting, and
  its keep-alive connections have had answers, so a flood of strangers evicts itself, not
  the platform.

The body deadline belongs to the app (``receiver.asgi_app``), which answers 408 then; so does
the sum of unverified bodies held (``BodyAllowance``), past which it answers 503.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Final

import h11
import structlog
from uvicorn.protocols.http.h11_impl import H11Protocol

log = structlog.get_logger("recordsync.events")


@dataclass(frozen=True, slots=True)
class EventsLimits:
    """The numbers of the notification port (docs/operations.md, "The two ports under hostile
    clients").

    - ``head_timeout`` 5 s: the platform's request head is under 1 KiB and leaves in one TCP
      segment; 5 s covers two lost segments (retransmitted after 1 s, then 2 s).
    - ``body_timeout`` 10 s, from the end of the head: a notification is a few hundred bytes;
      even the 1 MiB limit arrives within 10 s at 1 Mbit/s.  Past it: 408, connection closed.
    - ``keep_alive`` 30 s: an idle connection between requests (a proxy's pool) is kept that
      long; it costs strangers nothing, since an idle one is the first evicted at the cap.
    - ``max_connections`` 256: the platform sends one notification per round end, answered in
      milliseconds, so even a proxy's pool of idle connections stays far below it; 256
      sockets are well inside a process's 1,024 default descriptors beside the warehouse's.
    - ``max_head_bytes`` 8 KiB: the longest head a server commonly accepts (nginx, Apache)
      and eight times the platform's; a longer one is answered 400 by h11.
    - ``workers`` 8: threads that store notifications (a warehouse insert each, milliseconds);
      more would only queue on the warehouse's connection pool.
    - ``backlog`` 2048: connections the kernel completes and queues while the event loop is
      busy (a burst of strangers, a pause).  Past the queue a connection's handshake is
      dropped and its client tries again only after 1 s: with 128, a flood of 900
      connections overflowed it and the platform's notification behind them was answered
      in 1.03 s instead of milliseconds.  The kernel caps it at ``net.core.somaxconn``
      (4096 since Linux 5.4); queued connections hold no descriptor of ours.
    - ``unverified_body_bytes`` 8 MiB: bodies whose head passed the checks the head alone
      decides but whose signature is not verified yet, all connections together.  A body
      takes its declared length (1 MiB when it declares none) before a byte is read; past
      the sum, 503 with Retry-After, which the platform honours.  Eight 1 MiB bodies at once,
      where the platform sends a few hundred bytes per notification: it is only refused
      while someone who knows a merchant id sends large bodies, and without the sum 256
      strangers' bodies were a quarter gigabyte, two thirds of the Deployment's memory.
    - ``receive_buffer`` 16 KiB (``SO_RCVBUF``; the kernel doubles it): the most one read
      takes from a connection.  With the default of Linux, one read took 256 KiB of a
      stranger's body along with the head, and 250 of them at once still held 20 MiB for
      the instant before their refusal.  A notification is a few hundred bytes, one read;
      the price is a large body's pace over a long link (about 16 KiB per round trip: a
      1 MiB body within the body deadline up to about 150 ms).
    """

    head_timeout: float = 5.0
    body_timeout: float = 10.0
    keep_alive: int = 30
    max_connections: int = 256
    max_head_bytes: int = 8 * 1024
    workers: int = 8
    backlog: int = 2048
    unverified_body_bytes: int = 8 * 1024 * 1024
    receive_buffer: int = 16 * 1024


DEFAULT_LIMITS: Final = EventsLimits()


class BodyAllowance:
    """The bytes the port may hold for bodies not verified yet, shared by every connection.

    Taken and given back on the event loop's thread only, so it needs no lock."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes, if the sum stays within the limit."""
        if self.held + size > self._limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


def guarded_h11(limits: EventsLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``limits``' head deadline and connection cap (pass it as
    ``uvicorn.Config(http=...)``)."""

    class Guarded(_GuardedH11Protocol):
        _limits = limits

    return Guarded


class _GuardedH11Protocol(H11Protocol):
    _limits: EventsLimits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opened = 0.0
        self.answered = 0  # responses completed on this connection
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.opened = time.monotonic()
        self._arm_head_deadline()
        if len(self.connections) > self._limits.max_connections:
            self._make_room()

    def data_received(self, data: bytes) -> None:
        if self._head_deadline is None and self.conn.their_state is h11.IDLE:
            self._arm_head_deadline()  # the first bytes of a later request on this connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._cancel_head_deadline()  # the head is complete: the body has its own deadline

    def on_response_complete(self) -> None:
        self._cancel_head_deadline()
        self.answered += 1
        super().on_response_complete()
        pipelined, _closed = self.conn.trailing_data
        if pipelined and self.conn.their_state is h11.IDLE:
            self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_deadline()
        super().connection_lost(exc)

    def incomplete(self) -> bool:
        """No complete request in hand: nothing would be lost by closing it."""
        return not self.transport.is_closing() and self.conn.their_state in (
            h11.IDLE,
            h11.SEND_BODY,
        )

    def _make_room(self) -> None:
        open_ = [c for c in self.connections if not c.transport.is_closing()]
        if len(open_) <= self._limits.max_connections:
            return  # the excess were closing already
        evictable = [
            c
            for c in open_
            if isinstance(c, _GuardedH11Protocol) and c is not self and c.incomplete()
        ]
        if not evictable:
            log.debug("events_connection_refused", open=len(open_))
            self.transport.close()
            return
        # Those that never had a request answered go first, the oldest of them: a keep-alive
        # connection of the platform's is idle between its notifications, and is the oldest
        # of all when a flood begins; closing it would reset its next notification.
        oldest = min(evictable, key=lambda c: (c.answered > 0, c.opened))
        log.debug(
            "events_connection_evicted",
            open=len(open_),
            age=self.opened - oldest.opened,
            answered=oldest.answered,
        )
        oldest.transport.close()

    def _arm_head_deadline(self) -> None:
        self._cancel_head_deadline()
        self._head_deadline = self.loop.call_later(self._limits.head_timeout, self._head_overdue)

    def _cancel_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_overdue(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.debug("events_head_timed_out")
            self.transport.close()
