"""./spark-submit.sh splits its arguments: spark-submit's own options to spark-submit, the rest to the job;
in local mode it gives Spark a SPARK_HOME whose Python processes import the venv's PySpark.

The script runs with a stand-in venv (its `spark-submit` records its arguments), JVM directory and Java.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORWARDER = str(ROOT / "jobs" / "forwarder.py")
SPARK_HOME_FILE = "spark-home-given"


def executable(path: Path, script: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


def cksum(path: Path) -> str:
    with open(path, "rb") as file:
        return subprocess.run(["cksum"], stdin=file, capture_output=True, text=True, check=True).stdout


def launch(tmp_path: Path, *args: str, spark_home: str | None = None) -> tuple[
        subprocess.CompletedProcess[str], list[str]]:
    """Run ./spark-submit.sh with `args` (and SPARK_HOME=`spark_home` if given); the result and the
    arguments spark-submit got. spark-submit also writes the SPARK_HOME it got to `SPARK_HOME_FILE`."""
    venv, jvm, received = tmp_path / "venv", tmp_path / "jvm", tmp_path / "spark-submit-args"
    executable(venv / "bin" / "python", f'exec {sys.executable} "$@"')
    executable(venv / "bin" / "spark-submit",
               f"printf '%s\\0' \"$@\" > {received}; printf '%s' \"$SPARK_HOME\" > {tmp_path / SPARK_HOME_FILE}")
    (venv / ".synclib-installed").write_text(cksum(ROOT / "pyproject.toml"))
    for conf in ("delta", "spark-kafka", "s3a"):
        (jvm / conf).mkdir(parents=True)
        (jvm / conf / f"{conf}.jar").touch()
        (jvm / conf / ".fetched").write_text(cksum(ROOT / "jvm" / "ivy.xml"))
    executable(tmp_path / "java" / "bin" / "java", """echo 'openjdk version "17.0.2"' >&2""")
    env = {name: value for name, value in os.environ.items() if name != "SPARK_HOME"}
    env.update(SYNCLIB_VENV=str(venv), SYNCLIB_JVM_DIR=str(jvm), JAVA_HOME=str(tmp_path / "java"),
               **({"SPARK_HOME": spark_home} if spark_home else {}))
    result = subprocess.run([str(ROOT / "spark-submit.sh"), *args], env=env, capture_output=True, text=True,
                            timeout=60)
    return result, received.read_text().split("\0")[:-1] if received.exists() else []


@pytest.mark.parametrize(("args", "to_spark", "to_job"), [
    pytest.param([], [], [FORWARDER], id="embedded-default"),
    pytest.param(["--master", "local[2]", "--conf", "spark.ui.enabled=false", "--config", "c.yaml"],
                 ["--master", "local[2]", "--conf", "spark.ui.enabled=false"], [FORWARDER, "--config", "c.yaml"],
                 id="local"),
    pytest.param(["--set", "a=1", "--driver-memory", "2g", "--available-now", "--healthcheck-file=/tmp/h",
                  "--a-new-flag", "x", "-v", "--conf=spark.x=y"],
                 ["--driver-memory", "2g", "-v", "--conf", "spark.x=y"],
                 [FORWARDER, "--set", "a=1", "--available-now", "--healthcheck-file=/tmp/h", "--a-new-flag", "x"],
                 id="job-options-anywhere"),
    pytest.param(["--packages=io.delta:delta-spark_4.2_2.13:4.4.0", "--config", "c.yaml", "jobs/benchmark.py",
                  "--runs", "3", "--master", "local[1]"],
                 ["--packages", "io.delta:delta-spark_4.2_2.13:4.4.0"],
                 ["jobs/benchmark.py", "--config", "c.yaml", "--runs", "3", "--master", "local[1]"], id="other-job"),
    pytest.param(["jobs/dead_letters.py", "--config", "F", "list", "--where", "error_class = 'X'"], [],
                 ["jobs/dead_letters.py", "--config", "F", "list", "--where", "error_class = 'X'"], id="dead-letters"),
    pytest.param(["dead-letters", "list", "--config", "F", "--master", "local[1]"], ["--master", "local[1]"],
                 [str(ROOT / "jobs" / "dead_letters.py"), "list", "--config", "F"], id="dead-letters-command"),
    pytest.param(["run", "--master", "local[1]", "--available-now"], ["--master", "local[1]"],
                 [FORWARDER, "--available-now"], id="run-command"),
])
def test_spark_submit_options_go_to_spark_submit_and_the_rest_to_the_job(
        tmp_path: Path, args: list[str], to_spark: list[str], to_job: list[str]) -> None:
    result, received = launch(tmp_path, *args)

    assert result.returncode == 0, result.stderr
    user_spark_args, job = len(received) - len(to_job) - len(to_spark), len(received) - len(to_job)
    assert (received[user_spark_args:job], received[job:]) == (to_spark, to_job)
    assert received[:2] == ["--conf", "spark.log.level=WARN"]  # the defaults come first: the user's win


def test_a_cluster_gets_synclib_and_extra_files_and_chooses_its_own_python(tmp_path: Path) -> None:
    result, received = launch(tmp_path, "--master", "yarn", "--deploy-mode=cluster", "--py-files", "extra.zip",
                              "--jars", "/x.jar", "--archives", "env.tar.gz#env", "--config", "cluster.yaml")

    assert result.returncode == 0, result.stderr
    options = dict(zip(received[:-3:2], received[1:-3:2], strict=True))
    assert options["--py-files"] == f"{tmp_path / 'venv' / 'synclib.zip'},extra.zip"
    assert options["--jars"] == (f"{tmp_path}/jvm/delta/delta.jar,{tmp_path}/jvm/spark-kafka/spark-kafka.jar,"
                                 f"{tmp_path}/jvm/s3a/s3a.jar,/x.jar")
    assert not any("spark.pyspark" in arg for arg in received)  # cluster mode, a non-local master
    assert received[-5:] == ["--archives", "env.tar.gz#env", FORWARDER, "--config", "cluster.yaml"]


def test_a_spark_submit_option_without_its_value_is_refused(tmp_path: Path) -> None:
    result, received = launch(tmp_path, "--config", "c.yaml", "--master")

    assert (result.returncode, received) == (1, [])
    assert "spark-submit.sh: option --master needs a value" in result.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_is_the_forwarders_own_without_spark(tmp_path: Path, flag: str) -> None:
    result, to_spark = launch(tmp_path, "--master", "local[2]", flag)

    assert result.returncode == 0, result.stderr
    assert to_spark == []
    assert result.stdout.startswith("synclib entry point.\n")
    assert "usage: synclib run" in result.stdout and "--available-now" in result.stdout


def test_local_mode_gets_a_spark_home_whose_python_processes_import_the_venvs_pyspark(tmp_path: Path) -> None:
    result, _ = launch(tmp_path, "--master", "local[2]")

    assert result.returncode == 0, result.stderr
    home = Path((tmp_path / SPARK_HOME_FILE).read_text())
    assert home == tmp_path / "venv" / "spark-home"
    pyspark = Path(importlib.util.find_spec("pyspark").submodule_search_locations[0])  # type: ignore[index,union-attr]
    assert {entry.name: entry.resolve() for entry in home.iterdir()} == {
        name: (pyspark / name).resolve() for name in ("bin", "sbin", "jars") if (pyspark / name).exists()}
    assert not (home / "python" / "lib" / "pyspark.zip").exists()  # Spark's PYTHONPATH entry for it


@pytest.mark.parametrize(("args", "given", "expected"), [
    pytest.param(["--master", "yarn"], None, "", id="cluster-ships-pyspark-zip"),
    pytest.param(["--master", "local[1]"], "/opt/spark", "/opt/spark", id="users-own-spark"),
])
def test_a_cluster_or_a_spark_home_already_set_keeps_its_own(
        tmp_path: Path, args: list[str], given: str | None, expected: str) -> None:
    result, _ = launch(tmp_path, *args, spark_home=given)

    assert result.returncode == 0, result.stderr
    assert (tmp_path / SPARK_HOME_FILE).read_text() == expected
    assert not (tmp_path / "venv" / "spark-home").exists()
