"""The forwarder job as users run it: `spark-submit jobs/forwarder.py` in a subprocess.

Each job runs against the session's broker with a config written to tmp_path; the leader
is `publish_commit` (deterministic runs with --available-now) or a `SimulatedLeader`
(continuous runs stopped by a signal). The Delta table is read back with delta-rs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from chispa import assert_df_equality
from confluent_kafka import Producer
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from synclib.app.embedded_locations import start_embedded_afresh
from synclib.app.session import SESSION_DEFAULTS
from synclib.delta.table import read_arrow
from synclib.delta.writer import arrow_schema
from synclib.embedded.broker import free_port
from synclib.embedded.leader import SimulatedLeader
from synclib.embedded.world import EventProducer
from synclib.settings import load_config
from tests.forwarder_runs import (
    ROOT,
    RUN_TIMEOUT_S,
    STOP_TIMEOUT_S,
    forwarder_command,
    run_forwarder,
    start_forwarder,
    table_offsets,
    write_config,
)
from tests.readme_sample import missing_shapes
from tests.support import create_table, produce, publish_commit, wait_until

GROUP = "snuba-consumers"
CONFIG_ERROR_MAX_S = 10.0
ROWS = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
])
POSITIONS = StructType([StructField("partition", IntegerType()), StructField("offset", LongType())])

PROGRESS = ("--set", "logging.progress=true", "--set", "logging.level=INFO")

pytestmark = pytest.mark.slow


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    """Run to completion, whatever the exit code; stdout and stderr together in `.stdout`."""
    return subprocess.run(command, cwd=ROOT, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=RUN_TIMEOUT_S)


class Job:
    """One forwarder setup: topics, a config file (see `forwarder_runs.write_config`), its
    table and checkpoint."""

    def __init__(self, tmp_path: Path, bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
        self.topic = new_topic("events", 2)
        self.commit_log = new_topic("commit-log")
        source = {"subscribe": self.topic, "commit_log_topic": self.commit_log, "commit_groups": [GROUP]}
        self.config = write_config(tmp_path, "job", bootstrap_servers, source)
        self.table = str(tmp_path / "job" / "table")
        self.checkpoint = str(tmp_path / "job" / "checkpoint")
        self.log = tmp_path / "job.log"

    def run(self, *args: str) -> str:
        """Run the job to its end (it must succeed), with progress; its output."""
        return run_forwarder(self.config, *PROGRESS, *args).stdout

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        return start_forwarder(self.config, self.log, *PROGRESS, *args)

    def output(self) -> str:
        return self.log.read_text()

    def offsets(self) -> dict[int, int]:
        return {p: end for (topic, p), end in table_offsets(self.table).items() if topic == self.topic}

    def version(self) -> int:
        return DeltaTable(self.table).version()


def produce_offsets(producer: Producer, topic: str, partition: int, start: int, end: int) -> None:
    """Records whose key and value name their partition and offset (the topic must be at `start`)."""
    produce(producer, topic, partition,
            [(f"{partition}:{o}".encode(), f"event {partition}:{o}".encode()) for o in range(start, end)])


def commit(producer: Producer, job: Job, offsets: Mapping[int, int]) -> None:
    for partition, offset in offsets.items():
        publish_commit(producer, job.commit_log, GROUP, job.topic, partition, offset)


def table_rows(spark: SparkSession, table: str, schema: StructType) -> DataFrame:
    data = read_arrow(table, columns=schema.fieldNames())
    return spark.createDataFrame(data.cast(arrow_schema(schema)))


def assert_released(spark: SparkSession, job: Job, offsets: Mapping[int, range]) -> None:
    """The table holds exactly these offsets' records, each once."""
    expected = [(f"{p}:{o}".encode(), f"event {p}:{o}".encode(), job.topic, p, o)
                for p, span in offsets.items() for o in span]
    assert_df_equality(table_rows(spark, job.table, ROWS), spark.createDataFrame(expected, ROWS),
                       ignore_row_order=True, ignore_nullable=True)


