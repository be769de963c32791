"""Broker failover under a running forwarder (issue 18) on a three-node Apache Kafka cluster
(replication 3, min.insync.replicas 2): SIGKILL the broker leading events partitions, later
the one leading the commit-log partition, restart them, then restart all three one by one
(controlled shutdowns). A producer (acks=all, retrying) and a simulated leader run all along.
Forwarding resumes within the source's deadlines, and the table holds every offset the leader
released exactly once and nothing beyond. The timeline (fault -> the leader has released every
event produced before the fault -> the table holds them; rows/s over 6 s before and after) is
printed and written to <tmp>/failover-timeline.json with the planner's retry warnings and any
failed task or query. A fault not ridden out says which side stalled, the leader or the forwarder.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError

from harness.apache_kafka import KafkaCluster
from harness.job_files import verify_table
from harness.job_world import LEADER_LAG_S, HarnessError, JobRun, KafkaWorld, wait_for, write_config
from synclib.embedded.leader import SimulatedLeader
from synclib.embedded.world import EventProducer
from tests.forwarder_runs import table_offsets

RATE = 150  # events/s over 3 partitions
# The source's deadlines for this run: a kill must be ridden out well within them.
DEADLINE_S = 60.0
RESUME_MAX_S = DEADLINE_S  # from the leader's first release after a fault to the table holding it
LEADER_RECOVERY_S = 120.0  # the simulated leader's own clients (kafka-python) riding out the fault
STEADY_S = 6.0
JOB_START_S = 300.0  # spark-submit to the first Delta commit; minutes on a loaded 2-core machine

pytestmark = pytest.mark.slow


class ReplicatedWorld(KafkaWorld):
    """`KafkaWorld` on the cluster, its topics replicated to every node."""

    def __init__(self, cluster: KafkaCluster) -> None:
        super().__init__(cluster.bootstrap_servers, rate=RATE, partitions=3)
        self.cluster = cluster

    def client(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap.split(","), "acks": "all"}

    def start(self) -> ReplicatedWorld:
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap.split(","))
        try:
            admin.create_topics([NewTopic(self.events, self.partitions, 3), NewTopic(self.commit_log, 1, 3)])
        finally:
            admin.close()
        wait_for(lambda: len(self.leaders(self.events)) == self.partitions and self.leaders(self.commit_log),
                 30.0, "the topics' leaders")
        self.producer = EventProducer(self.events, self.client(), rate=self.rate, event_bytes=self.event_bytes).start()
        self.leader = SimulatedLeader(self.events, self.commit_log, self.client(), group=self.group,
                                      lag=LEADER_LAG_S, commit_interval=0.5).start()
        return self

    def describe(self, topic: str) -> list[dict[str, Any]]:
        """The topic's partitions (leader, ISR); retried while a request meets a dead node."""
        def attempt() -> list[dict[str, Any]] | None:
            try:
                admin = KafkaAdminClient(bootstrap_servers=self.bootstrap.split(","), request_timeout_ms=5000)
                try:
                    described: list[dict[str, Any]] = admin.describe_topics([topic])
                finally:
                    admin.close()
            except KafkaError:
                return None
            return list(described[0]["partitions"]) if described and described[0]["error_code"] == 0 else []
        return wait_for(attempt, 60.0, f"a description of {topic}", interval_s=0.5)  # type: ignore[no-any-return]

    def leaders(self, topic: str) -> dict[int, int]:
        return {p["partition_index"]: p["leader_id"] for p in self.describe(topic) if p["leader_id"] >= 0}

    def fully_replicated(self) -> bool:
        partitions = self.describe(self.events) + self.describe(self.commit_log)
        return bool(partitions) and all(len(p["isr_nodes"]) == 3 for p in partitions)


@dataclass
class Sampler:
    """The table's recorded end offsets and the leader's released offsets (sums over the
    partitions) over time, polled on a thread."""

    table: Path
    topic: str
    released: Callable[[], int]
    samples: list[tuple[float, int]] = field(default_factory=list)
    releases: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def forwarded(self) -> int:
        return sum(end for (topic, _), end in table_offsets(str(self.table)).items() if topic == self.topic)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.releases.append((time.monotonic(), self.released()))
            try:
                self.samples.append((time.monotonic(), self.forwarded()))
            except Exception:  # noqa: BLE001 - a table mid-commit: the next sample
                continue

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def at(self, moment: float) -> int:
        before = [n for t, n in self.samples if t <= moment]
        return before[-1] if before else 0

    def rate(self, start: float, end: float) -> float:
        return (self.at(end) - self.at(start)) / max(end - start, 1e-9)

    def first_release(self, moment: float, at_least: int) -> float | None:
        """When, after `moment`, the leader had released `at_least` events (None: not yet)."""
        return next((t for t, n in self.releases if t > moment and n >= at_least), None)

    def stall(self, moment: float) -> str:
        """Which side stopped after `moment`: the leader's releases and the table's offsets,
        each with the time of its last advance."""
        def since(series: list[tuple[float, int]]) -> str:
            after = [(t, n) for t, n in series if t > moment]
            if not after:
                return "no sample"
            first = after[0][1]
            moved = [t for (_, previous), (t, n) in pairwise(after) if n != previous]
            last = f"last advance at +{moved[-1] - moment:.1f}s" if moved else "no advance"
            return f"{first} -> {after[-1][1]} ({last})"
        return f"the leader released {since(self.releases)}; the table holds {since(self.samples)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(3, directory=str(tmp_path_factory.mktemp("kafka-3"))) as three:
        yield three


