"""The forwarder on Spark Connect: a local Spark Connect server (PySpark's own, started with
spark-submit from its bundled spark-connect jar) and the job as a Spark Connect client.

The client runs in a subprocess (`python jobs/forwarder.py` with SPARK_REMOTE), as on a
Databricks serverless job: a Spark Connect session in this process would switch all of PySpark
to Connect mode (`SPARK_CONNECT_MODE_ENABLED`) under the other tests' classic session. One
server per test session; rows are read back with delta-rs and compared with chispa.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

from synclib.delta.table import read_arrow
from tests.forwarder_runs import JOB, ROOT, RUN_TIMEOUT_S, table_offsets, write_config
from tests.support import produce, publish_commit, wait_until

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
SERVER_START_TIMEOUT_S = 180.0
ROWS = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                   StructField("partition", IntegerType()), StructField("offset", LongType())])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local Spark Connect server (one core); yields its `sc://` URL."""
    port = _free_port()
    log = tmp_path_factory.mktemp("spark-connect") / "server.log"
    command = [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[1]", "--class", SERVER_CLASS,
               "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=1",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", f"spark.connect.grpc.binding.port={port}", "spark-internal"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log, "wb") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: _listening(port) or server.poll() is not None, SERVER_START_TIMEOUT_S,
                   "the Spark Connect server to listen", interval_s=0.5)
        assert server.poll() is None, f"Spark Connect server exited {server.returncode}:\n{log.read_text()[-3000:]}"
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def run_on_connect(url: str, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The forwarder job as a Spark Connect client of the server at `url`."""
    return subprocess.run([sys.executable, str(JOB), "--config", str(config), *args],
                          env={**os.environ, "SPARK_REMOTE": url, "PYSPARK_PYTHON": sys.executable},
                          cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


@pytest.mark.slow
def test_the_forwarder_runs_on_spark_connect(connect_server: str, spark: SparkSession, bootstrap_servers: str,
                                             producer, new_topic, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The job, as a Spark Connect client, releases exactly what the leader committed into Delta
    (delta-rs sink), says which JVM conveniences it goes without, and keeps its health check."""
    events, log = new_topic("events", 2), new_topic("commit-log")
    leader = f"leader-{uuid.uuid4().hex[:8]}"
    for partition in (0, 1):
        produce(producer, events, partition,
                [(f"{partition}:{o}".encode(), f"event {partition}:{o}".encode()) for o in range(10)])
    committed = {0: 7, 1: 3}
    for partition, offset in committed.items():
        publish_commit(producer, log, leader, events, partition, offset)
    config = write_config(tmp_path, "fwd", bootstrap_servers, {
        "subscribe": events, "commit_log_topic": log, "commit_groups": [leader]})

    health = tmp_path / "healthy"
    run = run_on_connect(connect_server, config, "--available-now", "--healthcheck-file", str(health))

    assert run.returncode == 0, f"forwarder exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    print(run.stdout[-2000:], run.stderr[-2000:], sep="\n")  # the Connect run's output, for the issue notes
    table = str(tmp_path / "fwd" / "table")
    assert table_offsets(table) == {(events, p): offset for p, offset in committed.items()}
    data = read_arrow(table, columns=ROWS.fieldNames())
    expected = [(f"{p}:{o}".encode(), f"event {p}:{o}".encode(), p, o)
                for p, end in committed.items() for o in range(end)]
    assert_df_equality(spark.createDataFrame(data.to_pylist(), ROWS), spark.createDataFrame(expected, ROWS),
                       ignore_row_order=True, ignore_nullable=True)
    assert "Spark Connect session (no JVM in this process): JVM signal handlers not installed" in run.stderr
    assert "Spark Connect session (no JVM in this process): sink.engine auto" in run.stderr
    assert health.exists()  # touched while the query ran (the planner's status is on this machine)


@pytest.mark.slow
def test_a_failed_query_on_spark_connect_exits_1_naming_the_cause(connect_server: str, bootstrap_servers: str,
                                                                  producer, new_topic, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A query failing on the server (here: offsets beyond the partition's end, as after a topic
    was recreated) fails the job with its cause; the batch's offsets, which only the JVM
    exception carries, are missing with a log line saying so."""
    events, log = new_topic("events"), new_topic("commit-log")
    produce(producer, events, 0, [(None, b"x")] * 3)
    publish_commit(producer, log, "snuba", events, 0, 3)
    config = write_config(tmp_path, "fwd", bootstrap_servers, {
        "subscribe": events, "commit_log_topic": log, "commit_groups": ["snuba"],
        "starting_offsets": f'{{"{events}": {{"0": 100}}}}'})

    run = run_on_connect(connect_server, config, "--available-now")

    assert run.returncode == 1, f"forwarder exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    assert "forwarder: the query failed" in run.stderr and "failOnDataLoss" in run.stderr, run.stderr[-3000:]
    assert ("Spark Connect session (the JVM exception stays on the server): the error of a failed query "
            "does not name the micro-batch's offsets") in run.stderr
