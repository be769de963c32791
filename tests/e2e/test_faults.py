"""Faults: "exactly the leader's committed events, exactly once" under crashes, a lost
checkpoint, broker stalls, a stale leader, malformed input, and no secret in any output.

Job-level tests run the real job (`spark-submit jobs/forwarder.py`) through
`harness.job_world` and `harness.crash_harness`; source-level ones run a query in the session's Spark.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.errors import StreamingQueryException

from harness.crash_harness import CrashHarness
from harness.fault_proxy import INTERNAL, RESET_AFTER, RESET_BEFORE, SLOW_DOWN, FaultProxy
from harness.job_files import (
    DELTA_COMMITTED,
    PLANNING,
    READING,
    Verdict,
    delta_batches,
    table_rows,
    verify_table,
)
from harness.job_world import JobRun, KafkaWorld, job_config, wait_for, write_config
from harness.object_store import SECRET_ACCESS_KEY, S3Server
from synclib.delta.stream import DeltaStream, start_delta_stream
from synclib.delta.table import read_arrow
from synclib.settings.storage import S3Config
from synclib.settings.values import DELTA_RS, DELTA_SPARK
from tests.kafka_proxy import ProxiedBroker
from tests.spark.test_source import World, offsets
from tests.support import create_table, produce, publish_commit, publish_raw, wait_until

JOB_TIMEOUT_S = 240.0


def run_job(directory: Path, config: dict[str, Any], name: str = "run", args: tuple[str, ...] = (),
            env: dict[str, str] | None = None) -> JobRun:
    return JobRun(write_config(directory / f"{name}.yaml", config), directory, name, args, env)


def finished(job: JobRun, expected_code: int) -> str:
    """Wait for the job to exit with `expected_code`; its output."""
    code = job.wait(JOB_TIMEOUT_S)
    assert code == expected_code, f"exit {code}, expected {expected_code}\n{job.tail()}"
    return job.output()


def stopped(job: JobRun) -> str:
    """SIGTERM: the job stops after the batch in flight and exits 0."""
    job.terminate()
    return finished(job, 0)


def verdict(world: KafkaWorld, directory: Path, committed: Mapping[int, int]) -> Verdict:
    """The job's table under `directory` against the leader's `committed` offsets."""
    return verify_table(directory / "table", world.events, committed)


@pytest.fixture
def world(bootstrap_servers: str) -> Iterator[KafkaWorld]:
    """A live producer and leader on the session's broker."""
    with KafkaWorld(bootstrap_servers) as live:
        yield live


# --- crashes, lost checkpoint --------------------------------------------------------------