def test_broker_kills_and_a_rolling_restart_under_a_running_forwarder_lose_and_duplicate_nothing(
        cluster: KafkaCluster, tmp_path: Path) -> None:
    timeline: list[dict[str, Any]] = []
    with ReplicatedWorld(cluster) as world:
        deadlines = {"broker_timeout": f"{DEADLINE_S:g}s", "commit_log_timeout": f"{DEADLINE_S:g}s",
                     "read_stall_timeout": f"{DEADLINE_S:g}s"}
        config = write_config(tmp_path / "job.yaml", world.config(
            tmp_path, source=deadlines, trigger={"min_interval": "500ms"},
            logging={"level": "INFO", "progress": True, "progress_interval": "1s"}))
        job = JobRun(config, tmp_path, "job")
        try:
            leader = world.leader
            assert leader is not None
            with Sampler(tmp_path / "table", world.events, lambda: sum(leader.committed().values())) as sampler:
                wait_for(lambda: sampler.forwarded() > 0, JOB_START_S, "the first rows in the table", job)

                def fault(name: str, act: Any) -> None:
                    """`act`; wait until the leader has released every event produced before it, then
                    until the table holds them: the forwarder's part must fit the source's deadlines."""
                    released = sum(world.committed().values())  # the leader and the producer are alive
                    world.producer.check()  # type: ignore[union-attr]
                    wait_for(lambda: sampler.forwarded() >= released, RESUME_MAX_S, "a caught-up forwarder", job, 0.5)
                    time.sleep(STEADY_S)  # a steady stretch before each fault, for the rate before
                    # A commit round in flight at the fault may still release a little; this much
                    # (events the leader had not even received) takes a round published after it.
                    produced = sum(world.producer.produced().values())  # type: ignore[union-attr]
                    moment = time.monotonic()
                    what = act()
                    try:
                        leader_back = wait_for(lambda: sampler.first_release(moment, produced), LEADER_RECOVERY_S,
                                               f"the leader to release offsets produced before {name}", job, 0.1)
                        resumed = wait_for(lambda: next((t for t, n in sampler.samples if t > moment and n >= produced),
                                                        None), leader_back + RESUME_MAX_S - time.monotonic(),
                                           f"forwarding after {name}", job, 0.1)
                    except HarnessError as stalled:
                        raise HarnessError(f"{stalled}: {sampler.stall(moment)}; {what}\n{job.tail(60)}") from None
                    time.sleep(max(0.0, resumed + STEADY_S - time.monotonic()))
                    timeline.append({
                        "fault": name, "what": what,
                        "leader_released_s": round(leader_back - moment, 2),
                        "forwarded_s": round(resumed - moment, 2),
                        "rows_per_s_before": round(sampler.rate(moment - STEADY_S, moment), 1),
                        "rows_per_s_after": round(sampler.rate(resumed, resumed + STEADY_S), 1),
                    })

                def kill_leader_of(topic: str, avoid: int | None = None) -> str:
                    leaders = world.leaders(topic)
                    candidates = [n for n in leaders.values() if n != avoid] or list(leaders.values())
                    node = max(set(candidates), key=candidates.count)
                    cluster.node(node).kill()
                    killed.append(node)
                    return f"node {node} (leaders of {topic} before: {leaders})"

                def restart(node: int) -> None:
                    cluster.node(node).start()
                    cluster.node(node).wait_ready(90.0)
                    wait_for(world.fully_replicated, 90.0, f"node {node} back in every ISR", job, interval_s=0.5)

                commit_log_leader = world.leaders(world.commit_log)[0]
                killed: list[int] = []
                fault("SIGKILL of the broker leading events partitions",
                      lambda: kill_leader_of(world.events, avoid=commit_log_leader))
                restart(killed[-1])
                fault("SIGKILL of the broker leading the commit-log partition",
                      lambda: kill_leader_of(world.commit_log))
                restart(killed[-1])
                for node in cluster.nodes:
                    fault(f"controlled restart of node {node.node_id} (rolling)",
                          lambda node=node: (node.stop(), restart(node.node_id), f"node {node.node_id}")[-1])
                produced = world.finish_producing(timeout_s=120.0)
                committed = world.committed()
                assert committed == produced
                wait_for(lambda: verify_table(tmp_path / "table", world.events, committed).covers(committed),
                         RESUME_MAX_S * 2, f"the table to cover the leader's {committed}", job, interval_s=0.5)
            job.terminate()
            assert job.wait(120.0) == 0, job.tail()
        finally:
            print(json.dumps({"timeline so far": timeline}, indent=2))
            if job.returncode is None:
                job.kill()
        verdict = verify_table(tmp_path / "table", world.events, committed)
    output = job.output()
    report = {
        "timeline": timeline,
        "verdict": {"rows": verdict.rows, "duplicates": verdict.duplicates, "beyond": verdict.beyond,
                    "gaps": verdict.gaps, "recorded": verdict.recorded},
        "retry_warnings": len(re.findall(r"retrying", output)),
        "failed_tasks": len(re.findall(r"Lost task|Task \d+ in stage .* failed", output)),
        "query_failures": output.count("the query failed"),
    }
    (tmp_path / "failover-timeline.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    assert verdict.holds_exactly(committed), verdict
    assert report["query_failures"] == 0
