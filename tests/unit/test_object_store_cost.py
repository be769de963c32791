"""The object-store benchmark's parts: a logged S3 request's kind and owner
(harness/object_store.py), what requests cost per day and which are on a batch's path to its
Delta commit (benchmarks/object_store_cost.py), and the proxy that delays each request
(harness/delay_proxy.py)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from benchmarks.object_store_cost import cost_per_day, dollars, tally, to_commit
from harness.delay_proxy import DelayProxy
from harness.object_store import (
    DATA_FILES,
    DELTA_LOG,
    OTHER,
    SPARK_CHECKPOINT,
    SYNCLIB_FILES,
    bucket_key,
    kind,
    owner,
    parse_request,
)

HOST = "http://127.0.0.1:4000"
TABLE, CHECKPOINT = "b/cost/table", "b/cost/checkpoint"


@pytest.mark.parametrize(("method", "uri", "expected"), [
    ("GET", "/b/cost/table/_delta_log/_last_checkpoint", ("GET", DELTA_LOG)),
    ("GET", "/b?list-type=2&prefix=cost%2Ftable%2F_delta_log%2F&start-after=cost%2Ftable%2F_delta_log%2F0",
     ("LIST", DELTA_LOG)),
    ("PUT", "/b/cost/table/_delta_log/00000000000000000001.json", ("PUT", DELTA_LOG)),
    ("PUT", "/b/cost/table/date%3D2026-11-26/part-00000-a.zstd.parquet", ("PUT", DATA_FILES)),
    ("PUT", "/b/cost/table/part-0.parquet?partNumber=1&uploadId=u1", ("PUT", DATA_FILES)),
    ("POST", "/b/cost/table/part-0.parquet?uploads", ("POST", DATA_FILES)),
    ("POST", "/b/cost/table/part-0.parquet?uploadId=u1", ("POST", DATA_FILES)),
    ("HEAD", "/b/cost/checkpoint/offsets/7", ("HEAD", SPARK_CHECKPOINT)),
    ("GET", "/b?list-type=2&delimiter=%2F&max-keys=1&prefix=cost%2Fcheckpoint%2Fcommits%2F7%2F",
     ("LIST", SPARK_CHECKPOINT)),
    ("HEAD", "/b/cost/checkpoint", ("HEAD", SPARK_CHECKPOINT)),
    ("PUT", "/b/cost/checkpoint/metadata", ("PUT", SPARK_CHECKPOINT)),
    ("PUT", "/b/cost/checkpoint/.metadata.124b.tmp", ("PUT", SPARK_CHECKPOINT)),
    ("PUT", "/b/cost/checkpoint/synclib/", ("PUT", SYNCLIB_FILES)),
    ("POST", "/b/cost/checkpoint/synclib/.initial-offsets.json-c5.tmp?uploads", ("POST", SYNCLIB_FILES)),
    ("GET", "/b/cost/checkpoint/synclib/initial-offsets.json", ("GET", SYNCLIB_FILES)),
    ("DELETE", "/b/cost/checkpoint/commits/.7.crc", ("DELETE", SPARK_CHECKPOINT)),
    ("POST", "/b?delete", ("DELETE", OTHER)),
    ("HEAD", "/b", ("HEAD", OTHER)),
    ("GET", "/b", ("LIST", OTHER)),
])
def test_a_logged_request_has_a_kind_and_an_owner(method: str, uri: str, expected: tuple[str, str]) -> None:
    for logged in (uri, HOST + uri):  # S3Proxy logs the whole URL
        request = parse_request(method, logged)
        assert (kind(request), owner(request, TABLE, CHECKPOINT)) == expected


def test_a_table_whose_name_extends_another_is_not_its_data() -> None:
    request = parse_request("PUT", "/b/cost/table2/part-0.parquet")
    assert owner(request, TABLE, CHECKPOINT) == OTHER
    assert bucket_key("s3a://b/cost/table/") == TABLE


def test_requests_cost_what_aws_charges_per_kind() -> None:
    requests = [parse_request("PUT", "/b/cost/table/_delta_log/1.json"),
                parse_request("GET", "/b/cost/table/_delta_log/1.json"),
                parse_request("HEAD", "/b/cost/checkpoint/offsets/1")]
    counts = tally(requests, TABLE, CHECKPOINT)
    assert counts == {DELTA_LOG: {"PUT": 1, "GET": 1}, SPARK_CHECKPOINT: {"HEAD": 1}}
    assert tally(requests, TABLE, CHECKPOINT, as_owner="maintenance") == {"maintenance": {"PUT": 1, "GET": 1,
                                                                                         "HEAD": 1}}
    assert dollars({"x": {"PUT": 1000, "LIST": 1000, "GET": 1000, "HEAD": 1000, "DELETE": 1000}}) == \
        pytest.approx(0.005 + 0.005 + 0.0004 + 0.0004)


def test_cost_per_day_of_a_busy_and_an_idle_job() -> None:
    batch = {"x": {"PUT": 10.0}}  # $0.00005 a batch
    day = cost_per_day(batch, {}, {"m": {"GET": 1000.0}}, {"m": {"LIST": 1.0}}, batches_per_s=4.0,
                       maintenance_interval_s=10.0)
    assert day["batches_per_day"] == 345_600 and day["passes_per_day"] == 8_640
    assert day["busy_usd"] == pytest.approx(345_600 * 0.00005 + 8_640 * 0.0004, abs=0.01)
    assert day["idle_usd"] == pytest.approx(8_640 * 0.000005, abs=0.01)


def test_a_batchs_path_ends_with_the_put_of_its_delta_commit() -> None:
    step = [parse_request(m, u) for m, u in [
        ("PUT", "/b/cost/checkpoint/offsets/7"), ("PUT", "/b/cost/table/part-0.parquet"),
        ("HEAD", "/b/cost/table/_delta_log/00000000000000000006.json"),
        ("PUT", "/b/cost/table/_delta_log/00000000000000000007.json"), ("PUT", "/b/cost/checkpoint/commits/7")]]
    assert to_commit(step, TABLE, CHECKPOINT) == {SPARK_CHECKPOINT: {"PUT": 1}, DATA_FILES: {"PUT": 1},
                                                  DELTA_LOG: {"HEAD": 1, "PUT": 1}}


def test_the_proxy_holds_each_request_once_and_passes_the_answers() -> None:
    """Each request (what a client sends after the previous answer) waits the delay once."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        connection, _ = server.accept()
        with connection:
            while data := connection.recv(1024):
                connection.sendall(b"re: " + data)

    threading.Thread(target=answer, daemon=True).start()
    with DelayProxy(server.getsockname()[1], 0.2) as proxy, \
            socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
        for request in (b"first", b"second"):
            started = time.monotonic()
            client.sendall(request)
            assert client.recv(1024) == b"re: " + request
            assert time.monotonic() - started >= 0.2
    server.close()