def assert_positions(spark: SparkSession, table: str, ends: Mapping[int, int]) -> None:
    """The table holds exactly offsets [0, end) of each partition, each once."""
    expected = [(p, o) for p, end in ends.items() for o in range(end)]
    assert_df_equality(table_rows(spark, table, POSITIONS), spark.createDataFrame(expected, POSITIONS),
                       ignore_row_order=True, ignore_nullable=True)


def venv_is_prepared() -> bool:
    """Whether spark-submit.sh would run with this interpreter's venv as it is (see prepare_env)."""
    stamp = Path(sys.prefix) / ".synclib-installed"
    with open(ROOT / "pyproject.toml", "rb") as pyproject:
        want = subprocess.run(["cksum"], stdin=pyproject, capture_output=True, text=True).stdout
    return stamp.exists() and stamp.read_text() == want


def kept_initial_offsets(checkpoint: str) -> object:
    return json.loads((Path(checkpoint) / "synclib" / "initial-offsets.json").read_text())


def lose_spark_commit(checkpoint: str, batch_id: int) -> None:
    """What a crash between the Delta commit and Spark's checkpoint commit leaves behind."""
    commits = Path(checkpoint) / "commits"
    (commits / str(batch_id)).unlink()
    (commits / f".{batch_id}.crc").unlink(missing_ok=True)


def embedded_settings(tmp_path: Path) -> dict[str, Any]:
    """conf/local.yaml with its table and checkpoint under tmp_path."""
    settings = yaml.safe_load((ROOT / "conf" / "local.yaml").read_text())
    settings["sink"]["path"] = str(tmp_path / "table")
    settings["checkpoint"]["location"] = str(tmp_path / "checkpoint")
    settings["monitoring"]["metrics_port"] = free_port()  # tests may run in parallel (pytest -n)
    return settings


# --- runs to completion ----------------------------------------------------------------

def test_forwards_each_released_offset_once_across_restarts_replays_and_a_new_checkpoint(
        spark: SparkSession, producer: Producer, bootstrap_servers: str,
        new_topic: Callable[..., str], tmp_path: Path) -> None:
    job = Job(tmp_path, bootstrap_servers, new_topic)
    produce_offsets(producer, job.topic, 0, 0, 10)
    produce_offsets(producer, job.topic, 1, 0, 6)
    commit(producer, job, {0: 7, 1: 4})

    output = job.run("--available-now")

    assert_released(spark, job, {0: range(7), 1: range(4)})  # not what the leader has not committed
    assert "batch 0: 11 rows" in output
    assert kept_initial_offsets(job.checkpoint) == {job.topic: {"0": 0, "1": 0}}  # for a replay of batch 0
    assert f"Delta table {job.table}: version 0, 11 rows, last batch 0" in output

    # A restart from the same checkpoint, whose commit of batch 0 was lost (a crash between the
    # Delta commit and Spark's): Spark replays batch 0 from the kept initial offsets, the sink finds
    # it in the table and writes nothing, and the run continues with batch 1.
    lose_spark_commit(job.checkpoint, 0)
    produce_offsets(producer, job.topic, 0, 10, 15)
    commit(producer, job, {0: 12, 1: 6})
    job.run("--available-now")

    assert (Path(job.checkpoint) / "commits" / "0").exists()
    assert_released(spark, job, {0: range(12), 1: range(6)})
    assert (job.version(), job.offsets()) == (1, {0: 12, 1: 6})  # batch 0 not written again, batch 1 once

    # A new checkpoint on the table starts from the offsets recorded in it.
    commit(producer, job, {0: 15})
    output = job.run("--available-now", "--set", f"checkpoint.location={tmp_path / 'new-checkpoint'}")

    assert "resuming from the table's offsets" in output
    assert kept_initial_offsets(str(tmp_path / "new-checkpoint")) == {job.topic: {"0": 12, "1": 6}}
    assert_released(spark, job, {0: range(15), 1: range(6)})
    assert job.version() == 2