@pytest.mark.slow
def test_crash_anywhere_leaves_exactly_the_leaders_events_exactly_once(
        world: KafkaWorld, s3: S3Server, spark: Any, tmp_path: Path) -> None:
    """The short CI run of `python -m harness.crash_harness --object-store`, with delta-spark (what
    `auto` picks on a Spark cluster with Delta) on a table Spark created with column mapping: one
    SIGKILL in each of the batch's windows, the table and the checkpoint on the S3 server, the
    maintenance thread's OPTIMIZE commits racing the batch commits to each Delta version (the server
    refuses the loser's PUT, as AWS S3 does), and the batch killed after its Delta commit run again
    without being written twice. delta-rs's windows: the dead-letter kills (tests/e2e/test_dead_letters.py:
    reading and committed) and the delta-rs soak's kill inside a maintenance commit
    (tests/e2e/test_maintenance.py), with the same harness's kill and checks on the same server."""
    harness = CrashHarness(world, tmp_path, seed=5, store=s3, sink={"engine": DELTA_SPARK})
    create_table(spark, harness.table, clause="TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    tally = harness.run(kills=3)
    assert tally.kills == Counter({PLANNING: 1, READING: 1, DELTA_COMMITTED: 1}), tally.report()
    assert tally.replays == 1, tally.report()
    assert tally.ok, tally.report()
    assert DeltaTable(harness.table, storage_options=S3Config(**s3.storage_settings()).environment({})) \
        .metadata().configuration["delta.columnMapping.mode"] == "name"


@pytest.mark.slow
@pytest.mark.parametrize("engine", [DELTA_RS, DELTA_SPARK])
def test_s3_faults_are_ridden_out_and_a_lost_checkpoint_resumes_from_the_offsets_in_delta(
        engine: str, world: KafkaWorld, s3_server: S3Server, tmp_path: Path) -> None:
    """On S3 (S3Proxy), on each engine: the table at s3://, Spark's checkpoint at s3a://,
    maintenance on; the files are checked in the server's backing directory. The first run reaches
    the server through the fault proxy, which answers S3's transient failures (503 SlowDown, 500,
    resets before a request and after its answer: lost answers of Spark's checkpoint entries and of
    the Delta log's) to some of its requests: the job rides them out, exactly once."""
    bucket = s3_server.bucket()
    stored = s3_server.directory / "data" / bucket
    sections = {"sink": {"path": f"s3://{bucket}/table", "engine": engine},
                "checkpoint": {"location": f"s3a://{bucket}/checkpoint"},
                "source": {**world.config(tmp_path)["source"], "max_offsets_per_trigger": 4000}}  # a few batches
    wait_until(lambda: sum(world.committed().values()) >= 200, 60, "the leader to commit some events")
    with FaultProxy(s3_server.port) as proxy:
        for fault, method, key in ((RESET_AFTER, "PUT", "/checkpoint/(offsets|commits)/"),
                                   (RESET_AFTER, "PUT", "/table/_delta_log/0"), (RESET_BEFORE, "PUT", "/checkpoint/"),
                                   (SLOW_DOWN, "GET", "/checkpoint/"), (INTERNAL, None, "/table/_delta_log/0"),
                                   (SLOW_DOWN, "PUT", "/table/_delta_log/0"), (RESET_BEFORE, "GET", "/synclib/run")):
            proxy.inject(fault, count=2, method=method, key=key)
        faulty = world.config(tmp_path, **sections, storage={"s3": s3_server.behind(proxy.port).storage_settings()})
        finished(run_job(tmp_path, faulty, "first", ("--available-now",)), 0)
        injected = Counter(fault for fault, _, _ in proxy.faults())
    assert set(injected) == {RESET_AFTER, RESET_BEFORE, SLOW_DOWN, INTERNAL}, proxy.faults()
    first = verdict(world, stored, world.committed())
    assert first.rows and first.ok, first
    assert (stored / "checkpoint" / "commits" / "0").exists()

    config = world.config(tmp_path, **sections, storage={"s3": s3_server.storage_settings()})

    shutil.rmtree(stored / "checkpoint")
    committed = world.finish_producing()
    output = finished(run_job(tmp_path, config, "second", ("--available-now",)), 0)

    assert "resuming from the table's offsets" in output
    assert verdict(world, stored, committed).holds_exactly(committed)
    assert len({app for app, _ in delta_batches(stored / "table")}) == 2  # a new query wrote on
    assert SECRET_ACCESS_KEY not in output


# --- broker stalls ---------------------------------------------------------------------------

@pytest.mark.slow
def test_broker_stall_within_the_deadlines_is_ridden_out(tmp_path: Path) -> None:
    """Client requests time out (3s) during a 12s SIGSTOP of the broker; the job's deadlines
    (2 min by default) are longer: it keeps running and nothing is lost or duplicated."""
    with KafkaWorld() as world:
        job = run_job(tmp_path, world.config(tmp_path, kafka={
            "bootstrap_servers": world.bootstrap, "options": {"request.timeout.ms": 3000}}))
        wait_for(lambda: table_rows(tmp_path / "table"), JOB_TIMEOUT_S, "rows in Delta", job)
        assert world.broker is not None
        os.kill(world.broker.pid, signal.SIGSTOP)
        try:
            time.sleep(12)  # the fault itself: longer than every client timeout
        finally:
            os.kill(world.broker.pid, signal.SIGCONT)
        committed = world.finish_producing()
        wait_for(lambda: verdict(world, tmp_path, committed).covers(committed),
                 JOB_TIMEOUT_S, "every committed event in Delta", job)
        output = stopped(job)
    assert verdict(world, tmp_path, committed).holds_exactly(committed)
    assert "retrying" in output  # the stall was felt, and ridden out


def start_gated_delta_stream(spark: Any, world: KafkaWorld, directory: Path, **options: str) -> Any:
    """The job's pipeline in the session's Spark: synchronized_kafka -> Delta (delta-rs)."""
    df = spark.readStream.format("synchronized_kafka").options(**{
        "kafka.bootstrap.servers": world.bootstrap, "subscribe": world.events,
        "commitLogTopic": world.commit_log, "synchronizeCommitGroups": world.group, **options}).load()
    return start_delta_stream(df, DeltaStream(str(directory / "table"), str(directory / "checkpoint"), DELTA_RS,
                                              trigger={"processingTime": "200 milliseconds"}))


DEADLINE_S = 12
# The commit-log follower's heartbeat is its partition refresh, every 5s: its deadline runs
# from the last refresh, up to 5s before the stall began.
HEARTBEAT_S = 5
DEADLINE_MESSAGE = re.compile(
    rf"no answer from the brokers for {DEADLINE_S}s"  # planning
    rf"|no progress for \d+s \(limit {DEADLINE_S}s\)"  # the commit-log follower
    rf"|no progress reading \S+ offsets .* for {DEADLINE_S}s")  # executors


def restart_completes(spark: Any, world: KafkaWorld, tmp_path: Path, options: dict[str, str]) -> None:
    """After a failure, the gated stream restarted on the same checkpoint forwards every event
    the leader commits, exactly once."""
    query = start_gated_delta_stream(spark, world, tmp_path, **options)
    try:
        committed = world.finish_producing()
        wait_until(lambda: verdict(world, tmp_path, committed).covers(committed),
                   120, "every committed event in Delta after the restart")
    finally:
        query.stop()
    assert verdict(world, tmp_path, committed).holds_exactly(committed)


def test_broker_stall_past_the_deadlines_fails_naming_it_and_a_restart_completes(spark: Any, tmp_path: Path) -> None:
    deadlines = {"kafka.request.timeout.ms": "2000", **{
        option: str(DEADLINE_S) for option in ("brokerTimeout", "commitLogTimeout", "readStallTimeout")}}
    with KafkaWorld() as world:
        assert world.broker is not None
        query = start_gated_delta_stream(spark, world, tmp_path, **deadlines)
        try:
            wait_until(lambda: table_rows(tmp_path / "table"), 120, "rows in Delta")
            os.kill(world.broker.pid, signal.SIGSTOP)
            stalled_at = time.monotonic()
            try:
                with pytest.raises(StreamingQueryException) as failure:
                    query.awaitTermination(120)
                failed_after = time.monotonic() - stalled_at
            finally:
                os.kill(world.broker.pid, signal.SIGCONT)
        finally:
            query.stop()
        assert DEADLINE_MESSAGE.search(str(failure.value)), str(failure.value)
        assert failed_after >= DEADLINE_S - HEARTBEAT_S  # not at the first timed-out request (2s)

        restart_completes(spark, world, tmp_path, deadlines)


def test_commit_log_follower_losing_its_connection(spark: Any, tmp_path: Path) -> None:
    """Only the follower's connections are cut (a proxy in front of the broker): for less
    than commitLogTimeout it reconnects and the query goes on; past it the query fails
    naming the follower and the deadline; a restart completes."""
    status = tmp_path / "status.json"
    options = {"commitLogTimeout": "20", "kafka.request.timeout.ms": "2000",
               "kafka.reconnect.backoff.max.ms": "1000", "statusFile": str(status)}
    with ProxiedBroker() as broker, KafkaWorld(broker.bootstrap_servers) as world:
        assert broker.proxy is not None
        follower = f"synclib-commit-log-follower-{world.commit_log}"
        query = start_gated_delta_stream(spark, world, tmp_path, **options)
        try:
            wait_until(lambda: table_rows(tmp_path / "table"), 120, "rows in Delta")
            with broker.proxy.blocked(follower):
                wait_until(lambda: json.loads(status.read_text())["commit_log"]["last_error"], 60,
                           "the follower to notice")
                time.sleep(4)  # the fault itself: well below commitLogTimeout
            committed = world.committed()
            wait_until(lambda: verdict(world, tmp_path, committed).covers(committed), 60,
                       "the leader's commits made during the cut to be released")
            assert query.isActive
            with broker.proxy.blocked(follower), pytest.raises(StreamingQueryException) as failure:
                query.awaitTermination(120)
        finally:
            query.stop()
        assert re.search(rf"commit-log follower for topic '{world.commit_log}' is stuck: "
                         r"no progress for \d+s \(limit 20s\); last error: \w+", str(failure.value)), failure.value

        restart_completes(spark, world, tmp_path, options)


# --- a stale leader --------------------------------------------------------------------------

STALE_WARNING = re.compile(r"(\S+)\[(\d+)\]: leader has committed nothing for \d+s while data is waiting")


@pytest.mark.slow
def test_stale_leader_is_reported_once_per_episode(world: KafkaWorld, tmp_path: Path) -> None:
    job = run_job(tmp_path, world.config(tmp_path, source={"stale_after": "2s"}))
    wait_for(lambda: table_rows(tmp_path / "table"), JOB_TIMEOUT_S, "rows in Delta", job)
    assert world.leader is not None
    for episode in (1, 2):
        paused_at = len(job.stdout_path.read_text())
        world.leader.pause()
        wait_for(lambda episode=episode: len(STALE_WARNING.findall(job.output())) == episode * world.partitions,
                 60, f"a stale warning per partition (episode {episode})", job)
        wait_for(lambda paused_at=paused_at: "STALE" in job.stdout_path.read_text()[paused_at:], 60,
                 "STALE in the progress output", job)
        time.sleep(3)  # many more planning rounds (200ms trigger) while stale: still one warning each
        assert len(STALE_WARNING.findall(job.output())) == episode * world.partitions
        resumed_at = len(job.stdout_path.read_text())
        world.leader.resume()
        wait_for(lambda resumed_at=resumed_at: _batch_line_without_stale(job.stdout_path.read_text()[resumed_at:]), 60,
                 "a batch without STALE in the progress output after the leader resumed", job)
    output = stopped(job)
    warned = Counter(int(p) for topic, p in STALE_WARNING.findall(output) if topic == world.events)
    assert warned == {p: 2 for p in range(world.partitions)}, warned


def _batch_line_without_stale(text: str) -> bool:
    return any(re.search(r"batch \d+:", line) and "STALE" not in line for line in text.splitlines())


def test_stale_flag_in_the_status_json_is_cleared_when_the_leader_catches_up(
        spark: Any, producer: Any, bootstrap_servers: str, new_topic: Any, tmp_path: Path) -> None:
    source = World(spark, producer, bootstrap_servers, new_topic("stale-events"), new_topic("stale-log"), tmp_path)
    produce(producer, source.events, 0, [(None, b"e")] * 10)
    source.start(staleAfter="1")
    try:
        source.commit(0, 2)
        source.wait_released(offsets(0, 0, 2))
        wait_until(lambda: source.partition_status(0)["stale"], 30, "partition 0 marked stale")
        source.commit(0, 10)  # the leader catches up: nothing waits any more
        source.wait_released(offsets(0, 0, 10))
        wait_until(lambda: not source.partition_status(0)["stale"], 30, "the stale mark cleared")
    finally:
        assert source.query is not None
        source.query.stop()


# --- malformed input -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gated(spark: Any, producer: Any, bootstrap_servers: str, admin: Any,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One running query for all malformed commit-log messages: 200 events on partition 0,
    released up to the leader's good commits."""
    suffix = uuid.uuid4().hex[:8]
    events, log = f"malformed-events-{suffix}", f"malformed-log-{suffix}"
    admin.create(events, 1)
    admin.create(log, 1)
    produce(producer, events, 0, [(None, b"e%d" % i) for i in range(200)])
    running = World(spark, producer, bootstrap_servers, events, log, tmp_path_factory.mktemp("malformed"))
    running.start()
    running.commit(0, 1)
    running.wait_released(offsets(0, 0, 1))
    yield running
    assert running.query is not None
    running.query.stop()


# (key, value, headers); "{t}" is the events topic; 150 is what a lenient decoder might apply.
MALFORMED = {
    "no key": (None, b'{"offset": 150}', []),
    "key not UTF-8": (b"\xff\xfe:0:snuba", b'{"offset": 150}', []),
    "key without group": ("{t}:0", b'{"offset": 150}', []),
    "partition not a number": ("{t}:zero:snuba", b'{"offset": 150}', []),
    "negative partition": ("{t}:-1:snuba", b'{"offset": 150}', []),
    "tombstone": ("{t}:0:snuba", None, []),
    "empty value": ("{t}:0:snuba", b"", []),
    "truncated JSON": ("{t}:0:snuba", b'{"offset": 150', []),
    "JSON offset a string": ("{t}:0:snuba", b'{"offset": "150"}', []),
    "JSON offset negative": ("{t}:0:snuba", b'{"offset": -150}', []),
    "JSON offset fractional": ("{t}:0:snuba", b'{"offset": 150.5}', []),
    "JSON offset boolean": ("{t}:0:snuba", b'{"offset": true}', []),
    "JSON without offset": ("{t}:0:snuba", b'{"orig_message_ts": 1700000000.0}', []),
    "JSON timestamp not a number": ("{t}:0:snuba", b'{"offset": 150, "orig_message_ts": "yesterday"}', []),
    "JSON array": ("{t}:0:snuba", b"[150]", []),
    "legacy not a number": ("{t}:0:snuba", b"150x", []),
    "legacy not ASCII": ("{t}:0:snuba", "\uff11\uff15\uff10".encode(), []),  # fullwidth 150
    "legacy bad timestamp header": ("{t}:0:snuba", b"150", [("orig_message_ts", b"yesterday")]),
}


@pytest.mark.parametrize("kind", MALFORMED)
def test_malformed_commit_log_message_is_skipped_counted_and_later_commits_apply(gated: World, kind: str) -> None:
    key, value, headers = MALFORMED[kind]
    if isinstance(key, str):
        key = key.format(t=gated.events).encode()
    before = gated.status()["commit_log"]
    leader = gated.partition_status(0)["leader_offset"]
    publish_raw(gated.producer, gated.log, key, value, headers)
    wait_until(lambda: gated.status()["commit_log"]["skipped_malformed"] == before["skipped_malformed"] + 1,
               60, f"the {kind} message to be counted")
    gated.drain()  # a planning round after the skip
    assert gated.partition_status(0)["leader_offset"] == leader
    assert gated.released() == offsets(0, 0, leader)

    gated.commit(0, leader + 1)
    gated.wait_released(offsets(0, 0, leader + 1))
    after = gated.status()["commit_log"]
    assert (after["applied"], after["skipped_malformed"]) == (before["applied"] + 1, before["skipped_malformed"] + 1)


def fail_on_non_json(df: Any) -> Any:
    """A transform for the bad-payload test: parse each value as JSON, raising on the first
    that is not (transforms that want to skip bad rows must catch errors themselves)."""
    from pyspark.sql import functions as F

    @F.udf("string")
    def parsed(value: bytes) -> str:
        return json.dumps(json.loads(value))

    return df.withColumn("parsed", parsed(F.col("value")))


@pytest.mark.slow
def test_transform_failing_on_a_bad_payload_fails_the_batch_naming_topic_partition_offsets(
        producer: Any, bootstrap_servers: str, new_topic: Any, tmp_path: Path) -> None:
    events, log = new_topic("payload-events", 2), new_topic("payload-log")
    produce(producer, events, 0, [(None, b'{"n": 0}')] * 5)
    produce(producer, events, 1, [(None, b'{"n": 1}')] * 4)
    publish_commit(producer, log, "snuba", events, 0, 5)
    publish_commit(producer, log, "snuba", events, 1, 4)
    job = run_job(tmp_path, job_config(bootstrap_servers, events, log, tmp_path, "snuba",
                                       transform="tests.e2e.test_faults:fail_on_non_json"))
    wait_for(lambda: len(table_rows(tmp_path / "table")) == 9, JOB_TIMEOUT_S, "the good batch in Delta", job)
    produce(producer, events, 0, [(None, b"<not json>")] + [(None, b"{}")] * 3)  # offsets 5..8
    publish_commit(producer, log, "snuba", events, 0, 9)
    output = finished(job, 1)
    assert "forwarder: the query failed" in output and "JSONDecodeError" in output
    assert f"forwarder: the failed micro-batch covers {events}[0] offsets [5, 9)\n" in output, output[-3000:]
    assert len(table_rows(tmp_path / "table")) == 9  # nothing of the failed batch


@pytest.mark.slow
@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_topic_deleted_and_recreated_under_the_job(producer: Any, admin: Any, bootstrap_servers: str, new_topic: Any,
                                                   tmp_path: Path, fail_on_data_loss: bool) -> None:
    events, log = new_topic("recreated-events"), new_topic("recreated-log")
    produce(producer, events, 0, [(None, b"old-%d" % i) for i in range(10)])
    publish_commit(producer, log, "snuba", events, 0, 10)
    job = run_job(tmp_path, job_config(bootstrap_servers, events, log, tmp_path, "snuba",
                                       source={"fail_on_data_loss": fail_on_data_loss}))
    wait_for(lambda: len(table_rows(tmp_path / "table")) == 10, JOB_TIMEOUT_S, "the old topic's 10 rows", job)
    admin.delete([events])
    admin.create(events, 1)
    produce(producer, events, 0, [(None, b"new-%d" % i) for i in range(4)])
    publish_commit(producer, log, "snuba", events, 0, 4)  # the leader restarts on the new topic too
    if fail_on_data_loss:
        output = finished(job, 1)
        assert re.search(rf"{events}\[0\].*recreated.*failOnDataLoss", output), output[-3000:]
        assert _values(tmp_path / "table") == Counter(b"old-%d" % i for i in range(10))
        return
    wait_for(lambda: len(_values(tmp_path / "table")) == 14, JOB_TIMEOUT_S, "the new topic's rows", job)
    stopped(job)
    old, new = [b"old-%d" % i for i in range(10)], [b"new-%d" % i for i in range(4)]
    assert _values(tmp_path / "table") == Counter(old + new)


def _values(table: Path) -> Counter[bytes]:
    data = read_arrow(str(table), columns=["value"])
    return Counter() if data is None else Counter(data.column("value").to_pylist())


# --- secrets ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_no_secret_in_anything_the_job_prints_or_writes(bootstrap_servers: str, new_topic: Any, tmp_path: Path) -> None:
    """A SASL password (from the environment) for a broker that does not speak SASL: the job
    fails to connect (exit 3, before Spark starts); neither its output (DEBUG logging), nor the
    status command's, nor any file the job left (Spark's and Python's temporary files) contains it."""
    password = f"pw-{uuid.uuid4().hex}"
    events, log = new_topic("secret-events"), new_topic("secret-log")
    config = job_config(bootstrap_servers, events, log, tmp_path, kafka={
        "bootstrap_servers": bootstrap_servers,
        "security": {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "username": "forwarder",
                     "password": "${SYNCLIB_TEST_SASL_PASSWORD}"},
        "options": {"bootstrap.timeout.ms": 5000, "request.timeout.ms": 5000}},
        logging={"level": "DEBUG", "progress": True})
    env = {"SYNCLIB_TEST_SASL_PASSWORD": password}
    output = finished(run_job(tmp_path, config, env=env), 3)  # the check before Spark starts
    assert "forwarder: Kafka at" in output and "SASL authentication" in output
    assert password not in output
    status = subprocess.run([sys.executable, "-m", "synclib", "status", "--config", str(tmp_path / "run.yaml"),
                             "--json", "--timeout", "5"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, **env})
    assert status.returncode == 1 and status.stderr.startswith("status: "), status
    assert password not in status.stdout + status.stderr
    leaking = [str(f) for f in tmp_path.rglob("*") if f.is_file() and password.encode() in f.read_bytes()]
    assert not leaking
