"""A warehouse outage while notifications arrive, over a real network path: the receiver
answers 503 with Retry-After while the warehouse cannot be reached, and stores the platform's
retry once it is back, losing nothing.

The outage is a TCP proxy between the warehouse and PostgreSQL that the test stops (dropping
every connection) and starts again on the same port: the database server itself, shared with
other tests, is never touched.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import suppress

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url
from support.dbfixtures import fresh_database
from support.round_event_requests import MERCHANT, SECRET, event_body, post_event

from recordsync.core.secret import Secret
from recordsync.service.ports.round_events.receiver import (
    EventsServer,
    RoundEventReceiver,
    asgi_app,
)
from recordsync.warehouse import Warehouse
from recordsync.warehouse.schema import round_events

pytestmark = pytest.mark.postgres


class Proxy:
    """Forwards 127.0.0.1:<port> to ``target``; ``down()`` closes everything, ``up()`` listens
    again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, []
        for sock in [listener, *sockets]:
            if sock is not None:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            with self._lock:
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def test_a_warehouse_outage_is_answered_503_and_the_retry_is_stored(tmp_path):
    with fresh_database("postgres", tmp_path) as url:
        direct = make_url(url)
        proxy = Proxy((direct.host or "127.0.0.1", direct.port or 5432))
        proxy.up()
        proxied = direct.set(host="127.0.0.1", port=proxy.port)
        warehouse = Warehouse.connect(proxied.render_as_string(hide_password=False))
        try:
            warehouse.migrate()
            receiver = RoundEventReceiver(
                secrets=lambda m: (Secret(SECRET),) if m == MERCHANT else None,
                store=lambda event: warehouse.events.record_round_event(event, received_by="r1"),
                wake=lambda _event: None,
            )
            server = EventsServer(asgi_app(receiver), host="127.0.0.1", port=0)
            with server, httpx.Client(base_url=f"http://127.0.0.1:{server.port}") as client:
                assert post_event(client, event_body("ev-1"), now=time.time()).status_code == 200
                proxy.down()
                refused = post_event(client, event_body("ev-2"), now=time.time())
                assert refused.status_code == 503
                assert refused.headers["retry-after"] == "5"
                assert refused.json()["error"]["code"] == "DEPENDENCY_UNAVAILABLE"
                proxy.up()
                retried = post_event(client, event_body("ev-2"), now=time.time())
                assert retried.status_code == 200, retried.text
            with warehouse.engine.connect() as conn:
                stored = conn.execute(select(round_events.c.event_id)).scalars().all()
            assert sorted(stored) == ["ev-1", "ev-2"]
        finally:
            proxy.down()
            warehouse.close()
