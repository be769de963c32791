"""The benchmark's standalone cluster without starting one: the daemons' command lines, the
session's settings for executors, and how CPU and memory are attributed to executor processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.benchmark import parse_args
from harness.procmem import TreeMemory, descendants
from harness.standalone import (
    MASTER_CLASS,
    REPOSITORY,
    WORKER_CLASS,
    daemon_env,
    master_command,
    session_conf,
    spark_home,
    worker_command,
)


def test_spark_home_is_pyspark_with_its_launcher_and_jars() -> None:
    home = Path(spark_home())
    assert (home / "bin" / "spark-class").is_file()
    assert any((home / "jars").glob("spark-core_*.jar"))


def test_master_and_worker_commands() -> None:
    assert master_command("/spark", 7077, 8080) == [
        "/spark/bin/spark-class", MASTER_CLASS, "--host", "127.0.0.1", "--port", "7077", "--webui-port", "8080"]
    worker = worker_command("/spark", "spark://127.0.0.1:7077", 8081, 1, "1g", "/w/worker-1")
    assert worker[:2] == ["/spark/bin/spark-class", WORKER_CLASS]
    assert worker[-1] == "spark://127.0.0.1:7077"  # the master URL is the worker's one argument
    options = dict(zip(worker[2:-1:2], worker[3:-1:2], strict=True))
    assert options == {"--host": "127.0.0.1", "--webui-port": "8081", "--cores": "1", "--memory": "1g",
                       "--work-dir": "/w/worker-1"}


def test_daemons_run_this_pyspark_on_localhost() -> None:
    env = daemon_env("/spark", {"PATH": "/bin", "SPARK_HOME": "/elsewhere"})
    assert env == {"PATH": "/bin", "SPARK_HOME": "/spark", "SPARK_LOCAL_IP": "127.0.0.1"}


def test_session_conf_gives_executors_the_venv_python_and_synclib() -> None:
    conf = session_conf("spark://127.0.0.1:7077", workers=2, cores=1, memory="1g")
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert conf["spark.pyspark.python"] == sys.executable
    assert conf["spark.executorEnv.PYTHONPATH"] == REPOSITORY
    assert (Path(REPOSITORY) / "synclib" / "__init__.py").is_file()
    assert conf["spark.executor.memory"] == "1g" and conf["spark.executor.cores"] == "1"
    assert conf["spark.cores.max"] == "2"
    assert conf["spark.scheduler.minRegisteredResourcesRatio"] == "1.0"  # no phase starts before the executors
    assert session_conf("spark://h:1", 3, 2, "2g", python="/venv/bin/python")["spark.cores.max"] == "6"


def test_benchmark_options() -> None:
    args = parse_args(["--standalone-workers", "2", "--standalone-memory", "2g"])
    assert (args.standalone_workers, args.standalone_cores, args.standalone_memory) == (2, 1, "2g")
    assert parse_args([]).standalone_workers == 0
    with pytest.raises(SystemExit):
        parse_args(["--standalone-workers", "-1"])


SLEEPER = "import sys, time; time.sleep(60)"
# Stand-ins named as the real ones: a Java executor (argv[0] java) and its Python daemon.
FAKE_WORKER = f"""
import subprocess, sys, time
subprocess.Popen(["java", "-c", {SLEEPER!r}, "org.apache.spark.executor.CoarseGrainedExecutorBackend"],
                 executable=sys.executable)
subprocess.Popen([sys.executable, "-c", {SLEEPER!r}, "pyspark.daemon"])
time.sleep(60)
"""


def test_executor_processes_are_counted_under_the_worker() -> None:
    """A stand-in worker with an 'executor' and a 'Python worker' below it: both are measured, by role."""
    worker = subprocess.Popen([sys.executable, "-c", FAKE_WORKER])
    try:
        deadline = time.monotonic() + 30
        while len(descendants(worker.pid)) < 3:
            assert time.monotonic() < deadline, "the stand-in executor processes did not start"
            time.sleep(0.05)
        with TreeMemory(-1, roots={worker.pid: "standalone-worker"}, interval_s=0.05) as usage:
            time.sleep(0.2)
        roles = {peak.role for peak in usage.peaks()}
        assert {"standalone-worker", "executor-jvm", "executor-python-worker", "driver"} <= roles
        assert {"standalone-worker", "executor-jvm", "executor-python-worker"} <= set(usage.cpu_seconds_by_role())
    finally:
        for pid in reversed(descendants(worker.pid)):
            os.kill(pid, 9)
        worker.wait()


def test_executor_columns_are_printed_only_when_measured(capsys: pytest.CaptureFixture[str]) -> None:
    local = {"forwarder -> delta-rs": {"rows_per_s": 1000.0, "cpu_us_per_row": {"jvm": 2.0, "total": 2.0}}}
    report.print_table(local, "local")
    assert "exec-jvm" not in capsys.readouterr().out
    cluster = {"forwarder -> delta-rs": {"rows_per_s": 1000.0, "cpu_us_per_row": report.cpu_us_per_row(
        {"rows": 1_000_000, "cpu_s": {"jvm": 1.0, "executor-jvm": 2.0, "executor-python-worker": 3.0}})}}
    report.print_table(cluster, "cluster")
    printed = capsys.readouterr().out
    assert "exec-jvm" in printed and "exec-py" in printed and "daemons" not in printed
    assert printed.splitlines()[-1].split()[-1] == "6.00"  # total us/row
