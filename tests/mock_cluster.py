"""librdkafka's mock cluster as a second Kafka-protocol broker for the tests.

librdkafka (bundled in the confluent-kafka wheel) implements an in-process Kafka cluster
(`rdkafka_mock.h`, a public test API). It is created here through ctypes on that library, so
topics can be created and deleted through the mock's C API: the mock implements no
CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords or DescribeGroups requests.

kafka-python 3 cannot bootstrap from the mock directly: it opens every connection with
ApiVersions v4 (v3 when pinned to brokers >= 2.4); the mock accepts ApiVersions up to v2 only
and answers UNSUPPORTED_VERSION in an encoding kafka-python cannot decode (the flexible array
count is written as the raw count byte), so kafka-python reconnects until its timeout. A proxy
in front of the mock broker therefore answers such requests by asking the mock with v2 and
re-encoding its answer as the version asked for; every other byte passes through unchanged.
The mock broker advertises the proxy's address, so every client connection goes through it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import glob
import os
import socket
import struct
import threading
import time
from collections.abc import Sequence

import pytest

from synclib.embedded.broker import LOOPBACK, TopicAdmin

NAME = "librdkafka-mock"
# Marks for the tests that need what the mock cannot do (conftest skips them on this broker).
NO_GROUP_OFFSET_LISTING = pytest.mark.unsupported_on(
    NAME, f"{NAME}: OffsetFetch of all of a group's partitions (null topic list) answers a null topic "
          "array, which kafka-python cannot read")
NO_CREATE_TOPICS = pytest.mark.unsupported_on(
    NAME, f"{NAME}: no CreateTopics/DeleteTopics requests (the tests create topics through its C API)")
CONTROL_BATCHES_WITHOUT_CRC = pytest.mark.unsupported_on(
    NAME, f"{NAME}: writes transaction control batches with CRC 0 (rdkafka_mock.c: the mock does not validate "
          "CRCs), which kafka-python's CRC check rejects")

# What the mock's Produce responses give as LogAppendTime, whatever the record's timestamp
# (rdkafka_mock_handlers.c); librdkafka's delivery reports then carry it.
FAKE_LOG_APPEND_TIME_MS = 1234

_API_VERSIONS = 18
_UNKNOWN_TOPIC_OR_PART = 3
_RD_KAFKA_PRODUCER = 0


def _load_librdkafka() -> ctypes.CDLL:
    """librdkafka as bundled by confluent-kafka (the same build the tests produce with)."""
    import confluent_kafka

    libs = os.path.join(os.path.dirname(os.path.dirname(confluent_kafka.__file__)), "confluent_kafka.libs")
    bundled = sorted(glob.glob(os.path.join(libs, "librdkafka*.so*")))
    path = bundled[0] if bundled else ctypes.util.find_library("rdkafka")
    if path is None:
        raise RuntimeError(f"no librdkafka shared library in {libs} or on the library path")
    lib = ctypes.CDLL(path)
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_broker_set_host_port.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p,
                                                       ctypes.c_int]
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_topic_delete.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    return lib


def _read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed Kafka frame (without its size), or None when the peer closed."""
    header = _read_exactly(sock, 4)
    return None if header is None else _read_exactly(sock, struct.unpack(">i", header)[0])


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _as_api_versions_v2(request: bytes) -> bytes:
    """A flexible (v3+) ApiVersions request as v2: the same header without tagged fields, empty body."""
    _, _, correlation_id = struct.unpack(">hhi", request[:8])
    client_id_length = struct.unpack(">h", request[8:10])[0]
    return struct.pack(">hhi", _API_VERSIONS, 2, correlation_id) + request[8:10 + max(client_id_length, 0)]


def _as_flexible_response(response: bytes) -> bytes:
    """An ApiVersions v2 response re-encoded as v3/v4 (compact array, tagged fields)."""
    error_code, count = struct.unpack(">hi", response[4:10])
    keys = response[10:10 + 6 * count]
    throttle_ms = response[10 + 6 * count:14 + 6 * count]
    entries = b"".join(keys[i:i + 6] + b"\0" for i in range(0, len(keys), 6))
    return response[:4] + struct.pack(">h", error_code) + _uvarint(count + 1) + entries + throttle_ms + b"\0"


