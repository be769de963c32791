"""The Databricks jobs (conf/databricks/): each is a job the Jobs API accepts, field for field,
by the official SDK's own types, and runs the forwarder as the deploy steps
(docs/operations/databricks.md) install it."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomllib
from databricks.sdk.service.jobs import JobsAPI, JobSettings

from synclib.app.session import SESSION_DEFAULTS
from synclib.cli import parser
from synclib.settings import ConfigError, load_config
from synclib.settings.values import table_name_parts

ROOT = Path(__file__).resolve().parents[2]

DATABRICKS = ROOT / "conf" / "databricks"
DEPLOY_STEPS = ROOT / "docs" / "operations" / "databricks.md"
# Where the deploy steps put the repository's jobs/ and conf/databricks/ in the workspace.
WORKSPACE_ROOT = "/Workspace/Shared/synclib/"
SECRET_REFERENCE = re.compile(r"\{\{secrets/[\w.-]+/[\w.-]+\}\}")


def in_repo(workspace_path: str) -> Path:
    assert workspace_path.startswith(WORKSPACE_ROOT), workspace_path
    return ROOT / workspace_path[len(WORKSPACE_ROOT):]


def forwarder_task_args(python_task: dict) -> argparse.Namespace:
    """The job arguments of a Databricks task that runs jobs/forwarder.py from the workspace."""
    assert in_repo(python_task["python_file"]) == ROOT / "jobs" / "forwarder.py"
    return parser().parse_args(["run", *(p if not p.startswith(WORKSPACE_ROOT) else str(in_repo(p))
                                         for p in python_task["parameters"])])


def assert_config_takes_exactly_these_from_the_environment(monkeypatch, args: argparse.Namespace,
                                                          names: Iterable[str]) -> None:
    """The Databricks config loads with `names` set (Kafka over SASL_SSL, a table by its three-part
    name, the checkpoint on a volume) and fails naming each of them when it is missing."""
    names = list(names)
    for name in names:
        monkeypatch.setenv(name, f"<{name}>" if name != "KAFKA_BOOTSTRAP_SERVERS" else "broker-1:9096")
    config = load_config(args.config, args.overrides)
    assert (config.kafka.security.protocol, config.kafka.security.password) == ("SASL_SSL", "<KAFKA_PASSWORD>")
    assert config.sink.table is not None and len(table_name_parts(config.sink.table)) == 3  # catalog.schema.table
    assert config.checkpoint.location.startswith("/Volumes/")
    assert config.sink.engine == "auto"
    for name in names:  # every secret the config needs comes from the job's environment
        monkeypatch.delenv(name)
        with pytest.raises(ConfigError, match=f"environment variable {name} is not set"):
            load_config(args.config, args.overrides)
        monkeypatch.setenv(name, "x")


def assert_installs_the_wheel_and_its_dependencies(wheels: list[str], packages: set[str]) -> str:
    """The job installs synclib's wheel and exactly its dependencies (the runtime brings Spark);
    the deploy steps copy the wheel where the job looks. Returns the deploy page."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [Path(w).name for w in wheels] == [f"{project['name']}-{project['version']}-py3-none-any.whl"]
    assert packages == {d for d in project["dependencies"] if not d.startswith("pyspark")}
    steps = DEPLOY_STEPS.read_text()  # the deploy steps put everything where the job looks
    assert f"import-dir --overwrite jobs {WORKSPACE_ROOT}jobs" in steps
    assert f"import-dir --overwrite conf/databricks {WORKSPACE_ROOT}conf/databricks" in steps
    assert f"dbfs:{Path(wheels[0]).parent}/" in steps
    return steps


def test_databricks_job_runs_the_forwarder_with_the_databricks_config(monkeypatch):
    job = json.loads((DATABRICKS / "job.json").read_text())
    (task,) = job["tasks"]
    (cluster,) = [c["new_cluster"] for c in job["job_clusters"] if c["job_cluster_key"] == task["job_cluster_key"]]
    assert job["max_concurrent_runs"] == 1 and task["max_retries"] == -1  # one query per checkpoint, restarted
    args = forwarder_task_args(task["spark_python_task"])
    assert Path(args.config) == DATABRICKS / "forwarder.yaml"

    # the cluster exists before the job's session: it sets what the job's own session would
    assert cluster["spark_conf"] == SESSION_DEFAULTS
    env = cluster["spark_env_vars"]
    assert all(SECRET_REFERENCE.fullmatch(value) for value in env.values()), env
    assert_config_takes_exactly_these_from_the_environment(monkeypatch, args, env)

    steps = assert_installs_the_wheel_and_its_dependencies(
        [lib["whl"] for lib in task["libraries"] if "whl" in lib],
        {lib["pypi"]["package"] for lib in task["libraries"] if "pypi" in lib})
    for reference in env.values():
        scope, key = reference.strip("{}").split("/")[1:]
        assert f"put-secret {scope} {key}" in steps


