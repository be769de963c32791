"""A TCP proxy on loopback that holds each HTTP request for a fixed delay before passing it on:
the test S3 server answers in about a millisecond, a real bucket in tens (`object_store_cost`
measures the one-row floor behind it).

A request is what a client sends after the server's previous answer on that connection (or on a
new connection); its first bytes wait `delay_s`, the rest of it and every answer pass at once, so
each request costs one delay, as a round trip to a distant server does.

It runs in a process of its own (`DelayProxyProcess`, `python -m harness.delay_proxy`):
deltalake keeps Python's GIL while it waits for an answer, so a proxy thread in the process that
commits could never answer it. The process stops when told, when the process that started it dies
(tied to it like the brokers), and after `--lifetime-s` at the latest.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness.loopback_proxy import LoopbackProxy
from synclib.embedded.broker import LOOPBACK, free_port, terminate, tied_to_this_process, wait_for_port

_CHUNK = 1 << 16


class DelayProxy(LoopbackProxy):
    """`127.0.0.1:<port>` forwarding to `127.0.0.1:<target_port>`, each request held `delay_s`."""

    name = "delay-proxy"

    def __init__(self, target_port: int, delay_s: float, port: int = 0) -> None:
        super().__init__(target_port, port)
        self.delay_s = delay_s

    def serve(self, client: socket.socket) -> None:
        server = self.connect(30)
        for sock in (client, server):
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answered = threading.Event()
        answered.set()  # a new connection's first bytes are a request
        threading.Thread(target=self._pump, args=(server, client, answered, False), daemon=True).start()
        self._pump(client, server, answered, True)

    def _pump(self, source: socket.socket, target: socket.socket, answered: threading.Event,
              requests: bool) -> None:
        """Copy `source` to `target`; on the request side, hold each request's first bytes."""
        try:
            while data := source.recv(_CHUNK):
                if requests and answered.is_set():
                    answered.clear()
                    time.sleep(self.delay_s)  # the simulated round trip, not a wait for a condition
                elif not requests:
                    answered.set()
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.forget(source)


class DelayProxyProcess:
    """A `DelayProxy` in a process of its own, on a free loopback port (`port`)."""

    def __init__(self, target_port: int, delay_s: float, lifetime_s: float = 4 * 3600) -> None:
        self.port = free_port()
        self._command = [sys.executable, "-m", "harness.delay_proxy", "--port", str(self.port),
                         "--target-port", str(target_port), "--delay-ms", f"{delay_s * 1000:g}",
                         "--lifetime-s", f"{lifetime_s:g}"]
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> DelayProxyProcess:
        self._process = subprocess.Popen(tied_to_this_process(self._command), cwd=Path(__file__).parents[1])
        try:
            wait_for_port(LOOPBACK, self.port, 30)
        except TimeoutError:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._process is not None:
            terminate(self._process, 10)
            self._process = None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--lifetime-s", type=float, required=True, help="stop after this long at the latest")
    args = parser.parse_args(argv)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    with DelayProxy(args.target_port, args.delay_ms / 1000, args.port):
        stopping.wait(args.lifetime_s)


if __name__ == "__main__":
    main()
