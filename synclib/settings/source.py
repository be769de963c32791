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

from synclib.kafka.client_config import DEFAULT_DEADLINE_S, KAFKA_PREFIX, KafkaConfigError, kafka_client_config
from synclib.kafka.subscription import Subscription
from synclib.offsets import PartitionOffsets, parse_offsets_json
from synclib.settings.model import KeyPath, Naming, Section, SettingError, explain
from synclib.settings.values import (
    SPARK,
    Assignment,
    Boolean,
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
BOOTSTRAP_OPTION = f"{KAFKA_PREFIX}bootstrap.servers"
_STARTING_MODES: dict[str, StartingMode] = {mode: mode for mode in get_args(StartingMode)}


class SourceOptionError(ValueError):
    """An option of the source is missing, malformed or contradicts another; names the option."""


class SourceConfig(Section):
    """What the source reads and how it follows the leader (YAML `source:`; Spark option aliases)."""

    subscribe: TopicList | None = Field(None, serialization_alias="subscribe")
    subscribe_pattern: Regex | None = Field(None, serialization_alias="subscribePattern")
    assign: Assignment | None = Field(None, serialization_alias="assign")
    # The leader's commit-log topic; required when remote_offsets is commit_log.
    commit_log_topic: Topic | None = Field(None, serialization_alias="commitLogTopic")
    commit_groups: GroupList = Field(serialization_alias="synchronizeCommitGroups")
    consumer_group: String | None = Field(None, serialization_alias="consumerGroup")
    starting_offsets: StartingOffsets = Field("earliest", serialization_alias="startingOffsets")
    initial_offset_reset: OffsetResetChoice = Field(
        "earliest", serialization_alias="initialOffsetReset")
    max_offsets_per_trigger: PositiveInt | None = Field(None, serialization_alias="maxOffsetsPerTrigger")
    fail_on_data_loss: Boolean = Field(True, serialization_alias="failOnDataLoss")
    include_headers: Boolean = Field(False, serialization_alias="includeHeaders")
    # A partition whose leader commits nothing this long while data waits is flagged stale.
    stale_after: PositiveDuration = Field(60.0, serialization_alias="staleAfter")
    # Planning retries an unanswering broker this long.
    broker_timeout: PositiveDuration = Field(DEFAULT_DEADLINE_S, serialization_alias="brokerTimeout")
    # The leader's offsets may go unread this long.
    commit_log_timeout: PositiveDuration = Field(DEFAULT_DEADLINE_S, serialization_alias="commitLogTimeout")
    # A read task may make no progress this long.
    read_stall_timeout: PositiveDuration = Field(DEFAULT_DEADLINE_S, serialization_alias="readStallTimeout")
    commit_to_consumer_group: Boolean = Field(False, serialization_alias="commitToConsumerGroup")
    publish_commit_log: Topic | None = Field(None, serialization_alias="publishCommitLog")
    remote_offsets: RemoteOffsetsChoice = Field(
        "commit_log", serialization_alias="remoteOffsets")

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
    # kafka-python keyword arguments from every `kafka.*` option (secrets included: not in repr).
    client_config: dict[str, Any] = Field(default_factory=dict, repr=False)
    # Where the planner writes its status JSON after every planning call (set by the job).
    status_file: String | None = Field(None, serialization_alias="statusFile")
    poll_timeout_ms: PositiveInt = Field(512, serialization_alias="pollTimeoutMs")
    # How often remoteOffsets=group polls the leader groups.
    remote_poll_interval: PositiveDuration = Field(1.0, serialization_alias="remotePollInterval")

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
            path, problem = explain(exc, cls, _SPARK_NAMING)
            raise SourceOptionError(f"option {_option(path)!r}: {problem}") from None


def _option(path: KeyPath) -> str:
    """The Spark option name of a setting of `SourceOptions`."""
    field = SourceOptions.model_fields.get(path[0]) if path else None
    return (field.serialization_alias or path[0]) if field is not None else ".".join(path)


_SPARK_NAMING = Naming(name=lambda path: repr(_option(path)), noun="option")
