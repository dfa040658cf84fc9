"""A fault-injecting TCP proxy for the tests: put it between a process and its database to
cut the network without a reset (a blackhole), slow it down, or reset every connection.

A blackhole is what a cut cable, a dead switch or a frozen VM look like from either end:
the connections stay open, no byte moves either way, and no RST arrives; each side learns of
it only from its own timeouts.  Bytes sent meanwhile wait in the proxy (and in the kernels'
buffers behind it); ``heal`` lets them flow on, as a network that comes back would.

``freeze_when(*patterns)`` turns the blackhole on the moment a chunk sent by the client that
contains one of ``patterns`` has been forwarded: a cut landing inside a transaction, right
after a statement of it reached the server (``FOR SHARE`` of the fence check, say), every
time.  A statement the driver has prepared goes by name, not by text (psycopg prepares one
run five times on a connection): match one that is never prepared too (``COPY``).

    with FaultProxy(("127.0.0.1", 5432)) as proxy:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/test"
        proxy.blackhole(); ...; proxy.heal()
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from types import TracebackType
from typing import Self

_CHUNK = 65536
_POLL = 0.05


class FaultProxy:
    def __init__(self, target: tuple[str, int], *, host: str = "127.0.0.1") -> None:
        self.target = target
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(_POLL)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._latency = 0.0
        self._freeze_patterns: tuple[bytes, ...] = ()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = threading.Event()
        self.frozen_at: float | None = None  # time.monotonic() of the last freeze_when hit
        self._acceptor = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._acceptor.start()

    # -- faults ---------------------------------------------------------------------------

    def blackhole(self) -> None:
        """Stop every byte, both ways, on every connection (new ones too); no reset."""
        self._flowing.clear()

    def heal(self) -> None:
        """Let the bytes flow again."""
        with self._lock:
            self._freeze_patterns = ()
        self._flowing.set()

    @property
    def cut(self) -> bool:
        return not self._flowing.is_set()

    def latency(self, seconds: float) -> None:
        """Hold every chunk this long before forwarding it."""
        self._latency = max(seconds, 0.0)

    def freeze_when(self, *patterns: bytes) -> None:
        """Blackhole right after forwarding a client chunk containing one of ``patterns``
        (once)."""
        with self._lock:
            self._freeze_patterns = patterns

    def reset_all(self) -> None:
        """Close every connection with a reset (RST), as a restarted middlebox would."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                _reset(sock)

    # -- life -----------------------------------------------------------------------------

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self._acceptor.join(5)
        self._listener.close()
        self.reset_all()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- forwarding -----------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _address = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        # A connection opened during a cut hangs like the rest: no SYN-ACK from beyond.
        while not self._flowing.wait(_POLL):
            if self._closed.is_set():
                _reset(client)
                return
        try:
            server = socket.create_connection(self.target, timeout=10)
        except OSError:
            _reset(client)
            return
        for sock in (client, server):
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._pairs.append((client, server))
        threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while not self._closed.is_set():
                if not self._flowing.is_set():
                    self._flowing.wait(_POLL)
                    continue  # read nothing: the bytes wait in the kernel, as on a cut link
                readable, _, _ = select.select([source], [], [], _POLL)
                if not readable:
                    continue
                data = source.recv(_CHUNK)
                if not data:
                    break
                if self._latency:
                    time.sleep(self._latency)
                self._flowing.wait()  # a cut that began meanwhile holds this chunk too
                if from_client:
                    # Decided before the chunk goes on: once it is sent, its answer may
                    # come back and pass the other pump before a freeze decided after.
                    self._maybe_freeze(data)
                sink.sendall(data)
        except (OSError, ValueError):  # reset or closed meanwhile (a closed socket's fd is -1)
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def _maybe_freeze(self, data: bytes) -> None:
        with self._lock:
            if not any(pattern in data for pattern in self._freeze_patterns):
                return
            self._freeze_patterns = ()
        self.frozen_at = time.monotonic()
        self._flowing.clear()


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN (SO_LINGER with a zero timeout)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()
