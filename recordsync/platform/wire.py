"""When a request has gone on the wire: the rate budget's start of a request.

The platform counts a record request when it arrives, and the budget bounds that arrival by
the request's start plus a margin (budget.py).  The start used to be the moment the client
handed the request to httpx; between that and the socket's ``send`` lie the connection pool,
perhaps a new connection, h11's framing and, in a process whose other threads parse and
write pages, waits for the GIL and the collector's pauses: milliseconds as a rule, tens of
them when the machine is loaded, and every one of them came out of the margin meant for the
network.  A request that left 60 ms after its stamp could be counted by the platform in the
same second as one the budget started a second later (an end-to-end test failed so under
load).

So the start is taken where it happens: the transport built here stamps the request's slot
right after the request's bytes have been written to the socket (a request never arrives
before it is written, and stamping after the write can only make the bound later, never
earlier than the truth).  Until then the slot is unstamped and counts as starting now, so a
request waiting for a connection holds its place without trusting any bound.

The same write is the last moment a request can still be held back, so it is also where the
client's ``gate`` is asked, right before the first bytes go out: a client under a lease
(``PlatformClient.hold_under``) passes its lease check, and a request that waited past its
lease for a connection (a connect to a slow platform may take its whole timeout), for the GIL
or for a paused process is refused there, unsent, instead of reaching the platform after
another process may hold the merchant.  Nothing in a process can make the check and the
socket's ``send`` one step: a process stopped between the two still sends that one request
when it resumes; the window is a few bytecodes wide.

The slot and the gate travel by thread: httpx's synchronous client writes in the calling
thread, and ``carrying`` names them for the one request that thread sends.  A transport that
does not tell (a test's ``MockTransport``, a proxy taken from the environment) leaves the slot
to the client, which stamps it when the answer's head is in: later than any arrival, so safe;
its lease is asked by the client only, before the hand-over.
"""

from __future__ import annotations

import ssl
import threading
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpcore
import httpx

from recordsync.platform.budget import Slot

_carried = threading.local()


@contextmanager
def carrying(slot: Slot | None, gate: Callable[[], None] | None = None) -> Iterator[None]:
    """While the calling thread sends one request, its socket write stamps ``slot``, and
    ``gate`` (which raises to hold the request back) is called right before its first write."""
    previous = getattr(_carried, "slot", None), getattr(_carried, "gate", None)
    _carried.slot, _carried.gate = slot, gate
    try:
        yield
    finally:
        _carried.slot, _carried.gate = previous


def _writing() -> None:
    gate: Callable[[], None] | None = getattr(_carried, "gate", None)
    if gate is not None:
        gate()
        _carried.gate = None  # the request is going out: its later writes are its own


def _written() -> None:
    slot: Slot | None = getattr(_carried, "slot", None)
    if slot is not None:
        settle(slot)


class WireStream(httpcore.NetworkStream):
    """A connection whose ``write`` asks the carried request's gate first and stamps its slot
    after."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _writing()
        self._inner.write(buffer, timeout)
        _written()

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return WireStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class WireBackend(httpcore.NetworkBackend):
    """httpcore's network backend with ``WireStream`` connections; ``inner`` does the I/O."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        return WireStream(
            self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        return WireStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def wire_transport(
    *, verify: bool | ssl.SSLContext = True, network: httpcore.NetworkBackend | None = None
) -> httpx.HTTPTransport:
    """httpx's own transport (its limits, TLS and error mapping) over a ``WireBackend``.

    httpx 0.28 takes no network backend, so the transport's pool is replaced by one built
    with the same limits; the pin on httpx (pyproject.toml) keeps ``_pool`` where it is, and
    tests/platform/test_wire.py fails if a request ever stops being stamped at its write.
    """
    transport = httpx.HTTPTransport(verify=verify)
    limits = httpx.Limits()
    transport._pool = httpcore.ConnectionPool(  # noqa: SLF001 - see the docstring
        ssl_context=httpx.create_ssl_context(verify=verify),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=WireBackend(network),
    )
    return transport


def settle(slot: Slot) -> None:
    """The transport is done with the request (its answer's head is in, or it failed): a slot
    no write stamped, because the transport does not tell, is stamped now, later than the
    request can have arrived, so the budget counts it without trusting any bound."""
    if not slot.stamped:
        slot.stamp()


def answer_hook(slot: Slot) -> Callable[[], None]:
    """The client's ``answered`` hook for ``slot``: settled first, then proof of arrival."""

    def hook() -> None:
        settle(slot)
        slot.answered()

    return hook
