"""An HTTP proxy on loopback that injects S3's failure modes into the requests it passes to the
tests' S3 server (`harness.object_store`), request by request:

- `SLOW_DOWN`: 503 with S3's `SlowDown` error body, the request never reaches the server;
- `INTERNAL`: 500 `InternalError`, likewise;
- `RESET_BEFORE`: the connection is reset before the request reaches the server;
- `RESET_AFTER`: the request is served, then the connection is reset before the answer reaches
  the client (the request took effect, its answer is lost: what any client timeout looks like);
- `DELAY`: the request waits `delay_s` before it is passed on.

`inject(fault, count, method, key)` arms a fault for the next `count` requests whose method and
bucket/key match; `outage(fault, seconds)` gives every request the fault for that long, and
`outage(fault, seconds, fraction=0.3)` a random 30% of them (`seed` makes the draw repeatable). Each
injected fault is logged (`injected`). HTTP/1.1 only, one request at a time per connection (as
every S3 client sends them); `Expect: 100-continue` is answered by the proxy itself.

It runs as threads of the test process, so it serves clients in other processes (Spark's JVM, a
spark-submit job) and clients that release the GIL while they wait (obstore, pyarrow). Bounded:
each connection's socket times out after `IDLE_S`; `stop` ends it.
"""

from __future__ import annotations

import contextlib
import random
import re
import socket
import struct
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from harness.loopback_proxy import LoopbackProxy