# --- signals ---------------------------------------------------------------------------

def test_sigterm_to_spark_submit_stops_after_the_batch_in_flight_and_a_restart_completes(
        spark: SparkSession, bootstrap_servers: str, new_topic: Callable[..., str],
        tmp_path: Path) -> None:
    job = Job(tmp_path, bootstrap_servers, new_topic)
    client = {"bootstrap_servers": [bootstrap_servers]}
    with EventProducer(job.topic, client, rate=200, event_bytes=256) as events, \
            SimulatedLeader(job.topic, job.commit_log, client, group=GROUP, lag=0.2,
                            commit_interval=0.2) as leader:
        process = job.start()
        try:
            wait_until(lambda: " batch 3:" in job.output(), RUN_TIMEOUT_S, "four batches")
            process.send_signal(signal.SIGTERM)  # the JVM: spark-submit's own process
            returncode = process.wait(STOP_TIMEOUT_S)
        finally:
            process.kill()
        events.stop()
        wait_until(lambda: leader.committed() == events.produced(), 60, "the leader to commit everything")

    output = job.output()
    assert returncode == 0, output
    assert "forwarder stopped (SIGTERM received)" in output
    stopped_at = job.offsets()
    assert_positions(spark, job.table, stopped_at)  # the last batch is in Delta entirely or not at all

    job.run("--available-now")

    assert_positions(spark, job.table, events.produced())
    assert all(events.produced()[p] >= end for p, end in stopped_at.items())


