"""Running the forwarder and the status command as operators do, for end-to-end tests:
spark-submit of jobs/forwarder.py with a YAML config, `python -m synclib status`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from harness.job_world import classpath_options
from synclib.delta.table import read_table_offsets
from synclib.embedded.broker import tied_to_this_process
from synclib.kafka.admin import group_offsets
from synclib.offsets import TopicPartitionKey

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "jobs" / "forwarder.py"
RUN_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 120.0  # a graceful stop: the batch in flight, then the summary


def _env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def forwarder_command(config: Path, *args: str) -> list[str]:
    """spark-submit of the job in local mode, one core (the machines running tests are small),
    with Delta's jars for a delta-spark config and S3A's for an S3 location, ended with the test process."""
    return tied_to_this_process([
        str(Path(sys.executable).with_name("spark-submit")), "--master", "local[1]",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=1",
        *classpath_options(config), str(JOB), "--config", str(config), *args])


def run_forwarder(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the job to its end (pass --available-now, or a config with embedded.run_for)."""
    run = subprocess.run(forwarder_command(config, *args), env=_env(), cwd=ROOT, capture_output=True,
                         text=True, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, f"forwarder exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    return run


def start_forwarder(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(forwarder_command(config, *args), env=_env(), cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def run_status(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m synclib status ARGS`."""
    return subprocess.run([sys.executable, "-m", "synclib", "status", *args], env=_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def write_config(directory: Path, name: str, bootstrap: str, source: Mapping[str, Any],
                 kafka: Mapping[str, Any] | None = None) -> Path:
    """A forwarder config with its Delta table and checkpoint under `directory/name/`."""
    config = {
        "kafka": {"bootstrap_servers": bootstrap, **(kafka or {})},
        "source": dict(source),
        "sink": {"path": str(directory / name / "table"), "partition_by_date": False},
        "checkpoint": {"location": str(directory / name / "checkpoint")},
        "trigger": {"min_interval": "200ms"},
        "logging": {"level": "WARNING", "progress": False},
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def table_offsets(path: str) -> dict[TopicPartitionKey, int]:
    """The Kafka offsets recorded in the Delta table's latest synclib commit."""
    return read_table_offsets(path) or {}


def committed_offsets(bootstrap: str, group: str) -> dict[TopicPartitionKey, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return group_offsets(admin, group)
    finally:
        admin.close()


def commit_group(bootstrap: str, group: str, topic: str, partition_offsets: Mapping[int, int]) -> None:
    """Commit offsets for `group`, as a leader that publishes no commit log does."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                         for p, o in partition_offsets.items()})
    finally:
        consumer.close()