def test_databricks_serverless_job_runs_the_forwarder_available_now_continuously(monkeypatch):
    """Serverless compute (Spark Connect) runs streams with Trigger.AvailableNow only: each run
    forwards what is releasable and the continuous schedule starts the next; the Kafka settings
    come from an .env file on the volume (serverless jobs have no cluster environment)."""
    job = json.loads((DATABRICKS / "job-serverless.json").read_text())
    (task,) = job["tasks"]
    assert "job_clusters" not in job and "new_cluster" not in task and "libraries" not in task
    assert job["max_concurrent_runs"] == 1 and job["continuous"] == {"pause_status": "UNPAUSED"}
    args = forwarder_task_args(task["spark_python_task"])
    assert Path(args.config) == DATABRICKS / "forwarder.yaml" and args.available_now

    (environment,) = [e["spec"] for e in job["environments"] if e["environment_key"] == task["environment_key"]]
    wheels = [d for d in environment["dependencies"] if d.endswith(".whl")]
    steps = assert_installs_the_wheel_and_its_dependencies(
        wheels, {d for d in environment["dependencies"] if d not in wheels})

    (variables,) = [e["spec"] for e in job["environment_variables"]
                    if e["environment_variables_key"] == task["environment_variables_key"]]
    (env_file,) = variables["files"]
    assert f"dbfs:{Path(env_file).parent}/" in steps  # the deploy steps copy it there
    env_file_text = steps.split(f"cat > {Path(env_file).name} <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    names = re.findall(r"^([A-Z_]+)=", env_file_text, re.MULTILINE)
    assert names, env_file_text
    assert_config_takes_exactly_these_from_the_environment(monkeypatch, args, names)


# --- the Jobs API's own types -------------------------------------------------------------

JOBS = [DATABRICKS / "job.json", DATABRICKS / "job-serverless.json"]
DROPPED = "dropped by the SDK (no such field in the Jobs API, or a value outside its enum)"


def differences(sent: Any, kept: Any, path: str = "") -> Iterator[str]:
    """Where `kept` (the job after the SDK's typed round trip) differs from `sent`, as dotted paths."""
    if isinstance(sent, dict) and isinstance(kept, dict):
        for key in sent.keys() | kept.keys():
            if key not in kept:
                yield f"{path}{key}: {DROPPED}"
            elif key not in sent:
                yield f"{path}{key}: added by the SDK"
            else:
                yield from differences(sent[key], kept[key], f"{path}{key}.")
    elif isinstance(sent, list) and isinstance(kept, list) and len(sent) == len(kept):
        for index, (one, other) in enumerate(zip(sent, kept, strict=True)):
            yield from differences(one, other, f"{path}{index}.")
    elif sent != kept:
        yield f"{path.rstrip('.')}: {sent!r} reads back as {kept!r}"


def jobs_api_differences(job: dict[str, Any]) -> list[str]:
    """The job through the SDK's `JobSettings` (the body of `jobs create`, the `settings` of
    `jobs reset`) and back: an unknown or misspelt field, or a value outside one of the API's
    enums, does not come back as it was sent (the SDK checks no scalar's type)."""
    return sorted(differences(job, JobSettings.from_dict(job).as_dict()))


def test_job_settings_are_the_body_of_jobs_create() -> None:
    """JobSettings holds every field `jobs create` takes but the access control list."""
    create = set(inspect.signature(JobsAPI.create).parameters) - {"self", "access_control_list"}

    assert create == {field.name for field in dataclasses.fields(JobSettings)}


@pytest.mark.parametrize("path", JOBS, ids=lambda path: path.name)
def test_the_job_is_what_the_jobs_api_accepts_field_for_field(path: Path) -> None:
    job = json.loads(path.read_text())

    assert jobs_api_differences(job) == []


@pytest.mark.parametrize(("change", "expected"), [
    (lambda job: job["tasks"][0].update(max_retires=3),
     "tasks.0.max_retires: " + DROPPED),
    (lambda job: job["job_clusters"][0]["new_cluster"].update(num_worker=2),
     "job_clusters.0.new_cluster.num_worker: " + DROPPED),
    (lambda job: job["tasks"][0]["spark_python_task"].update(source="WORKSPAC"),
     "tasks.0.spark_python_task.source: " + DROPPED),
], ids=["misspelt task field", "misspelt cluster field", "value outside an enum"])
def test_a_job_the_api_would_not_take_as_written_is_found(change: Any, expected: str) -> None:
    job = json.loads((DATABRICKS / "job.json").read_text())
    change(job)

    assert jobs_api_differences(job) == [expected]
