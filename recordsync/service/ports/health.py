"""``/metrics``, ``/healthz`` and ``/readyz`` on ``RECORDSYNC_HTTP_PORT``.

- ``/healthz``: 200 as long as the process can answer at all (a liveness probe: restart me
  only when this fails).
- ``/readyz``: 200 when the sync is doing its job, else 503 with a short JSON reason.  The rule
  is pure (``readiness``): the warehouse answers, and a page was committed recently (within
  ``multiple`` poll intervals).  The tail commits a page (empty or not) every
  poll, so a healthy daemon commits at least that often, during its first snapshot too.
  Before the first commit a start-up grace period applies.
- ``/metrics``: the registry in the Prometheus text format (OpenMetrics when asked for).

The server is ``bounded_http``: its threads, connections and answers in flight are bounded
whatever clients do.  ``/healthz`` is answered by the thread that reads the heads, so it
never waits for another client: neither a slow readiness check (a warehouse ping that hangs
on a dead server) nor ``/metrics`` readers that never read.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Final, Self
from urllib.parse import urlsplit

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from recordsync.core.errors import ConfigurationError
from recordsync.service.ports.bounded_http import (
    Answer,
    BoundedHTTPServer,
    HttpLimits,
    RequestHead,
    Work,
)
from recordsync.service.readiness import (
    DEFAULT_READY_MULTIPLE,
    DEFAULT_STARTUP_GRACE,
    Readiness,
    assess_merchants,
)

_STOP_TIMEOUT_S: Final = 5.0

_log = structlog.get_logger(__name__)


class FleetReadinessCheck:
    """``assess_merchants`` over live sources: a warehouse ping and the held merchants."""

    def __init__(
        self,
        *,
        ping: Callable[[], object],
        held: Callable[[], Mapping[str, tuple[float, float | None]]],
        poll_interval: float,
        multiple: float = DEFAULT_READY_MULTIPLE,
        startup_grace: float = DEFAULT_STARTUP_GRACE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ping = ping
        self._held = held
        self._poll_interval = poll_interval
        self._multiple = multiple
        self._startup_grace = startup_grace
        self._clock = clock

    def __call__(self) -> Readiness:
        try:
            self._ping()
        except Exception as exc:  # noqa: BLE001 - any failure to answer means "not ready"
            warehouse_error: str | None = type(exc).__name__
        else:
            warehouse_error = None
        return assess_merchants(
            now=self._clock(),
            held=self._held(),
            warehouse_error=warehouse_error,
            poll_interval=self._poll_interval,
            multiple=self._multiple,
            startup_grace=self._startup_grace,
        )


READINESS_LANE: Final = "readiness"
METRICS_LANE: Final = "metrics"

PROBE_LIMITS: Final = HttpLimits(
    # Probes and scrapers send their head in one segment at once; 5 s covers two lost ones.
    head_timeout=5.0,
    # The whole answer written within this (written without blocking: only the slow reader
    # waits); a /metrics answer not read by then is dropped, and its slot freed.
    write_timeout=5.0,
    # Prometheus (one or two), the kubelet's two probes, an operator's curl: a handful at
    # once; 64 leaves room for slow ones and stays far inside the descriptors' limit.
    max_connections=64,
    # /healthz is answered by the I/O thread itself.  /readyz may wait on a warehouse ping:
    # one at a time.  /metrics: two answers in flight (one Prometheus pair, or one scrape and
    # an operator's curl); a third is 503 at once, so clients that never read hold two
    # answers (a few MB with many merchants) for 5 s, never the probes.
    lanes={READINESS_LANE: 1, METRICS_LANE: 2},
    # A probe's head is a few hundred bytes; 8 KiB is what servers commonly accept.
    max_head_bytes=8 * 1024,
    # A burst (a flood, a pause of this process) waits in the kernel's queue: a connection
    # past it is dropped and retried by its client only after 1 s (a probe's timeout).
    backlog=2048,
)


class HealthServer:
    """Serves the three endpoints on ``host:port`` from daemon threads (``bounded_http``:
    one doing the I/O and answering ``/healthz``, one per answer in flight on each lane).

    ``port=0`` binds an ephemeral port (tests read it from ``.port``).  At the daemon level
    ``RECORDSYNC_HTTP_PORT=0`` means "no HTTP server": the daemon does not build one then.
    """

    def __init__(
        self,
        port: int,
        *,
        host: str = "0.0.0.0",  # noqa: S104 - probes and Prometheus scrape from outside the pod
        registry: CollectorRegistry,
        readiness: Callable[[], Readiness],
        limits: HttpLimits = PROBE_LIMITS,
    ) -> None:
        self._host = host
        self._requested_port = port
        self._registry = registry
        self._readiness = readiness
        self._limits = limits
        self._server: BoundedHTTPServer | None = None
        self._port: int | None = None
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        """The port actually bound (the ephemeral one when 0 was asked for)."""
        if self._port is None:
            raise RuntimeError("the health server is not started")
        return self._port

    def start(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            listener = self._listen()
            server = BoundedHTTPServer(
                listener,
                _Endpoints(self._registry, self._readiness),
                self._limits,
                name="health-http",
            )
            server.start()
            self._server, self._port = server, int(listener.getsockname()[1])
        _log.info("http_listening", host=self._host, port=self.port)

    def _listen(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self._host, self._requested_port))
            listener.listen(self._limits.backlog)
        except OSError as exc:
            listener.close()
            raise ConfigurationError(
                f"RECORDSYNC_HTTP_PORT: cannot listen on {self._host}:{self._requested_port}"
                f" ({exc.strerror or type(exc).__name__})"
            ) from None
        return listener

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice, or before ``start``."""
        with self._lock:
            server, self._server, self._port = self._server, None, None
        if server is not None:
            server.stop(_STOP_TIMEOUT_S)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


