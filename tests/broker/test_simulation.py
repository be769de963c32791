"""The simulated producer and leader group against a real Kafka-protocol broker."""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from harness.procmem import stat_fields
from synclib.embedded.broker import tied_to_this_process
from synclib.embedded.default_world import SimulationProcess
from synclib.embedded.leader import POLLS_PER_ROUND, SimulatedLeader
from synclib.embedded.simulation import SimulationError
from synclib.embedded.world import EventProducer, produce_backlog
from synclib.leader.commitlog import LEGACY_TIMESTAMP_HEADER, decode_commit
from tests import mock_cluster
from tests.support import wait_until

GROUP = "snuba-consumers"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(bootstrap_servers):
    return {"bootstrap_servers": bootstrap_servers}


@pytest.fixture
def sims():
    """Start simulators for one test; stop them all afterwards."""
    started = []

    def start(worker):
        started.append(worker.start())
        return worker

    yield start
    for worker in started:
        worker.stop()


def read_all(client, topic):
    """Every record of every partition of `topic`, up to its current end."""
    consumer = KafkaConsumer(**client, group_id=None, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records = []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


def end_offsets(client, topic, partitions):
    consumer = KafkaConsumer(**client, group_id=None)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        consumer.close()


def group_committed(client, topic, partition):
    consumer = KafkaConsumer(**client, group_id=GROUP, enable_auto_commit=False)
    try:
        return consumer.committed(TopicPartition(topic, partition))
    finally:
        consumer.close()


def latest_commits(client, log):
    """The last published commit per partition of the commit-log topic."""
    return {c.partition: c for c in (decode_commit(r.key, r.value, r.headers) for r in read_all(client, log))}


def produce(sims, client, topic, total, **kwargs):
    """Produce `total` events at a high rate; return the acknowledged end offsets."""
    producer = sims(EventProducer(topic, client, rate=2000, total=total, **kwargs))
    assert producer.join(30)
    producer.check()
    return producer.produced()


def test_producer_keeps_rate_and_high_watermark_is_exact(new_topic, client, sims):
    topic = new_topic("events", partitions=3)
    started = time.monotonic()
    producer = sims(EventProducer(topic, client, rate=200, total=300, event_bytes=300, seed=1))
    assert producer.join(30)
    elapsed = time.monotonic() - started
    producer.check()
    assert 1.45 <= elapsed < 6, f"300 events at 200/s took {elapsed:.2f}s"
    assert producer.produced() == {0: 100, 1: 100, 2: 100}
    assert end_offsets(client, topic, 3) == {0: 100, 1: 100, 2: 100}
    records = read_all(client, topic)
    events = [json.loads(r.value) for r in records]
    assert {len(r.value) for r in records} == {300}
    assert len({e["event_id"] for e in events}) == 300
    assert {e["project_id"] for e in events} <= {1, 2, 3, 4, 5}
    assert all(r.key == str(e["project_id"]).encode() for r, e in zip(records, events, strict=True))
    assert {"timestamp", "platform", "message"} <= set(events[0])


def test_produce_backlog_returns_exact_end_offsets(new_topic, bootstrap_servers, client):
    topic = new_topic("backlog", partitions=2)
    ends = produce_backlog(bootstrap_servers, topic, 2, 2000, 200)
    assert ends == {0: 2000, 1: 2000}
    assert end_offsets(client, topic, 2) == ends
    assert {len(r.value) for r in read_all(client, topic)[:10]} == {200}


def test_leader_commits_only_after_lag_then_catches_up(new_topic, client, sims):
    topic, log = new_topic("events", partitions=2), new_topic("commit-log")
    lag = 0.8
    leader_started = time.time()
    leader = sims(SimulatedLeader(topic, log, client, lag=lag, commit_interval=0.1))
    producer = sims(EventProducer(topic, client, rate=200, total=200))
    assert producer.join(30)
    produced = producer.produced()
    wait_until(lambda: leader.committed() == produced, what="leader caught up with the producer")
    leader.check()

    records = read_all(client, log)
    assert min(r.timestamp for r in records) / 1000 >= leader_started + lag - 0.002
    assert all(r.key.decode().startswith(f"{topic}:") and r.key.decode().endswith(f":{GROUP}") for r in records)
    commits = latest_commits(client, log)
    assert {p: c.offset for p, c in commits.items()} == produced
    events = read_all(client, topic)
    for partition, commit in commits.items():
        last = max((r for r in events if r.partition == partition), key=lambda r: r.offset)
        assert commit.orig_message_ts == last.timestamp / 1000
        assert commit.received_p99 is not None and commit.received_p99 <= commit.orig_message_ts
    assert all(group_committed(client, topic, p) == offset for p, offset in produced.items())
    assert leader.stats().consumed == 200


def test_the_leader_polls_a_few_times_a_round_however_often_the_producer_sends(new_topic, client, sims):
    """Paced (POLLS_PER_ROUND): a poll per producer burst (every 50 ms) would make the broker scan
    every partition twenty times a second."""
    topic, log = new_topic("events", partitions=2), new_topic("commit-log")
    leader = sims(SimulatedLeader(topic, log, client, lag=0, commit_interval=0.4))
    producer = sims(EventProducer(topic, client, rate=200, total=400))
    assert producer.join(30)
    wait_until(lambda: leader.committed() == producer.produced(), what="leader caught up with the producer")
    stats = leader.stats()
    assert stats.consumed == 400
    assert stats.polls <= (POLLS_PER_ROUND + 1) * (stats.rounds + 1)  # the paced polls and the one ending a round


def test_legacy_format_decodes_with_timestamp_header(new_topic, client, sims):
    topic, log = new_topic("events"), new_topic("commit-log")
    before = time.time()
    produced = produce(sims, client, topic, 20)
    leader = sims(SimulatedLeader(topic, log, client, lag=0, commit_interval=0.05, legacy_format=True))
    wait_until(lambda: leader.committed() == produced, what="legacy commit")
    (record,) = read_all(client, log)
    assert record.value == b"20"
    assert [name for name, _ in record.headers] == [LEGACY_TIMESTAMP_HEADER]
    commit = decode_commit(record.key, record.value, record.headers)
    assert (commit.group, commit.topic, commit.partition, commit.offset) == (GROUP, topic, 0, 20)
    assert before - 1 <= commit.orig_message_ts <= time.time()


def paused_leader(new_topic, client, sims, total):
    """A leader on a new two-partition topic, caught up with `total` produced events, then paused;
    returns it, the topic, the commit-log topic and the produced end offsets."""
    topic, log = new_topic("events", partitions=2), new_topic("commit-log")
    leader = sims(SimulatedLeader(topic, log, client, lag=0, commit_interval=0.05))
    produced = produce(sims, client, topic, total)
    wait_until(lambda: leader.committed() == produced, what="leader caught up")
    leader.pause()
    return leader, topic, log, produced


def test_paused_leader_stops_committing_until_resumed(new_topic, client, sims):
    leader, topic, _, first = paused_leader(new_topic, client, sims, 20)
    published = leader.stats().published
    second = produce(sims, client, topic, 20)
    wait_until(lambda: leader.stats().consumed == 40, what="paused leader still consumes")
    rounds = leader.stats().rounds
    wait_until(lambda: leader.stats().rounds >= rounds + 3, what="commit rounds while paused")
    assert leader.committed() == first
    assert leader.stats().published == published
    leader.resume()
    wait_until(lambda: leader.committed() == second, what="commits after resume")


def test_commit_to_resets_a_partition_and_the_leader_consumes_again(new_topic, client, sims):
    leader, topic, log, produced = paused_leader(new_topic, client, sims, 40)
    leader.commit_to(0, 5)
    assert leader.committed() == {0: 5, 1: 20}
    assert group_committed(client, topic, 0) == 5
    assert latest_commits(client, log)[0].offset == 5
    leader.resume()
    wait_until(lambda: leader.committed() == produced, what="caught up again after the reset")
    assert leader.stats().consumed == 40 + 15
    assert leader.stats().resets == 1


def test_leader_resumes_from_the_groups_committed_offsets(new_topic, client, sims):
    topic, log = new_topic("events"), new_topic("commit-log")
    first = sims(SimulatedLeader(topic, log, client, lag=0, commit_interval=0.05))
    produce(sims, client, topic, 20)
    wait_until(lambda: first.committed() == {0: 20}, what="first leader commits")
    first.stop()
    produce(sims, client, topic, 10)
    second = sims(SimulatedLeader(topic, log, client, lag=0, commit_interval=0.05))
    wait_until(lambda: second.committed() == {0: 30}, what="second leader commits")
    assert second.stats().consumed == 10


def test_a_dead_thread_surfaces_its_cause(new_topic, client, sims):
    topic = new_topic("events")
    producer = sims(EventProducer(topic, {**client, "max_request_size": 1000}, rate=1000, event_bytes=5000))
    assert producer.join(30)
    assert producer.failure is not None
    with pytest.raises(SimulationError, match="MessageSizeTooLarge"):
        producer.check()


def simulation_arguments(bootstrap_servers):
    """The embedded default's simulation on two new topics (simulate creates them): 2 partitions."""
    suffix = uuid.uuid4().hex[:8]
    return {"bootstrap_servers": bootstrap_servers, "events_topic": f"events-{suffix}",
            "commit_log_topic": f"commit-log-{suffix}", "partitions": 2, "rate": 200, "event_bytes": 200,
            "group": GROUP, "lag": 0.2, "commit_interval": 0.1}


@mock_cluster.NO_CREATE_TOPICS  # simulate() creates its topics with Kafka's admin API
def test_the_embedded_defaults_simulation_runs_in_a_process_of_its_own_and_stops_cleanly(bootstrap_servers, client):
    arguments = simulation_arguments(bootstrap_servers)
    simulation = SimulationProcess(arguments, "INFO").start()
    try:
        assert simulation.pid != os.getpid()
        commits = wait_until(lambda: (c := latest_commits(client, arguments["commit_log_topic"])).keys() == {0, 1}
                             and all(commit.offset > 0 for commit in c.values()) and c,
                             what="the simulated leader's commits of both partitions")
    finally:
        assert simulation.stop() == 0
    ends = end_offsets(client, arguments["events_topic"], 2)
    assert all(commit.group == GROUP and 0 < commit.offset <= ends[p] for p, commit in commits.items())


STARTER = """
import json, sys, time
from synclib.embedded.default_world import SimulationProcess
print(SimulationProcess(json.loads(sys.argv[1]), "INFO").start().pid, flush=True)
time.sleep(300)
"""


@mock_cluster.NO_CREATE_TOPICS
@pytest.mark.skipif(tied_to_this_process(["true"]) == ["true"] or not os.path.isdir("/proc"),
                    reason="needs Linux's /proc and util-linux's setpriv with --pdeathsig")
def test_the_simulation_process_ends_when_its_starter_is_killed(bootstrap_servers):
    starter = subprocess.Popen([sys.executable, "-c", STARTER, json.dumps(simulation_arguments(bootstrap_servers))],
                               stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert starter.stdout is not None
        child = int(starter.stdout.readline())
        starter.kill()
        starter.wait(10)
        wait_until(lambda: (fields := stat_fields(child)) is None or fields[0] == "Z",
                   what=f"the simulation (pid {child}) to end with its starter")
    finally:
        starter.kill()
