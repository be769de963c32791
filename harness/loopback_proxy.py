"""A TCP proxy's plumbing on loopback, shared by the tests' proxies in front of the S3 server
(`harness.delay_proxy`, `harness.fault_proxy`): a listening socket on a free port, a thread that
accepts connections and hands each to `serve` on a thread of its own, and `stop`, which closes
the listener and every socket still open. Subclasses say what a connection does."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Self

from synclib.embedded.broker import LOOPBACK

_ACCEPT_POLL_S = 0.2  # how soon `stop` is noticed by the accepting thread


class LoopbackProxy:
    """`127.0.0.1:<port>` (a free port unless given) in front of `127.0.0.1:<target_port>`."""

    name = "loopback-proxy"

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target_port = target_port
        self._listener = socket.create_server((LOOPBACK, port))
        self._listener.settimeout(_ACCEPT_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, name=self.name, daemon=True)

    def start(self) -> Self:
        self._acceptor.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._acceptor.join(timeout_s)
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def serve(self, client: socket.socket) -> None:
        """Handle one accepted connection (on a thread of its own)."""
        raise NotImplementedError

    def connect(self, timeout_s: float) -> socket.socket:
        """A new connection to the target, closed by `stop` if still open."""
        return self.track(socket.create_connection((LOOPBACK, self.target_port), timeout=timeout_s))

    def track(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.add(sock)
        return sock

    def forget(self, sock: socket.socket) -> None:
        """Close `sock` (errors ignored) and stop tracking it."""
        with contextlib.suppress(OSError):
            sock.close()
        with self._lock:
            self._sockets.discard(sock)

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.track(client)
            threading.Thread(target=self.serve, args=(client,), name=f"{self.name}-connection", daemon=True).start()