class _ApiVersionsProxy:
    """Forwards 127.0.0.1:`port` to the mock broker, translating flexible ApiVersions requests."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._server = socket.create_server((LOOPBACK, 0))
        self.port: int = self._server.getsockname()[1]
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="mock-proxy", daemon=True).start()

    def close(self) -> None:
        self._server.close()
        with self._lock:
            connections, self._connections = self._connections, []
        for sock in connections:
            _shutdown(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._upstream)
            except OSError:
                _shutdown(client)
                continue
            with self._lock:
                self._connections += [client, upstream]
            translated: set[int] = set()
            threading.Thread(target=self._requests, args=(client, upstream, translated), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, translated), daemon=True).start()

    @staticmethod
    def _requests(client: socket.socket, upstream: socket.socket, translated: set[int]) -> None:
        while (frame := _read_frame(client)) is not None:
            api_key, version, correlation_id = struct.unpack(">hhi", frame[:8])
            if api_key == _API_VERSIONS and version >= 3:
                translated.add(correlation_id)
                frame = _as_api_versions_v2(frame)
            try:
                upstream.sendall(struct.pack(">i", len(frame)) + frame)
            except OSError:
                break
        _shutdown(upstream)

    @staticmethod
    def _responses(upstream: socket.socket, client: socket.socket, translated: set[int]) -> None:
        while (frame := _read_frame(upstream)) is not None:
            correlation_id = struct.unpack(">i", frame[:4])[0]
            if correlation_id in translated:
                translated.discard(correlation_id)
                frame = _as_flexible_response(frame)
            try:
                client.sendall(struct.pack(">i", len(frame)) + frame)
            except OSError:
                break
        _shutdown(client)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class MockCluster:
    """A one-broker librdkafka mock cluster behind its ApiVersions proxy. Use as a context manager."""

    BROKER_ID = 1

    def __init__(self) -> None:
        self._lib = _load_librdkafka()
        errstr = ctypes.create_string_buffer(512)
        self._handle = self._lib.rd_kafka_new(_RD_KAFKA_PRODUCER, self._lib.rd_kafka_conf_new(), errstr,
                                              len(errstr))
        if not self._handle:
            raise RuntimeError(f"librdkafka: {errstr.value.decode()}")
        self._cluster = self._lib.rd_kafka_mock_cluster_new(self._handle, 1)
        if not self._cluster:
            self._lib.rd_kafka_destroy(self._handle)
            raise RuntimeError("librdkafka could not create a mock cluster")
        host, port = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode().rsplit(":", 1)
        self._proxy = _ApiVersionsProxy((host, int(port)))
        self._lib.rd_kafka_mock_broker_set_host_port(self._cluster, self.BROKER_ID, LOOPBACK.encode(),
                                                     self._proxy.port)

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self._proxy.port}"

    def create_topic(self, name: str, partitions: int) -> None:
        err = self._lib.rd_kafka_mock_topic_create(self._cluster, name.encode(), partitions, 1)
        if err:
            raise RuntimeError(f"mock cluster: creating topic {name!r} failed with librdkafka error {err}")

    def delete_topic(self, name: str) -> None:
        """Delete `name` with its data; a topic that is already gone is fine."""
        err = self._lib.rd_kafka_mock_topic_delete(self._cluster, name.encode())
        if err and err != _UNKNOWN_TOPIC_OR_PART:
            raise RuntimeError(f"mock cluster: deleting topic {name!r} failed with librdkafka error {err}")

    def close(self) -> None:
        self._proxy.close()
        self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
        self._lib.rd_kafka_destroy(self._handle)

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class MockTopicAdmin(TopicAdmin):
    """TopicAdmin for the mock cluster: topics change through its C API, visible through Metadata."""

    def __init__(self, cluster: MockCluster) -> None:
        super().__init__(cluster.bootstrap_servers)
        self._cluster = cluster

    def create(self, name: str, partitions: int = 1, timeout_s: float = 30.0) -> None:
        self._cluster.create_topic(name, partitions)
        self._wait(lambda: name in self.list(), f"topic {name} to appear", time.monotonic() + timeout_s)

    def delete(self, names: Sequence[str], timeout_s: float = 30.0) -> None:
        for name in names:
            self._cluster.delete_topic(name)
        self._wait(lambda: not set(names) & set(self.list()), f"topics {list(names)} to go away",
                   time.monotonic() + timeout_s)
