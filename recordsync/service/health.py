"""``/metrics``, ``/healthz`` and ``/readyz`` on ``RECORDSYNC_HTTP_PORT``.

- ``/healthz``: 200 as long as the process can answer at all (a liveness probe: restart me
  only when this fails).
- ``/readyz``: 200 when the sync is doing its job, else 503 with a short JSON reason.  The rule
  is the pure function ``assess_readiness``: the warehouse answers, and a page was committed
  recently (within ``multiple`` poll intervals).  The tail commits a page (empty or not) every
  poll, so a healthy daemon commits at least that often, during its first snapshot too.
  Before the first commit a start-up grace period applies.
- ``/metrics``: the registry in the Prometheus text format (OpenMetrics when asked for).

The server is stdlib ``ThreadingHTTPServer`` on a daemon thread: a slow readiness check (a
warehouse ping that hangs on a dead server) never blocks ``/healthz`` or ``/metrics``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final, Self
from urllib.parse import urlsplit

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from recordsync.core.errors import ConfigurationError

DEFAULT_READY_MULTIPLE: Final = 30.0
DEFAULT_STARTUP_GRACE: Final = 120.0
_STOP_TIMEOUT_S: Final = 5.0

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str


def assess_readiness(
    *,
    now: float,
    started_at: float,
    last_commit_at: float | None,
    warehouse_error: str | None,
    poll_interval: float,
    multiple: float = DEFAULT_READY_MULTIPLE,
    startup_grace: float = DEFAULT_STARTUP_GRACE,
) -> Readiness:
    """Is the sync doing its job?  All times in the same clock's seconds.

    ``warehouse_error`` is None when the warehouse answered, else why it did not.  A daemon in
    its first snapshot is ready while pages commit: the rule looks at commits, not at the
    phase.  A daemon that has not committed yet is ready during ``startup_grace`` after
    ``started_at`` (anchoring and the first page may take a while), not after.
    """
    if warehouse_error is not None:
        return Readiness(ready=False, reason=f"warehouse unavailable: {warehouse_error}")
    limit = multiple * poll_interval
    if last_commit_at is None:
        since_start = now - started_at
        if since_start <= startup_grace:
            return Readiness(ready=True, reason="starting: no page committed yet")
        return Readiness(
            ready=False,
            reason=f"no page committed in {since_start:.0f} s since start "
            f"(grace {startup_grace:.0f} s)",
        )
    age = now - last_commit_at
    if age <= limit:
        return Readiness(ready=True, reason=f"last page committed {max(age, 0.0):.0f} s ago")
    return Readiness(
        ready=False,
        reason=f"last page committed {age:.0f} s ago (limit {limit:.0f} s)",
    )


class ReadinessCheck:
    """``assess_readiness`` over live sources: a warehouse ping and the last commit time.

    ``ping`` raises when the warehouse does not answer (``Warehouse.ping``); only the
    exception's class is reported, since driver messages may name hosts and users.
    ``last_commit_at`` and ``clock`` must share a clock (``Metrics.last_commit_at`` and
    ``time.time``).
    """

    def __init__(
        self,
        *,
        ping: Callable[[], object],
        last_commit_at: Callable[[], float | None],
        poll_interval: float,
        multiple: float = DEFAULT_READY_MULTIPLE,
        startup_grace: float = DEFAULT_STARTUP_GRACE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ping = ping
        self._last_commit_at = last_commit_at
        self._poll_interval = poll_interval
        self._multiple = multiple
        self._startup_grace = startup_grace
        self._clock = clock
        self.started_at = clock()

    def __call__(self) -> Readiness:
        try:
            self._ping()
        except Exception as exc:  # noqa: BLE001 - any failure to answer means "not ready"
            warehouse_error: str | None = type(exc).__name__
        else:
            warehouse_error = None
        return assess_readiness(
            now=self._clock(),
            started_at=self.started_at,
            last_commit_at=self._last_commit_at(),
            warehouse_error=warehouse_error,
            poll_interval=self._poll_interval,
            multiple=self._multiple,
            startup_grace=self._startup_grace,
        )


def assess_merchants(
    *,
    now: float,
    held: Mapping[str, tuple[float, float | None]],
    warehouse_error: str | None,
    poll_interval: float,
    multiple: float = DEFAULT_READY_MULTIPLE,
    startup_grace: float = DEFAULT_STARTUP_GRACE,
) -> Readiness:
    """``assess_readiness`` for every merchant this process holds (merchant -> when it was
    taken, its last commit): ready when each one is.  Holding none is ready: the other
    replicas hold them all (an unheld merchant is an alert, RecordsyncMerchantNotHeld)."""
    if warehouse_error is not None:
        return Readiness(ready=False, reason=f"warehouse unavailable: {warehouse_error}")
    if not held:
        return Readiness(ready=True, reason="holds no merchant (the other replicas hold them)")
    verdicts = {
        merchant_id: assess_readiness(
            now=now,
            started_at=since,
            last_commit_at=last_commit,
            warehouse_error=None,
            poll_interval=poll_interval,
            multiple=multiple,
            startup_grace=startup_grace,
        )
        for merchant_id, (since, last_commit) in sorted(held.items())
    }
    lagging = [f"{merchant}: {v.reason}" for merchant, v in verdicts.items() if not v.ready]
    if lagging:
        return Readiness(ready=False, reason="; ".join(lagging))
    return Readiness(ready=True, reason=f"{len(verdicts)} merchants committing recently")


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


class HealthServer:
    """Serves the three endpoints on ``host:port`` from a daemon thread.

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
    ) -> None:
        self._host = host
        self._requested_port = port
        self._registry = registry
        self._readiness = readiness
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        """The port actually bound (the ephemeral one when 0 was asked for)."""
        if self._server is None:
            raise RuntimeError("the health server is not started")
        return int(self._server.server_address[1])

    def start(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            handler = _handler(self._registry, self._readiness)
            server_class = _IPv6Server if ":" in self._host else ThreadingHTTPServer
            try:
                server = server_class((self._host, self._requested_port), handler)
            except OSError as exc:
                raise ConfigurationError(
                    f"RECORDSYNC_HTTP_PORT: cannot listen on {self._host}:{self._requested_port}"
                    f" ({exc.strerror or type(exc).__name__})"
                ) from None
            server.daemon_threads = True
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name="health-http",
                daemon=True,
            )
            thread.start()
            self._server, self._thread = server, thread
        _log.info("http_listening", host=self._host, port=self.port)

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice, or before ``start``."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server, self._thread = None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(_STOP_TIMEOUT_S)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _handler(
    registry: CollectorRegistry, readiness: Callable[[], Readiness]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "recordsync"
        sys_version = ""

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/healthz":
                self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
            elif path == "/readyz":
                self._readyz()
            elif path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._send(HTTPStatus.OK, encoder(registry), content_type)
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

        def _readyz(self) -> None:
            try:
                result = readiness()
            except Exception as exc:  # noqa: BLE001 - a broken check means "not ready"
                result = Readiness(
                    ready=False, reason=f"readiness check failed: {type(exc).__name__}"
                )
            body = json.dumps({"ready": result.ready, "reason": result.reason}).encode() + b"\n"
            status = HTTPStatus.OK if result.ready else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, body, "application/json")

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
            # Probes hit these endpoints every few seconds: not worth a log line each.
            pass

    return Handler
