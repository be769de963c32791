"""`synclib status --config FILE [--json]`: where a forwarder stands, without Spark.

Per partition of the subscription: the follower's offset (the offsets recorded in the Delta
table's latest synclib commit), each followed leader group's committed offset (the commit
log read to its end, or the groups' committed offsets with `remote_offsets: group`), the
high watermark, the lag (high watermark - follower offset), the partition state and how old
the leader's newest commit is (from its `orig_message_ts`; unknown with `remote_offsets:
group`, whose offsets carry no time). All offsets are next offsets, as everywhere in synclib.
And the gate latency of the table's last `RECENT_BATCHES` commits: from each leader commit (the
commit-log record's time) to the Delta commit holding its offsets (`synclib.app.gate_latency`).

The embedded default starts its broker on a random port; a running embedded job advertises
it in `<checkpoint>/synclib/embedded-broker.json` (see `advertise_embedded_broker`), which
this command reads. `--bootstrap HOST:PORT` overrides the address in any case.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable
from kafka.errors import KafkaError

from synclib import processes, spark_checkpoint
from synclib.app.gate_latency import describe, quantiles, table_latencies
from synclib.app.preflight import check_job_kafka
from synclib.app.progress import table
from synclib.app.storage import StorageUnavailable, check_storage
from synclib.app.tables import TableNotRecorded, sink_locations
from synclib.dead_letters.table import dead_letter_counts
from synclib.delta.table import TableSummary, open_table, recent_batches, table_summary
from synclib.exit_codes import ExitCode
from synclib.kafka.admin import KafkaMetadata
from synclib.kafka.preflight import KafkaUnavailable
from synclib.leader.tracker import Release, RemoteOffsetsError
from synclib.leader.trackers import remote_offsets_tracker
from synclib.locations import write_text
from synclib.offsets import TopicPartitionKey
from synclib.settings import ForwarderConfig, SourceOptions
from synclib.source.state import Offsets, get_state_from_offsets
from synclib.source.status import (
    LeaderCommits,
    PartitionStatus,
    group_offsets,
    leader_commit_age,
)

DEFAULT_TIMEOUT_S = 30.0
RECENT_BATCHES = 32  # the table's newest commits the gate latency is measured over


class StatusError(RuntimeError):
    """The status cannot be computed; the message says what is missing."""


# --- the embedded broker's address ---------------------------------------------------------

def embedded_broker_file(checkpoint_location: str) -> str:
    return spark_checkpoint.synclib_file(checkpoint_location, spark_checkpoint.EMBEDDED_BROKER)


@contextlib.contextmanager
def advertise_embedded_broker(checkpoint_location: str, bootstrap_servers: str) -> Iterator[str]:
    """Write the running embedded broker's address next to the job's checkpoint; remove it on exit."""
    path = embedded_broker_file(checkpoint_location)
    write_text(path, json.dumps({"bootstrap_servers": bootstrap_servers, "pid": os.getpid(),
                                "started_at": time.time()}))
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def embedded_bootstrap(checkpoint_location: str) -> str:
    """The address advertised by the embedded job running on this checkpoint."""
    path = embedded_broker_file(checkpoint_location)
    try:
        with open(path) as file:
            advertised = json.load(file)
    except FileNotFoundError:
        raise StatusError(f"the embedded forwarder is not running ({path} does not exist); "
                          "start it, or pass --bootstrap HOST:PORT") from None
    except ValueError as exc:
        raise StatusError(f"{path} is not valid JSON: {exc}") from None
    if not processes.alive(int(advertised["pid"])):
        raise StatusError(f"the embedded forwarder that wrote {path} (pid {advertised['pid']}) "
                          "is not running any more")
    return str(advertised["bootstrap_servers"])


# --- collecting ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StatusReport:
    """What the command prints: the sources it read and each partition (the planner's contract;
    `stale` is None, the command does not watch the leader over time)."""

    checked_at: float
    bootstrap_servers: str
    remote_offsets: str
    commit_log_topic: str | None
    groups: tuple[str, ...]
    table: TableSummary | None
    partitions: tuple[PartitionStatus, ...]
    # With sink.dead_letters: the dead-letter table and its rows per topic ({} before the first).
    dead_letters: tuple[str, dict[str, int]] | None = None
    # p50 and p99 seconds over the table's last RECENT_BATCHES commits; None without a measure.
    gate_latency: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        letters = self.dead_letters
        return {"checked_at": self.checked_at, "bootstrap_servers": self.bootstrap_servers,
                "remote_offsets": self.remote_offsets, "commit_log_topic": self.commit_log_topic,
                "groups": list(self.groups), "table": None if self.table is None else self.table.to_json(),
                "partitions": [p.to_json() for p in self.partitions],
                "dead_letters": None if letters is None else {"path": letters[0], "by_topic": letters[1]},
                "gate_latency": None if self.gate_latency is None else {
                    "batches": RECENT_BATCHES, "p50_s": self.gate_latency[0], "p99_s": self.gate_latency[1]}}


def collect(config: ForwarderConfig, bootstrap_servers: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> StatusReport:
    """The forwarder's status (raises `StatusError`, `KafkaError`)."""
    reader_options = config.source_options(bootstrap_servers)
    reader_options.setdefault("kafka.bootstrap.timeout.ms", str(int(timeout_s * 1000)))
    options = SourceOptions.from_spark(reader_options)
    locations = sink_locations(config)  # a table by name: where the job's catalog placed it
    opened = open_table(locations.table)  # once: the summary and the gate latency read the same log
    summary = table_summary(locations.table, opened)
    follower = (summary.offsets if summary is not None else None) or {}
    metadata = KafkaMetadata(options.client_config, options.subscription)  # fails first if Kafka is down
    try:
        commits, releases = _leader_commits(options, timeout_s)  # before the watermarks: leader <= high watermark
        partitions = sorted(set(metadata.partitions()) | set(follower))
        # A partition known only from the table whose topic is gone has no high watermark.
        high_watermarks = metadata.high_watermarks(tp for tp in partitions if tp[0] in metadata.topic_ids)
    finally:
        metadata.close()
    now = time.time()
    return StatusReport(
        checked_at=now, bootstrap_servers=bootstrap_servers, remote_offsets=options.remote_offsets,
        commit_log_topic=options.commit_log_topic, groups=tuple(options.commit_groups),
        table=summary,
        partitions=tuple(_partition(tp, follower.get(tp), high_watermarks.get(tp), commits, now)
                         for tp in partitions),
        dead_letters=(locations.dead_letters, dead_letter_counts(locations.dead_letters) or {})
        if config.sink.dead_letters.enabled and locations.dead_letters else None,
        gate_latency=None if opened is None else _gate_latency(opened, releases),
    )


