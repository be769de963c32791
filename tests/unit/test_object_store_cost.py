"""The object-store benchmark's pure parts: a logged S3 request's kind and owner
(benchmarks/object_store.py) and what requests cost per day (benchmarks/object_store_cost.py)."""

from __future__ import annotations

import pytest

from benchmarks.object_store import (
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
from benchmarks.object_store_cost import cost_per_day, dollars, tally

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
