"""The settings of the `synchronized_kafka` source: the YAML `source:` section and the Spark options.

Each setting is one field: its name is the YAML key, its `serialization_alias` the Spark
option (spelled as Spark's Kafka source spells it), its type the validation. `SourceConfig`
is the YAML section; `SourceOptions` adds what only the reader options carry (the Kafka
client options, the status file, poll tuning) and reads Spark's string options, whose keys
are case-insensitive. `SourceConfig.spark_options()` and `SourceOptions.from_spark()` are
inverses, so YAML -> Spark options -> model gives the same settings.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Mapping
from typing import Any, get_args

from pydantic import Field, ValidationError, model_validator

from synclib.kafka.client_config import DEFAULT_DEADLINE_S
from synclib.kafka.subscription import Subscription
from synclib.offsets import PartitionOffsets, parse_offsets_json
from synclib.settings.kafka import BOOTSTRAP_OPTION, KAFKA_PREFIX, KafkaConfigError, kafka_client_config
from synclib.settings.model import KeyPath, Naming, Section, SettingError, explain
from synclib.settings.values import (
    SPARK,
    Assignment,
    Boolean,
    Duration,
    GroupList,
    OffsetResetChoice,
    PositiveDuration,
    PositiveInt,
    Regex,
    RemoteOffsetsChoice,
    StartingMode,
    StartingOffsets,
    String,
    Topic,
    TopicList,
    spark_value,
)

logger = logging.getLogger(__name__)

SUBSCRIPTIONS = ("subscribe", "subscribe_pattern", "assign")
# With `awaitLeaderCommits`, the longest a trigger that finds nothing new waits for the leader: it
# bounds how late new partitions, staleness and a graceful stop are seen (a 400 ms trigger waited
# 0.4 s), and makes an idle query plan twice a second.
LEADER_WAIT_S = 0.5
_STARTING_MODES: dict[str, StartingMode] = {mode: mode for mode in get_args(StartingMode)}


class SourceOptionError(ValueError):
    """An option of the source is missing, malformed or contradicts another; names the option."""


class SourceConfig(Section):
    """What the source reads and how it follows the leader (YAML `source:`; Spark option aliases)."""

    subscribe: TopicList | None = Field(None, serialization_alias="subscribe")
    """Topics, comma-separated (empty names ignored) or a list; exactly one of `subscribe`,
    `subscribe_pattern`, `assign`."""
    subscribe_pattern: Regex | None = Field(None, serialization_alias="subscribePattern")
    """Topics whose name the regex is found in (internal topics excluded; anchor it with `^...$`);
    instead of `subscribe`."""
    assign: Assignment | None = Field(None, serialization_alias="assign")
    """Partitions, `{"topic": [0, 1]}`; instead of `subscribe`."""
    commit_log_topic: Topic | None = Field(None, serialization_alias="commitLogTopic")
    """The leader's commit-log topic; required with `remote_offsets: commit_log`."""
    commit_groups: GroupList = Field(serialization_alias="synchronizeCommitGroups")
    """The leader groups to wait for (the minimum over them), comma-separated or a list."""
    consumer_group: String | None = Field(None, serialization_alias="consumerGroup")
    """The forwarder's own group (for `committed`, lag tooling, chaining)."""
    starting_offsets: StartingOffsets = Field("earliest", serialization_alias="startingOffsets")
    """`earliest`, `latest`, `committed` (the group's offsets, else `initial_offset_reset`), or
    Spark's offsets JSON `{"events": {"0": 23}}` (`-2` earliest, `-1` latest); used by a new
    checkpoint on an empty table."""
    initial_offset_reset: OffsetResetChoice = Field(
        "earliest", serialization_alias="initialOffsetReset")
    """Where `committed` starts when the group has no offset."""
    max_offsets_per_trigger: PositiveInt | None = Field(None, serialization_alias="maxOffsetsPerTrigger")
    """Offsets per micro-batch, split across partitions as Spark does; unset: no cap."""
    fail_on_data_loss: Boolean = Field(True, serialization_alias="failOnDataLoss")
    """Fail when offsets disappear (retention, topic recreated); else skip them."""
    include_headers: Boolean = Field(False, serialization_alias="includeHeaders")
    """Add the `headers` column."""
    stale_after: PositiveDuration = Field(60.0, serialization_alias="staleAfter")
    """Report the leader stale for a partition after this long without a commit while data waits."""
    broker_timeout: PositiveDuration = Field(DEFAULT_DEADLINE_S, serialization_alias="brokerTimeout")
    """Planning retries an unanswering broker this long, then the query fails naming it."""
    commit_log_timeout: PositiveDuration = Field(DEFAULT_DEADLINE_S, serialization_alias="commitLogTimeout")
    """The commit-log follower (or group poller) may make no progress this long, then the query fails."""
    read_stall_timeout: PositiveDuration = Field(DEFAULT_DEADLINE_S, serialization_alias="readStallTimeout")
    """A read task may make no progress this long, then it fails."""
    commit_to_consumer_group: Boolean = Field(False, serialization_alias="commitToConsumerGroup")
    """Commit written offsets to `consumer_group` after each Delta commit (see [Lag in Kafka's
    tools](operations/leaders.md#lag-in-kafkas-tools))."""
    publish_commit_log: Topic | None = Field(None, serialization_alias="publishCommitLog")
    """Publish this forwarder's commits to this topic (see [Chaining
    forwarders](operations/leaders.md#chaining-forwarders));
    needs `consumer_group`."""
    remote_offsets: RemoteOffsetsChoice = Field(
        "commit_log", serialization_alias="remoteOffsets")
    """`commit_log`: read the leader's commit log; `group`: poll the leader groups' committed offsets
    (every `remotePollInterval`)."""

    @model_validator(mode="after")
    def _consistent(self) -> SourceConfig:
        given = [name for name in SUBSCRIPTIONS if getattr(self, name) is not None]
        if not given:
            raise SettingError("subscribe", "missing; set exactly one of {0}, {1}, {2}", *SUBSCRIPTIONS)
        if len(given) > 1:
            raise SettingError(given[1], "cannot be combined with {0}; set exactly one of {1}, {2}, {3}",
                               given[0], *SUBSCRIPTIONS)
        if self.remote_offsets == "commit_log" and self.commit_log_topic is None:
            raise SettingError("commit_log_topic", "missing required {noun} (needed when {0} is commit_log)",
                               "remote_offsets")
        needs_group = {
            "starting_offsets": self.starting_offsets == "committed",
            "commit_to_consumer_group": self.commit_to_consumer_group,
            "publish_commit_log": self.publish_commit_log is not None,
        }
        for name, needed in needs_group.items():
            if needed and self.consumer_group is None:
                raise SettingError(name, "requires {0}", "consumer_group")
        return self

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics named by subscribe or assign; empty with subscribe_pattern."""
        if self.subscribe is not None:
            return tuple(self.subscribe.split(","))
        if self.assign is not None:
            return tuple(json.loads(self.assign))
        return ()

    @property
    def subscription(self) -> Subscription:
        if self.subscribe is not None:
            return Subscription(topics=self.topics)
        if self.subscribe_pattern is not None:
            return Subscription(pattern=self.subscribe_pattern)
        assigned: dict[str, list[int]] = json.loads(self.assign or "{}")
        return Subscription(assignment=tuple(sorted((t, p) for t, ps in assigned.items() for p in ps)))

    @property
    def starting(self) -> StartingMode | PartitionOffsets:
        """`startingOffsets` as a mode or as offsets per partition."""
        mode = _STARTING_MODES.get(self.starting_offsets)
        return mode if mode is not None else parse_offsets_json(self.starting_offsets)

    def spark_options(self) -> dict[str, str]:
        """These settings as options of the `synchronized_kafka` reader (all values strings)."""
        return {field.serialization_alias or name: spark_value(value)
                for name, field in type(self).model_fields.items()
                if field.serialization_alias and (value := getattr(self, name)) is not None}


class SourceOptions(SourceConfig):
    """The reader's options: the source settings plus the Kafka client and the reader's own options."""

    bootstrap_servers: String = Field(serialization_alias=BOOTSTRAP_OPTION)
    """The brokers, `host:port,...`."""
    # kafka-python keyword arguments from every `kafka.*` option (secrets included: not in repr).
    client_config: dict[str, Any] = Field(default_factory=dict, repr=False)
    status_file: String | None = Field(None, serialization_alias="statusFile")
    """A JSON file the driver rewrites after every planning call (the job sets it): per partition
    state, follower/leader offsets, high watermark, stale; commit-log counters."""
    initial_offsets_file: String | None = Field(None, serialization_alias="initialOffsetsFile")
    """Where the reader keeps the offsets its first micro-batch starts from (the job sets it inside
    the checkpoint): Spark asks a Python source for them again when it restarts before that batch
    commits, and `latest` or `committed` would answer differently then."""
    run_id: String | None = Field(None, serialization_alias="runId")
    """The job's run (the job sets it, with `runCheckpoint`): the driver plans no batch once the
    checkpoint's run marker names another run (`synclib.spark_checkpoint.check_run`)."""
    run_checkpoint: String | None = Field(None, serialization_alias="runCheckpoint")
    """The checkpoint whose run marker `runId` is checked against."""
    ending_offsets: String | None = Field(None, serialization_alias="endingOffsets")
    """Batch reads (`spark.read`) only: `latest` (the default) or offsets JSON, where the read ends
    (exclusive); the read is not gated."""
    poll_timeout_ms: PositiveInt = Field(512, serialization_alias="pollTimeoutMs")
    """The executors' consumer poll timeout, in milliseconds."""
    remote_poll_interval: PositiveDuration = Field(1.0, serialization_alias="remotePollInterval")
    """How often `remoteOffsets=group` polls the leader groups."""
    await_leader_commits: Boolean = Field(False, serialization_alias="awaitLeaderCommits")
    """A trigger that finds nothing newly committed waits (up to half a second) for a leader commit
    that releases offsets, and plans the batch at once: with a processing-time trigger of 0, a
    micro-batch starts as soon as the leader commits (the job's `trigger.mode: leader`)."""
    min_batch_interval: Duration = Field(0.0, serialization_alias="minBatchInterval")
    """With `awaitLeaderCommits`, the shortest time between the starts of two micro-batches."""

    @classmethod
    def from_spark(cls, options: Mapping[str, Any]) -> SourceOptions:
        """Validate Spark reader options (keys case-insensitive, empty values unset, as in Spark)."""
        given = {str(k).lower(): v for k, v in options.items() if v is not None}
        try:
            client_config = kafka_client_config({k: v for k, v in given.items() if k.startswith(KAFKA_PREFIX)})
        except KafkaConfigError as exc:
            raise SourceOptionError(str(exc)) from None
        aliases = {field.serialization_alias.lower(): name for name, field in cls.model_fields.items()
                   if field.serialization_alias}
        values: dict[str, Any] = {"client_config": client_config}
        for key, value in given.items():
            if key in aliases and str(value).strip():
                values[aliases[key]] = str(value).strip()
            elif key not in aliases and not key.startswith(KAFKA_PREFIX):
                close = difflib.get_close_matches(key, aliases, n=1)
                hint = f" (did you mean {_option((aliases[close[0]],))!r}?)" if close else ""
                logger.warning("synchronized_kafka ignores the unknown option %r%s", key, hint)
        try:
            return cls.model_validate(values, context=SPARK)
        except ValidationError as exc:
            problems = explain(exc, cls, _SPARK_NAMING)
            raise SourceOptionError("; ".join(f"option {_option(path)!r}: {problem}" for path, problem in problems)) \
                from None


def _option(path: KeyPath) -> str:
    """The Spark option name of a setting of `SourceOptions`."""
    field = SourceOptions.model_fields.get(path[0]) if path else None
    return (field.serialization_alias or path[0]) if field is not None else ".".join(path)


_SPARK_NAMING = Naming(name=lambda path: repr(_option(path)), noun="option")