def _gate_latency(table: DeltaTable, releases: Mapping[TopicPartitionKey, Sequence[Release]]
                  ) -> tuple[float, float] | None:
    return quantiles(table_latencies(recent_batches(table, RECENT_BATCHES), releases))


def _leader_commits(options: SourceOptions, timeout_s: float
                    ) -> tuple[LeaderCommits, dict[TopicPartitionKey, list[Release]]]:
    tracker = remote_offsets_tracker(options, deadlines=False)
    with tracker:
        try:
            if not tracker.wait_until_caught_up(timeout_s):
                raise StatusError(f"{tracker.description} did not catch up within {timeout_s:g}s")
            return tracker.commits(), tracker.releases()
        except RemoteOffsetsError as exc:
            raise StatusError(str(exc)) from None


def _partition(tp: TopicPartitionKey, follower: int | None, high_watermark: int | None,
               commits: LeaderCommits, now: float) -> PartitionStatus:
    by_group = group_offsets(tp, commits)
    known = [offset for offset in by_group.values() if offset is not None]
    leader = min(known) if known and len(known) == len(by_group) else None  # unknown until every group reports
    return PartitionStatus(
        topic=tp[0], partition=tp[1], state=get_state_from_offsets(Offsets(follower, leader)),
        follower_offset=follower, leader_offset=leader, leader_offsets=by_group,
        high_watermark=high_watermark, seconds_since_leader_commit=leader_commit_age(tp, commits, now),
    )


# --- output ----------------------------------------------------------------------------------

def format_status(report: StatusReport) -> str:
    groups = report.groups
    source = (f"commit log {report.commit_log_topic!r}" if report.remote_offsets == "commit_log"
              else "group offsets")
    summary = report.table
    lines = [
        f"kafka {report.bootstrap_servers}; leader groups {', '.join(groups)} ({source})",
        "Delta table: not created yet" if summary is None else
        f"Delta table {summary.path}: version {summary.version}, {summary.rows} rows, last batch {summary.batch_id}",
    ]
    headers = ("topic", "partition", "state", "follower", *(f"leader {g}" for g in groups),
               "high watermark", "lag", "since leader commit (s)")
    rows = [(p.topic, p.partition, p.state.value, p.follower_offset, *(p.leader_offsets.get(g) for g in groups),
             p.high_watermark, p.lag, p.seconds_since_leader_commit) for p in report.partitions]
    if report.dead_letters is not None:
        path, by_topic = report.dead_letters
        lines.append(f"dead letters in {path}: {sum(by_topic.values())}"
                     + "".join(f", {n} of topic {t}" for t, n in by_topic.items()))
    if report.gate_latency is not None:
        lines.append(f"{describe(report.gate_latency)} over the table's last {RECENT_BATCHES} commits "
                     "(from the leader's commit to the Delta commit holding it)")
    return "\n".join([*lines, table(headers, rows) if rows else "no partitions"])


# --- command line ----------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", metavar="HOST:PORT",
                        help="Kafka address (default: the config's; the running embedded broker's)")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="how long to wait for the broker (default: %(default)s)")


def report(args: argparse.Namespace, config: ForwarderConfig, transform: object = None) -> int:
    """The `status` command: print the status, or one line saying what could not be read (exit 1)."""
    try:
        bootstrap = args.bootstrap or (embedded_bootstrap(config.checkpoint.location) if config.kafka.embedded
                                       else config.kafka.bootstrap_servers)
        check_storage(config, args.timeout)
        os.environ.update(config.storage.s3.environment())  # the tables on S3: for delta-rs and pyarrow
        check_job_kafka(config, bootstrap, min(args.timeout, config.kafka.connect_timeout))
        found = collect(config, bootstrap, args.timeout)
    except (StatusError, KafkaError, KafkaUnavailable, StorageUnavailable, TableNotRecorded) as exc:
        print(f"status: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    print(json.dumps(found.to_json(), indent=2) if args.json else format_status(found))
    return ExitCode.OK
