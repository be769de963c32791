"""The job's health-check file and Prometheus endpoint, through spark-submit runs.

A run gated by the leader (everything it committed forwarded, the rest held back) is scraped
on `/metrics`; its health-check file keeps being touched while it waits on the leader, and
stops being touched once the job is SIGKILLed or its query fails.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from synclib.embedded.broker import free_port
from tests.forwarder_runs import ROOT, _env, forwarder_command, write_config
from tests.support import produce_values, publish_commit, wait_until

START_TIMEOUT_S = 240.0
STALE_AFTER_S = 4.0  # a healthy job touches the file every second (logging.progress_interval)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _age(path: Path) -> float:
    return time.time() - path.stat().st_mtime


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def samples(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scraped(port: int) -> Samples:
    """The current samples; empty while the endpoint is not up."""
    try:
        return samples(scrape(port))
    except OSError:
        return {}


class MonitoredJob:
    """A forwarder started with spark-submit in a process group of its own, with a health-check
    file and a metrics port."""

    def __init__(self, tmp_path: Path, bootstrap: str, source: dict[str, Any]) -> None:
        config = write_config(tmp_path, "fwd", bootstrap, source)
        self.health = tmp_path / "probe" / "healthy"
        self.table = str(tmp_path / "fwd" / "table")
        self.port = free_port()
        settings = yaml.safe_load(config.read_text())
        settings["monitoring"] = {"metrics_port": self.port}
        config.write_text(yaml.safe_dump(settings, sort_keys=False))
        self.log = tmp_path / "forwarder.log"
        with open(self.log, "wb") as out:  # the health-check file from the command line
            self.process = subprocess.Popen(forwarder_command(config, "--healthcheck-file", str(self.health)),
                                            env=_env(), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_touched_repeatedly(self) -> None:
        wait_until(self.health.exists, START_TIMEOUT_S, f"the health-check file (log: {self.output()[-2000:]})")
        first = self.health.stat().st_mtime
        wait_until(lambda: self.health.stat().st_mtime > first, 10.0, "the health-check file touched again")

    def wait_stale(self) -> None:
        """The file stops being touched: it gets older than a healthy job lets it."""
        wait_until(lambda: _age(self.health) > STALE_AFTER_S, 120.0, "the health-check file to go stale")

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(60)


def assert_the_readme_reads(table: str, expected: dict[int, tuple[int, int]]) -> None:
    """The README's line for reading the table, in fresh interpreters: rows and last offset per
    partition, and exit code 0 every time (deltalake's `to_pyarrow_table()` aborts about half the
    runs at exit here, so five clean exits rule out a line with that race)."""
    readme = (ROOT / "README.md").read_text()
    (line,) = [line for line in readme.splitlines() if "QueryBuilder()" in line and line.startswith(".venv/bin/python")]
    code = line.split(' -c "', 1)[1].rstrip('"').replace("data/local/events", table)
    for _ in range(5):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-2000:]}"
        rows = re.findall(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|$", run.stdout, re.MULTILINE)
        assert {int(p): (int(n), int(last)) for p, n, last in rows} == expected, run.stdout


@pytest.fixture
def gated(bootstrap_servers: str, producer: Any, new_topic: Any, tmp_path: Path) -> Iterator[tuple[MonitoredJob, str]]:
    """A job on two partitions of 10 events each, of which the leader committed 6 and 4."""
    events, log = new_topic("monitored", 2), new_topic("monitored-log")
    leader = f"snuba-{uuid.uuid4().hex[:8]}"
    for partition, committed in ((0, 6), (1, 4)):
        produce_values(producer, events, partition, 10)
        publish_commit(producer, log, leader, events, partition, committed)
    job = MonitoredJob(tmp_path, bootstrap_servers, {"subscribe": events, "commit_log_topic": log,
                                                     "commit_groups": [leader]})
    try:
        yield job, events
    finally:
        job.close()


@pytest.mark.slow
def test_metrics_and_health_of_a_gated_run_and_a_killed_job(gated: tuple[MonitoredJob, str]) -> None:
    job, events = gated
    follower = {partition: (("partition", str(partition)), ("topic", events)) for partition in (0, 1)}

    def written_and_planned_on(got: Samples) -> bool:
        # The rows are counted from the batch's progress report; the follower offsets come from
        # the planner's status, written when it plans from the batch's end: a moment later.
        return got.get(("synclib_rows_written_total", ())) == 10 and all(
            got.get(("synclib_partition_follower_offset", labels)) == committed
            for labels, committed in ((follower[0], 6), (follower[1], 4)))

    done = wait_until(lambda: written_and_planned_on(got := scraped(job.port)) and got, START_TIMEOUT_S,
                      "10 rows written and the follower at the leader's offsets, on /metrics")
    text = scrape(job.port)
    print(text)  # the scrape, for the issue notes
    got = samples(text)
    for partition, committed in ((0, 6), (1, 4)):
        labels = (("partition", str(partition)), ("topic", events))
        assert got[("synclib_partition_follower_offset", labels)] == committed
        assert got[("synclib_partition_leader_offset", labels)] == committed
        assert got[("synclib_partition_high_watermark", labels)] == 10
        assert got[("synclib_partition_lag_offsets", labels)] == 10 - committed
        assert got[("synclib_partition_held_back_offsets", labels)] == 10 - committed
        assert got[("synclib_partition_stale", labels)] == 0
        states = {state: got[("synclib_partition_state", (labels[0], ("state", state), labels[1]))]
                  for state in ("UNKNOWN", "LOCAL_BEHIND", "REMOTE_BEHIND", "SYNCHRONIZED")}
        assert states == {"UNKNOWN": 0, "LOCAL_BEHIND": 0, "REMOTE_BEHIND": 0, "SYNCHRONIZED": 1}
    (age,) = [v for (name, _), v in got.items() if name == "synclib_leader_commit_age_seconds"]
    assert 0 <= age < START_TIMEOUT_S
    assert done[("synclib_batches_total", ())] >= 1
    assert got[("synclib_batch_duration_seconds_count", ())] == got[("synclib_batches_total", ())]
    assert got[("synclib_commit_log_skipped_total", ())] == 0
    assert got[("synclib_maintenance_runs_total", ())] >= 0

    assert_the_readme_reads(job.table, {0: (6, 5), 1: (4, 3)})
    job.wait_touched_repeatedly()  # nothing new from the leader: correctly waiting, healthy
    os.kill(job.process.pid, signal.SIGKILL)  # spark-submit (the JVM) only: the Python driver is orphaned
    job.wait_stale()


@pytest.mark.slow
def test_the_health_check_file_goes_stale_when_the_query_fails(gated: tuple[MonitoredJob, str], admin: Any,
                                                               producer: Any) -> None:
    job, events = gated
    job.wait_touched_repeatedly()
    # Recreate the topic between batches: under a read in flight the task would wait for its
    # stall deadline (readStallTimeout, 120 s) before naming the lost offsets.
    wait_until(lambda: scraped(job.port).get(("synclib_rows_written_total", ())) == 10, START_TIMEOUT_S,
               "the leader's 10 events written, on /metrics")
    admin.delete([events])  # failOnDataLoss (the default): the query fails naming the recreated topic
    admin.create(events, 2)
    produce_values(producer, events, 0, 2)
    assert job.process.wait(START_TIMEOUT_S) == 1, job.output()[-3000:]
    assert "forwarder: the query failed" in job.output()
    job.wait_stale()
