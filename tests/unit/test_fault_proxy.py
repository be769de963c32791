"""The fault proxy of the object-store tests (harness/fault_proxy.py) in front of the tests' S3
server: a window of a fault given to a random share of the requests (the request-by-request
faults are exercised by test_store_retry.py and test_log_store.py)."""

from __future__ import annotations

from harness.fault_proxy import SLOW_DOWN, FaultProxy
from harness.object_store import S3Server


def test_an_outage_of_a_fraction_gives_the_fault_to_that_share_of_the_requests(s3_server: S3Server) -> None:
    bucket = s3_server.bucket()
    with FaultProxy(s3_server.port, seed=7) as proxy:
        proxy.outage(SLOW_DOWN, 60, fraction=0.3)
        statuses = [s3_server.behind(proxy.port).put(bucket, f"key-{n}", b"x") for n in range(200)]
        proxy.clear()
        assert s3_server.behind(proxy.port).put(bucket, "after", b"x") == 200

    refused = statuses.count(503)
    assert refused + statuses.count(200) == 200, statuses
    assert 40 <= refused <= 80, refused  # 30% of 200: 60, drawn by a seeded generator
    assert len(proxy.faults(SLOW_DOWN)) == refused
    stored = {p.name for p in (s3_server.directory / "data" / bucket).iterdir()}
    assert len(stored - {"after"}) == statuses.count(200)  # a refused PUT never reached the server
