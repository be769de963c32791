"""Where a wide topic's micro-batch spends its time, one piece at a time and without Spark (issue 45).

    python -m benchmarks.wide planner --partitions 1024   # latestOffset + partitions as the job calls them
    python -m benchmarks.wide read --partitions 1024 [--apache]  # one read task over every partition
    python -m benchmarks.wide follower --partitions 1024 --groups 3  # the commit-log follower's catch-up
    python -m benchmarks.wide status --partitions 1024    # the status command after 40 s of the embedded world
    python -m benchmarks.wide world --partitions 1024     # the embedded world's own CPU: what it leaves the job

Each prints one line: wall and this process's CPU (all its threads), with the load. The planner and the
status command run against the embedded world at 2,000 events/s (the README's first command); quote them
against `--partitions 4` measured in the same sitting.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator

from kafka import KafkaProducer

from harness.procmem import cpu_seconds, descendants
from synclib.app.status import collect, format_status
from synclib.embedded.broker import EmbeddedBroker, TopicAdmin
from synclib.embedded.default_world import EmbeddedWorld
from synclib.embedded.world import produce_backlog
from synclib.kafka.admin import KafkaMetadata
from synclib.kafka.reader import KafkaInputPartition, read_partition
from synclib.leader.commitlog import Commit, encode_commit
from synclib.leader.follower import CommitLogFollower
from synclib.offsets import OffsetRange, parse_offsets_json
from synclib.schema import output_schema
from synclib.settings.loading import load_config
from synclib.settings.source import SourceOptions

EVENTS, LOG, GROUP = "events", "snuba-commit-log", "snuba-consumers"


@contextlib.contextmanager
def _world(partitions: int) -> Iterator[EmbeddedWorld]:
    world = EmbeddedWorld(events_topic=EVENTS, commit_log_topic=LOG, leader_group=GROUP, partitions=partitions,
                          events_per_second=2000, event_bytes=2048, leader_lag=2.0, leader_commit_interval=1.0)
    with world:
        yield world


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(started: tuple[float, float]) -> str:
    return f"wall {time.perf_counter() - started[0]:.3f}s cpu {time.process_time() - started[1]:.3f}s"


def planner(partitions: int, batches: int) -> str:
    """Median per batch of the planning calls the job makes (`awaitLeaderCommits`, a status file)."""
    from pyspark.sql.types import StructType  # the source module needs pyspark; no session is started

    from synclib.source.datasource import SynchronizedKafkaStreamReader

    asked: list[int] = []
    ask = KafkaMetadata.high_watermarks

    def counted(self: KafkaMetadata, tps: object) -> dict[tuple[str, int], int]:
        wanted = list(tps)  # type: ignore[call-overload]
        asked.append(len(wanted))
        return ask(self, wanted)

    KafkaMetadata.high_watermarks = counted  # type: ignore[method-assign]
    with _world(partitions) as world, tempfile.TemporaryDirectory() as directory:
        reader = SynchronizedKafkaStreamReader(SourceOptions.from_spark({
            "kafka.bootstrap.servers": world.bootstrap_servers, "subscribe": EVENTS, "commitLogTopic": LOG,
            "synchronizeCommitGroups": GROUP, "statusFile": os.path.join(directory, "status.json"),
            "awaitLeaderCommits": "true"}), StructType())
        time.sleep(8)  # the producer and the leader under way
        start = reader.initialOffset()
        per_batch: list[tuple[float, float, int, int]] = []
        while len(per_batch) < batches:
            asked.clear()
            began = _clock()
            end = reader.latestOffset(start, reader.getDefaultReadLimit())
            before, after = parse_offsets_json(start), parse_offsets_json(end)
            moved = sum(1 for tp, offset in after.items() if before.get(tp) != offset)
            if moved:
                reader.partitions(start, end)
                per_batch.append((time.perf_counter() - began[0], time.process_time() - began[1], sum(asked), moved))
                time.sleep(0.3)  # the batch itself
            start = end
        reader.stop()
    wall, cpu, watermarks, moved = (statistics.median(column) for column in zip(*per_batch, strict=True))
    return (f"planner at {partitions} partitions, per batch (median of {batches}): wall {wall:.3f}s cpu {cpu:.3f}s, "
            f"{watermarks:.0f} high watermarks asked, {moved:.0f} partitions moved")


def read(partitions: int, apache: bool) -> str:
    """One read task over 2 records in each partition (2,048 rows at 1,024 partitions), warm."""
    from harness.apache_kafka import KafkaCluster

    with KafkaCluster(in_memory=True) if apache else EmbeddedBroker() as broker:
        servers = broker.bootstrap_servers
        admin = TopicAdmin(servers)
        admin.create(EVENTS, partitions)
        admin.close()
        ends = produce_backlog(servers, EVENTS, partitions, 2, 2048)
        task = KafkaInputPartition([OffsetRange(EVENTS, p, 0, end) for p, end in sorted(ends.items())])
        for _ in range(2):  # the second read, on the worker's warm consumer (connected, metadata known)
            began = _clock()
            rows = sum(batch.num_rows for batch in read_partition(
                task, {"bootstrap_servers": [servers]}, output_schema(False), include_headers=False,
                fail_on_data_loss=True, poll_timeout_ms=1000, stall_timeout_s=120))
            took = _since(began)
    broker_name = "Apache Kafka" if apache else "Tansu"
    return f"read task over {partitions} partitions ({broker_name}): {rows} rows, {took}"


def follower(partitions: int, groups: int, rounds: int) -> str:
    """The follower catching up on `rounds` leader commits of every partition by `groups` groups."""
    with EmbeddedBroker() as broker:
        admin = TopicAdmin(broker.bootstrap_servers)
        admin.create(LOG, 1)
        admin.close()
        producer = KafkaProducer(bootstrap_servers=[broker.bootstrap_servers], linger_ms=20, batch_size=1 << 20)
        for round_ in range(1, rounds + 1):
            for group in range(groups):
                for partition in range(partitions):
                    key, value = encode_commit(Commit(f"g{group}", EVENTS, partition, 100 * round_, time.time()))
                    producer.send(LOG, key=key, value=value, partition=0)
        producer.close()
        tracker = CommitLogFollower(LOG, [f"g{g}" for g in range(groups)],
                                    {"bootstrap_servers": [broker.bootstrap_servers]})
        began = _clock()
        with tracker:
            tracker.wait_until_caught_up(300)
            took = _since(began)
    commits = partitions * groups * rounds
    return f"follower: {commits} commits ({partitions} partitions x {groups} groups x {rounds}): {took}"


def status(partitions: int) -> str:
    """The status command (no table) after 40 s of the embedded world."""
    with _world(partitions) as world, tempfile.TemporaryDirectory() as directory:
        time.sleep(40)
        config = load_config("conf/local.yaml", [f"sink.path={directory}/table", f"checkpoint.location={directory}/cp"])
        began = _clock()
        text = format_status(collect(config, world.bootstrap_servers))
        return f"status at {partitions} partitions: {_since(began)}, {len(text.splitlines())} lines"


def world(partitions: int, seconds: float = 20.0) -> str:
    """The CPU of the embedded world's processes (the broker; the producer and the leader) at
    2,000 events/s, after 8 s: on one machine, what the world leaves the job."""
    with _world(partitions) as world:
        time.sleep(8)
        pids = [pid for pid in descendants(os.getpid()) if pid != os.getpid()]
        before = {pid: cpu_seconds(pid) or 0.0 for pid in pids}
        time.sleep(seconds)
        cores = {pid: ((cpu_seconds(pid) or 0.0) - before[pid]) / seconds for pid in pids}
        broker = cores.get(world.broker.pid, 0.0)
    return (f"embedded world at {partitions} partitions: broker {broker:.2f} cores, "
            f"producer and leader {sum(cores.values()) - broker:.2f} cores")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("piece", choices=("planner", "read", "follower", "status", "world"))
    parser.add_argument("--partitions", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=8, help="planner: batches measured")
    parser.add_argument("--apache", action="store_true", help="read: on Apache Kafka 4 instead of Tansu")
    parser.add_argument("--groups", type=int, default=3, help="follower: leader groups")
    parser.add_argument("--rounds", type=int, default=10, help="follower: commits of every partition per group")
    args = parser.parse_args()
    line = {"planner": lambda: planner(args.partitions, args.batches),
            "read": lambda: read(args.partitions, args.apache),
            "follower": lambda: follower(args.partitions, args.groups, args.rounds),
            "status": lambda: status(args.partitions),
            "world": lambda: world(args.partitions)}[args.piece]()
    print(f"{line}; load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