def test_ctrl_c_on_the_entry_script_stops_the_embedded_default_gracefully(
        spark: SparkSession, tmp_path: Path) -> None:
    """The README's first command (conf/local.yaml as it is, but run until Ctrl-C): it stops after
    the batch in flight, every row once, and prints what the README's sample shows."""
    if not venv_is_prepared():
        pytest.skip(f"{sys.prefix} is not a venv prepared by spark-submit.sh for this pyproject.toml "
                    "(the script would install into it); run the tests with ./spark-submit.sh test")
    config = tmp_path / "embedded.yaml"
    settings = embedded_settings(tmp_path)
    settings["embedded"].update(run_for=None)
    config.write_text(yaml.safe_dump(settings))
    log = tmp_path / "job.log"
    with open(log, "w") as out:
        # As from a terminal's shell, with SIGINT at its default: a test runner started as a
        # background job of a non-interactive shell passes SIGINT on ignored, and bash can
        # neither trap nor reset a signal ignored on entry (the job would never see the Ctrl-C).
        process = subprocess.Popen(
            ["env", "--default-signal=INT", str(ROOT / "spark-submit.sh"), "--master", "local[2]",
             "--conf", "spark.ui.enabled=false", "--config", str(config)],
            cwd=ROOT, env={**os.environ, "SYNCLIB_VENV": sys.prefix}, stdout=out,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        wait_until(lambda: " batch 3:" in log.read_text(), RUN_TIMEOUT_S, "four batches")
        os.killpg(process.pid, signal.SIGINT)  # what a terminal sends on Ctrl-C
        returncode = process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no stop {STOP_TIMEOUT_S:.0f} s after Ctrl-C; the job's log ends:\n{log.read_text()[-4000:]}")
    finally:
        process.kill()

    output = log.read_text()
    assert returncode == 0, output
    assert "forwarder stopped (SIGTERM received)" in output
    assert not missing_shapes(output), f"README.md's sample output is not what the command prints: {output}"
    assert "falling behind" not in output  # batches start on the leader's commits, not on a timer
    ends = {p: end for (_, p), end in table_offsets(settings["sink"]["path"]).items()}
    assert sum(ends.values()) > 0
    assert_positions(spark, settings["sink"]["path"], ends)


# --- invalid configurations -------------------------------------------------------------

def _set(dotted: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(settings: dict[str, Any]) -> None:
        *parents, name = dotted.split(".")
        node = settings
        for parent in parents:
            node = node.setdefault(parent, {})
        node[name] = value
    return edit


def _drop(dotted: str) -> Callable[[dict[str, Any]], None]:
    def edit(settings: dict[str, Any]) -> None:
        *parents, name = dotted.split(".")
        node = settings
        for parent in parents:
            node = node[parent]
        del node[name]
    return edit


SECRET = "hunter2-do-not-log"
BAD_CONFIGS = [  # (edit of a valid config, extra arguments, what the message must name)
    pytest.param(_set("sorce", {"subscribe": "x"}), (), "sorce: unknown key", id="unknown-section"),
    pytest.param(_set("sink.pth", "x"), (), "sink.pth: unknown key", id="unknown-key"),
    pytest.param(_drop("sink.path"), (), "sink.path: set exactly one of sink.path and sink.table", id="missing-key"),
    pytest.param(_drop("checkpoint"), (), "checkpoint: missing required section", id="missing-section"),
    pytest.param(_set("source.max_offsets_per_trigger", "lots"), (),
                 "source.max_offsets_per_trigger: expected a positive integer", id="wrong-type"),
    pytest.param(_set("sink.engine", "parquet"), (), "sink.engine: expected one of", id="bad-enum"),
    pytest.param(_set("trigger.processing_time", "soon"), (), "trigger.processing_time: expected a duration",
                 id="bad-duration"),
    pytest.param(_set("kafka.bootstrap_servers", "localhost"), (), "kafka.bootstrap_servers: expected",
                 id="bad-servers"),
    pytest.param(_set("source.subscribe_pattern", "ev.*"), (), "source", id="two-subscriptions"),
    pytest.param(_set("sink.path", "${SYNCLIB_TEST_UNSET_VARIABLE}"), (),
                 "sink.path: environment variable SYNCLIB_TEST_UNSET_VARIABLE is not set", id="unset-env"),
    pytest.param(_set("kafka.security", {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "password": SECRET}),
                 (), "kafka.security.username: required", id="incomplete-sasl"),
    pytest.param(_set("transform", "no_such_module:enrich"), (), "transform: cannot load", id="missing-transform"),
    pytest.param(None, ("--set", "source.max_ofsets_per_trigger=5"), "source.max_ofsets_per_trigger: unknown key",
                 id="bad-override"),
    pytest.param(None, ("--set", "trigger.mode=asap"), "trigger.mode: expected one of 'leader'",
                 id="bad-override-value"),
]


def valid_settings() -> dict[str, Any]:
    return {"kafka": {"bootstrap_servers": "localhost:9092"},
            "source": {"subscribe": "events", "commit_log_topic": "commit-log", "commit_groups": [GROUP]},
            "sink": {"path": "data/t"}, "checkpoint": {"location": "data/c"}}


@pytest.mark.parametrize(("edit", "args", "message"), BAD_CONFIGS)
def test_an_invalid_config_exits_2_naming_the_key_before_spark_starts(
        tmp_path: Path, edit: Callable[[dict[str, Any]], None] | None, args: tuple[str, ...],
        message: str) -> None:
    settings = valid_settings()
    if edit is not None:
        edit(settings)
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(settings))
    started = time.monotonic()

    result = run([sys.executable, str(ROOT / "jobs" / "forwarder.py"), "--config", str(config), *args])

    assert result.returncode == 2, result.stdout
    assert f"forwarder: invalid configuration: {config}: {message}" in result.stdout
    assert SECRET not in result.stdout
    assert "SparkContext" not in result.stdout and "Traceback" not in result.stdout
    assert time.monotonic() - started < CONFIG_ERROR_MAX_S


def test_invalid_yaml_and_a_missing_file_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text("kafka:\n  bootstrap_servers: [localhost:9092\n")
    broken = run([sys.executable, str(ROOT / "jobs" / "forwarder.py"), "--config", str(config)])
    missing = run([sys.executable, str(ROOT / "jobs" / "forwarder.py"), "--config", str(tmp_path / "no.yaml")])

    assert (broken.returncode, missing.returncode) == (2, 2)
    assert f"{config}: not valid YAML (line 3" in broken.stdout
    assert f"{tmp_path / 'no.yaml'}: file not found" in missing.stdout


def test_the_exit_code_of_an_invalid_config_passes_through_spark_submit(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    settings = valid_settings()
    settings["sink"]["engine"] = "parquet"
    config.write_text(yaml.safe_dump(settings))

    result = run(forwarder_command(config))

    assert result.returncode == 2, result.stdout
    assert f"{config}: sink.engine: expected one of" in result.stdout
    assert "SparkContext" not in result.stdout


def test_a_table_the_engine_does_not_honour_stops_the_job_in_one_line_before_a_batch(
        spark: SparkSession, tmp_path: Path, bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    """A table Spark created with row tracking, on delta-rs: exit 2 and one line naming the table,
    its features and delta-spark; nothing written (tests/spark/test_features.py: every engine)."""
    job = Job(tmp_path, bootstrap_servers, new_topic)
    create_table(spark, job.table, "TBLPROPERTIES ('delta.enableRowTracking' = 'true')")

    result = run(forwarder_command(job.config, "--available-now", "--set", "sink.engine=delta-rs"))

    assert result.returncode == 2, result.stdout
    assert result.stdout.strip().splitlines()[-1] == (
        f"forwarder: invalid configuration: table {job.table} needs table features that delta-rs does not write "
        "(domainMetadata, rowTracking): nothing was written; sink.engine delta-spark writes it (Delta's jars on the "
        "classpath: ./spark-submit.sh has them)")
    assert job.version() == 0 and not list(Path(job.table).rglob("*.parquet"))


SESSION_PROBE = """\
from pyspark.sql import SparkSession
from synclib.app.session import SESSION_DEFAULTS, with_session_defaults
conf = with_session_defaults(SparkSession.builder).getOrCreate().sparkContext.getConf()
print("session:", {key: conf.get(key) for key in SESSION_DEFAULTS})
"""


def test_the_jobs_session_defaults_give_way_to_what_spark_submit_sets(tmp_path: Path) -> None:
    """Under spark-submit the job's session starts with `SESSION_DEFAULTS`, except where
    spark-submit's `--conf` sets a key (its JVM holds it before the driver's Python connects)."""
    probe = tmp_path / "probe.py"
    probe.write_text(SESSION_PROBE)
    spark_submit = [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[1]",
                    "--conf", "spark.ui.enabled=false"]
    given = {key: "false" if value == "true" else "true" for key, value in SESSION_DEFAULTS.items()}

    defaults = run([*spark_submit, str(probe)])
    overridden = run([*spark_submit, *(arg for key, value in given.items() for arg in ("--conf", f"{key}={value}")),
                      str(probe)])

    assert f"session: {SESSION_DEFAULTS}" in defaults.stdout, defaults.stdout[-3000:]
    assert f"session: {given}" in overridden.stdout, overridden.stdout[-3000:]


def test_an_embedded_run_replaces_only_a_previous_embedded_runs_locations(tmp_path: Path) -> None:
    config = tmp_path / "embedded.yaml"
    config.write_text(yaml.safe_dump(embedded_settings(tmp_path)))
    assert start_embedded_afresh(load_config(config), str(config)) == []
    (tmp_path / "table" / "part-0.parquet").write_bytes(b"previous run")

    assert start_embedded_afresh(load_config(config), str(config)) == [
        str(tmp_path / "checkpoint"), str(tmp_path / "table")]
    assert sorted(os.listdir(tmp_path / "table")) == [".synclib-embedded"]

    foreign = tmp_path / "someone-elses-table"
    (foreign / "_delta_log").mkdir(parents=True)
    result = run([sys.executable, str(ROOT / "jobs" / "forwarder.py"), "--config", str(config),
                  "--set", f"sink.path={foreign}"])
    assert result.returncode == 2, result.stdout
    assert f"{config}: sink.path: {foreign} exists and was not written by an embedded run" in result.stdout
    assert os.listdir(foreign) == ["_delta_log"]

