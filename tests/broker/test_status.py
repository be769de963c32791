"""`python -m synclib status`: per-partition state from the Delta table and Kafka, without Spark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, write_deltalake

from harness.object_store import S3Server
from synclib.app import status
from synclib.delta.commits import commit_metadata
from synclib.delta.table import table_summary
from synclib.embedded.broker import free_port
from synclib.exit_codes import ExitCode
from synclib.settings import load_config
from synclib.settings.storage import S3Config
from tests import mock_cluster
from tests.forwarder_runs import ROOT, commit_group, run_status, start_forwarder, write_config
from tests.support import produce_values, publish_commit, wait_until

NO_PYSPARK = ("import sys; from synclib.__main__ import main; rc = main(sys.argv[1:]); "
              "leaked = sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'); "
              "assert not leaked, f'status imported {leaked}'; sys.exit(rc)")


def status_without_spark(*args: str) -> subprocess.CompletedProcess[str]:
    """The status command in a fresh interpreter that fails if anything imported pyspark."""
    return subprocess.run([sys.executable, "-c", NO_PYSPARK, "status", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def delta_table_at(location: str, offsets: dict[str, dict[str, int]],
                   storage_options: dict[str, str] | None = None) -> None:
    """A table whose latest synclib commit recorded `offsets` (as the sink writes them)."""
    write_deltalake(location, pa.table({"offset": pa.array([0], pa.int64())}), storage_options=storage_options,
                    commit_properties=CommitProperties(
                        custom_metadata=commit_metadata("synclib-test", 0, json.dumps(offsets))))


def by_partition(report: dict) -> dict[int, dict]:
    return {p["partition"]: p for p in report["partitions"]}


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_status_from_the_table_and_the_commit_log(storage, bootstrap_servers, producer, new_topic, tmp_path,
                                                  request):
    events, log = new_topic("events", 4), new_topic("commit-log")
    for partition in range(4):
        produce_values(producer, events, partition, 10)
    leaders = {"leader-a": {0: 8, 1: 6, 2: 5, 3: 4}, "leader-b": {0: 6, 1: 7, 2: 5}}
    for group, committed in leaders.items():
        for partition, offset in committed.items():
            publish_commit(producer, log, group, events, partition, offset)
    table, overrides = str(tmp_path / "fwd" / "table"), []
    if storage == "s3":  # the job's storage settings reach delta-rs in the status command too
        server: S3Server = request.getfixturevalue("s3_server")
        table = f"s3://{server.bucket()}/fwd/table"
        settings = S3Config(**server.storage_settings())
        overrides = ["--set", f"sink.path={table}", *(
            arg for key, value in server.storage_settings().items() for arg in ("--set", f"storage.s3.{key}={value}"))]
        delta_table_at(table, {events: {"0": 3, "1": 6, "2": 7}}, settings.environment({}))
    else:
        delta_table_at(table, {events: {"0": 3, "1": 6, "2": 7}})
    config = write_config(tmp_path, "fwd", bootstrap_servers, {
        "subscribe": events, "commit_log_topic": log, "commit_groups": list(leaders)})

    run = status_without_spark("--config", str(config), "--json", *overrides)

    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["groups"] == ["leader-a", "leader-b"]
    assert report["table"]["version"] == 0
    got = {p: (s["state"], s["follower_offset"], s["leader_offset"], s["leader_offsets"],
               s["high_watermark"], s["lag"]) for p, s in by_partition(report).items()}
    assert got == {
        0: ("LOCAL_BEHIND", 3, 6, {"leader-a": 8, "leader-b": 6}, 10, 7),
        1: ("SYNCHRONIZED", 6, 6, {"leader-a": 6, "leader-b": 7}, 10, 4),
        2: ("REMOTE_BEHIND", 7, 5, {"leader-a": 5, "leader-b": 5}, 10, 3),
        3: ("UNKNOWN", None, None, {"leader-a": 4, "leader-b": None}, 10, None),
    }
    ages = [s["seconds_since_leader_commit"] for s in report["partitions"]]
    assert all(0 <= age < 120 for age in ages[:3]) and ages[3] is None

    text = status_without_spark("--config", str(config), *overrides)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[2].split() == ["topic", "partition", "state", "follower", "leader", "leader-a", "leader",
                                "leader-b", "high", "watermark", "lag", "since", "leader", "commit", "(s)"]
    assert lines[3].split()[:8] == [events, "0", "LOCAL_BEHIND", "3", "8", "6", "10", "7"]
    assert lines[6].split()[:8] == [events, "3", "UNKNOWN", "-", "4", "-", "10", "-"]
    if storage == "s3":
        secret = str(server.storage_settings()["secret_access_key"])
        assert secret not in run.stdout + run.stderr + text.stdout + text.stderr
        refused = status_without_spark("--config", str(config), *overrides,
                                       "--set", "storage.s3.secret_access_key=not-the-secret")
        assert refused.returncode == ExitCode.FAILED and not refused.stdout, refused
        assert len(refused.stderr.splitlines()) == 1 and table in refused.stderr, refused.stderr


@mock_cluster.NO_GROUP_OFFSET_LISTING
def test_status_with_remote_offsets_group(bootstrap_servers, producer, new_topic, tmp_path):
    events = new_topic("events", 2)
    produce_values(producer, events, 0, 5)
    produce_values(producer, events, 1, 5)
    leader = f"leader-{os.getpid()}-{time.monotonic_ns()}"
    commit_group(bootstrap_servers, leader, events, {0: 4, 1: 2})
    config = write_config(tmp_path, "fwd", bootstrap_servers, {
        "subscribe": events, "remote_offsets": "group", "commit_groups": [leader]})

    report = status.collect(load_config(config), bootstrap_servers, timeout_s=30).to_json()

    assert report["remote_offsets"] == "group" and report["table"] is None
    got = {p: (s["state"], s["leader_offsets"], s["high_watermark"], s["seconds_since_leader_commit"])
           for p, s in by_partition(report).items()}
    assert got == {0: ("UNKNOWN", {leader: 4}, 5, None), 1: ("UNKNOWN", {leader: 2}, 5, None)}


def test_embedded_broker_address_is_advertised_while_the_job_runs(tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    with pytest.raises(status.StatusError, match="embedded forwarder is not running"):
        status.embedded_bootstrap(checkpoint)
    with status.advertise_embedded_broker(checkpoint, "127.0.0.1:4242") as path:
        assert status.embedded_bootstrap(checkpoint) == "127.0.0.1:4242"
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
        advertised = json.loads(Path(path).read_text())
        Path(path).write_text(json.dumps({**advertised, "pid": int(dead.stdout)}))
        with pytest.raises(status.StatusError, match=r"pid \d+\) is not running any more"):
            status.embedded_bootstrap(checkpoint)
    assert not os.path.exists(path)


def test_status_fails_clearly_when_nothing_answers(tmp_path):
    config = write_config(tmp_path, "fwd", f"127.0.0.1:{free_port()}", {
        "subscribe": "events", "commit_log_topic": "log", "commit_groups": ["leader"]})
    started = time.monotonic()
    run = status_without_spark("--config", str(config), "--timeout", "2")
    assert run.returncode == ExitCode.FAILED
    assert run.stderr.startswith("status: ") and "bootstrap" in run.stderr.lower(), run.stderr
    assert time.monotonic() - started < 60

    embedded = status_without_spark("--config", "conf/local.yaml",
                                    "--set", f"checkpoint.location={tmp_path / 'nowhere'}")
    assert embedded.returncode == ExitCode.FAILED
    assert "the embedded forwarder is not running" in embedded.stderr
    assert "pass --bootstrap HOST:PORT" in embedded.stderr

    invalid = status_without_spark("--config", str(config), "--set", "source.no_such_key=1")
    assert invalid.returncode == ExitCode.CONFIG and "no_such_key" in invalid.stderr


@pytest.mark.slow
def test_status_of_the_running_embedded_default(tmp_path):
    """`./spark-submit.sh` on conf/local.yaml, then `python -m synclib status` on the same config."""
    overrides = ["--set", f"sink.path={tmp_path / 'events'}",
                 "--set", f"checkpoint.location={tmp_path / 'checkpoint'}",
                 "--set", "embedded.partitions=2", "--set", "embedded.events_per_second=20",
                 "--set", "embedded.leader_lag=1s", "--set", "embedded.run_for=null",
                 "--set", "logging.progress=false",
                 "--set", f"monitoring.metrics_port={free_port()}"]  # tests may run in parallel (pytest -n)
    job = start_forwarder(ROOT / "conf" / "local.yaml", tmp_path / "forwarder.log", *overrides)
    try:
        def third_batch() -> bool:
            summary = table_summary(str(tmp_path / "events"))
            return job.poll() is not None or (summary is not None and (summary.batch_id or 0) >= 2)

        wait_until(third_batch, timeout_s=300, what="the embedded forwarder's third Delta commit", interval_s=1)
        assert job.poll() is None, (tmp_path / "forwarder.log").read_text()[-5000:]

        run = run_status("--config", "conf/local.yaml", *overrides, "--json")

        assert run.returncode == 0, run.stderr
        report = json.loads(run.stdout)
        assert report["bootstrap_servers"].startswith("127.0.0.1:")
        assert [(p["topic"], p["partition"]) for p in report["partitions"]] == [("events", 0), ("events", 1)]
        for p in report["partitions"]:
            assert p["leader_offsets"].keys() == {"snuba-consumers"}
            assert p["follower_offset"] is not None and p["leader_offset"] is not None
            assert p["high_watermark"] >= p["leader_offset"] and p["lag"] >= 0
            assert p["seconds_since_leader_commit"] is not None
        latency = report["gate_latency"]  # batches 1 and 2 each released the leader's commits since the last
        assert latency["batches"] == status.RECENT_BATCHES and 0 <= latency["p50_s"] <= latency["p99_s"]
    finally:
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(120)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
    stopped = run_status("--config", "conf/local.yaml", *overrides)
    assert stopped.returncode == ExitCode.FAILED and "not running" in stopped.stderr