_TEXT: Final = "text/plain; charset=utf-8"


class _Endpoints:
    """What each path answers (GET only; probes send nothing else).  Called on the server's
    I/O thread: ``/healthz`` is answered there, the others are ``Work`` for their lanes."""

    def __init__(self, registry: CollectorRegistry, readiness: Callable[[], Readiness]) -> None:
        self._registry = registry
        self._readiness = readiness

    def __call__(self, head: RequestHead) -> Answer | Work:
        if head.method != "GET":
            return Answer(HTTPStatus.METHOD_NOT_ALLOWED, b"method not allowed\n")
        path = urlsplit(head.target).path
        if path == "/healthz":
            return Answer(HTTPStatus.OK, b"ok\n")
        if path == "/readyz":
            # One readiness check at a time: a warehouse ping that hangs must not take more
            # than its lane as the kubelet asks again every few seconds.
            busy = Readiness(ready=False, reason="the previous readiness check has not ended")
            return Work(READINESS_LANE, self._readyz, _readiness_answer(busy))
        if path == "/metrics":
            encoder, content_type = choose_encoder(head.headers.get("accept", ""))
            return Work(
                METRICS_LANE,
                lambda: Answer(HTTPStatus.OK, encoder(self._registry), content_type),
                _METRICS_BUSY,
            )
        return Answer(HTTPStatus.NOT_FOUND, b"not found\n")

    def _readyz(self) -> Answer:
        try:
            result = self._readiness()
        except Exception as exc:  # noqa: BLE001 - a broken check means "not ready"
            result = Readiness(ready=False, reason=f"readiness check failed: {type(exc).__name__}")
        return _readiness_answer(result)


_METRICS_BUSY: Final = Answer(
    HTTPStatus.SERVICE_UNAVAILABLE, b"two /metrics answers are in flight already; ask again\n"
)


def _readiness_answer(result: Readiness) -> Answer:
    body = json.dumps({"ready": result.ready, "reason": result.reason}).encode() + b"\n"
    status = HTTPStatus.OK if result.ready else HTTPStatus.SERVICE_UNAVAILABLE
    return Answer(status, body, "application/json")