SLOW_DOWN, INTERNAL, RESET_BEFORE, RESET_AFTER, DELAY = "slow-down", "internal", "reset-before", "reset-after", "delay"
FAULTS = (SLOW_DOWN, INTERNAL, RESET_BEFORE, RESET_AFTER, DELAY)
IDLE_S = 120.0
_ERRORS = {SLOW_DOWN: (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
           INTERNAL: (500, "Internal Server Error", "InternalError", "We encountered an internal error.")}


@dataclass
class _Rule:
    fault: str
    count: int | None  # None: until `until`
    method: str | None
    key: re.Pattern[str] | None
    until: float = float("inf")  # monotonic
    fraction: float = 1.0  # of the matching requests, drawn at random

    def matches(self, method: str, key: str, draw: float) -> bool:
        return ((self.method is None or self.method == method) and (self.key is None or bool(self.key.search(key)))
                and time.monotonic() < self.until and (self.count is None or self.count > 0) and draw < self.fraction)


@dataclass
class _Connection:
    sock: socket.socket
    buffer: bytes = b""

    def fill(self) -> bool:
        data = self.sock.recv(1 << 16)
        self.buffer += data
        return bool(data)

    def head(self) -> bytes | None:
        """The next message's head (up to the blank line), None at a clean end of the stream."""
        while b"\r\n\r\n" not in self.buffer:
            if not self.fill():
                if self.buffer:
                    raise ConnectionError("the stream ended inside a message head")
                return None
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self.fill():
                raise ConnectionError("the stream ended inside a message body")
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if not self.fill():
                raise ConnectionError("the stream ended inside a chunk")
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line + b"\r\n"

    def body(self, headers: dict[str, str], has_body: bool = True) -> bytes:
        """The message's body as sent (chunked bodies with their framing)."""
        if not has_body:
            return b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            out = b""
            while True:
                size_line = self.line()
                out += size_line
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (trailer := self.line()) != b"\r\n":
                        out += trailer
                    return out + b"\r\n"
                out += self.exactly(size + 2)
        return self.exactly(int(headers.get("content-length", "0")))


def _headers(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def _reset(sock: socket.socket) -> None:
    """Close `sock` with a TCP reset (SO_LINGER 0), as a dropped connection reaches a client."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class FaultProxy(LoopbackProxy):
    """`127.0.0.1:<port>` in front of `127.0.0.1:<target_port>` (use with `S3Server.behind(port)`)."""

    name = "fault-proxy"

    def __init__(self, target_port: int, delay_s: float = 2.0, port: int = 0, seed: int | None = None) -> None:
        super().__init__(target_port, port)
        self.delay_s = delay_s
        self._random = random.Random(seed)
        self.injected: list[tuple[str, str, str]] = []  # (fault, method, bucket/key)
        self._rules: list[_Rule] = []

    def inject(self, fault: str, count: int = 1, method: str | None = None, key: str | None = None) -> None:
        """Give `fault` to the next `count` requests of `method` (any) whose bucket/key matches the
        regex `key` (any)."""
        assert fault in FAULTS, fault
        with self._lock:
            self._rules.append(_Rule(fault, count, method, None if key is None else re.compile(key)))

    def outage(self, fault: str, seconds: float, method: str | None = None, key: str | None = None,
               fraction: float = 1.0) -> None:
        """Give `fault` to every matching request (a random `fraction` of them) for the next `seconds`."""
        assert fault in FAULTS, fault
        with self._lock:
            self._rules.append(_Rule(fault, None, method, None if key is None else re.compile(key),
                                     time.monotonic() + seconds, fraction))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def faults(self, fault: str | None = None) -> list[tuple[str, str, str]]:
        with self._lock:
            return [entry for entry in self.injected if fault is None or entry[0] == fault]

    def _take(self, method: str, key: str) -> str | None:
        with self._lock:
            draw = self._random.random()
            for rule in self._rules:
                if rule.matches(method, key, draw):
                    if rule.count is not None:
                        rule.count -= 1
                    self.injected.append((rule.fault, method, key))
                    return rule.fault
        return None

    def serve(self, client_sock: socket.socket) -> None:
        """Pass the connection's requests one at a time, each to a server connection of its own kept
        while the client's is."""
        client_sock.settimeout(IDLE_S)
        client = _Connection(client_sock)
        server: _Connection | None = None
        try:
            while (head := client.head()) is not None:
                request_line, headers = _headers(head)
                method, target = request_line.split(" ")[:2]
                key = unquote(urlsplit(target).path).strip("/")
                fault = self._take(method, key)
                if fault == RESET_BEFORE:
                    _reset(client_sock)
                    return
                if headers.get("expect", "").lower() == "100-continue":
                    client_sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = client.body(headers)
                if fault in _ERRORS:
                    status, reason, code, message = _ERRORS[fault]
                    text = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
                            f'</Message><Resource>/{key}</Resource><RequestId>fault-proxy</RequestId></Error>').encode()
                    client_sock.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
                                        f"Content-Length: {len(text)}\r\n\r\n".encode()
                                        + (b"" if method == "HEAD" else text))  # a HEAD's answer has no body
                    continue
                if fault == DELAY:
                    time.sleep(self.delay_s)  # the fault itself: a slow server, not a wait for a condition
                try:  # the server closes an idle connection (Jetty: after 30 s): then once more on a new one
                    if server is None:
                        raise ConnectionError("no server connection yet")
                    server.sock.sendall(head + body)
                    answer, closing = self._answer(server, method)
                except (OSError, ConnectionError):
                    if server is not None:
                        server.sock.close()
                    server = self._connect()
                    server.sock.sendall(head + body)
                    answer, closing = self._answer(server, method)
                if closing:  # the server closes its side after this answer: the next request opens another
                    server.sock.close()
                    server = None
                if fault == RESET_AFTER:
                    _reset(client_sock)
                    return
                client_sock.sendall(answer)
        except (OSError, ConnectionError, ValueError):
            pass
        finally:
            self.forget(client_sock)
            if server is not None:
                self.forget(server.sock)

    def _connect(self) -> _Connection:
        return _Connection(self.connect(IDLE_S))

    @staticmethod
    def _answer(server: _Connection, method: str) -> tuple[bytes, bool]:
        """The server's final answer to one request, whole (interim 1xx answers dropped), and whether
        the server closes the connection after it."""
        while True:
            head = server.head()
            if head is None:
                raise ConnectionError("the server closed the connection")
            status_line, headers = _headers(head)
            status = int(status_line.split(" ")[1])
            if 100 <= status < 200:
                continue
            body = server.body(headers, has_body=method != "HEAD" and status not in (204, 304))
            return head + body, headers.get("connection", "").lower() == "close"
