"""Options of the `synchronized_kafka` source, validated when the query starts.

Names follow Spark's Kafka source where the meaning is the same; see DESIGN.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from synclib.kafka import client_config as kafkaconf
from synclib.kafka.subscription import Subscription
from synclib.offsets import EARLIEST, PartitionOffsets, parse_offsets_json

STARTING_MODES = ("earliest", "latest", "committed")
REMOTE_MODES = ("commit_log", "group")



class SourceOptionError(ValueError):
    """An option of the source is missing, malformed or contradicts another."""


@dataclass(frozen=True)
class SourceOptions:
    subscription: Subscription
    commit_log_topic: Optional[str]
    commit_groups: tuple[str, ...]
    client_config: dict[str, Any] = field(repr=False)
    starting: Union[str, PartitionOffsets] = "earliest"
    initial_offset_reset: str = "earliest"
    consumer_group: Optional[str] = None
    max_offsets_per_trigger: Optional[int] = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    remote_offsets: str = "commit_log"
    stale_after_s: float = 60.0
    status_file: Optional[str] = None
    poll_timeout_ms: int = 512
    remote_poll_interval_s: float = 1.0
    read_stall_timeout_s: float = 120.0
    commit_log_timeout_s: float = 120.0
    broker_timeout_s: float = 120.0
    commit_to_consumer_group: bool = False
    publish_commit_log: Optional[str] = None

    @staticmethod
    def parse(options: Mapping[str, Any]) -> "SourceOptions":
        """Validate Spark reader options (keys are case-insensitive, as in Spark)."""
        opts = {str(k).lower(): v for k, v in options.items()}

        def get(name: str) -> Optional[str]:
            value = opts.get(name.lower())
            return None if value is None or str(value).strip() == "" else str(value).strip()

        try:
            client_config = kafkaconf.kafka_client_config(opts)
        except kafkaconf.KafkaConfigError as exc:
            raise SourceOptionError(str(exc)) from None
        if not client_config.get("bootstrap_servers"):
            raise SourceOptionError("option 'kafka.bootstrap.servers' is required")

        subscription = _parse_subscription(get("subscribe"), get("subscribePattern"), get("assign"))

        remote_mode = (get("remoteOffsets") or "commit_log").lower()
        if remote_mode not in REMOTE_MODES:
            raise SourceOptionError(f"option 'remoteOffsets' must be one of {REMOTE_MODES}, got {remote_mode!r}")
        commit_log_topic = get("commitLogTopic")
        if remote_mode == "commit_log" and commit_log_topic is None:
            raise SourceOptionError("option 'commitLogTopic' is required (the leader's commit-log topic)")
        groups = tuple(g.strip() for g in (get("synchronizeCommitGroups") or "").split(",") if g.strip())
        if not groups:
            raise SourceOptionError(
                "option 'synchronizeCommitGroups' is required: comma-separated leader consumer groups"
            )

        consumer_group = get("consumerGroup")
        starting = _parse_starting(get("startingOffsets") or "earliest")
        if starting == "committed" and consumer_group is None:
            raise SourceOptionError("option 'startingOffsets'='committed' needs option 'consumerGroup'")
        commit_to_group = _bool(get("commitToConsumerGroup"), "commitToConsumerGroup", False)
        publish_commit_log = get("publishCommitLog")
        for name, wanted in (("commitToConsumerGroup", commit_to_group), ("publishCommitLog", publish_commit_log)):
            if wanted and consumer_group is None:
                raise SourceOptionError(f"option {name!r} needs option 'consumerGroup' (the name to commit under)")
        reset = (get("initialOffsetReset") or "earliest").lower()
        if reset not in ("earliest", "latest"):
            raise SourceOptionError(f"option 'initialOffsetReset' must be earliest or latest, got {reset!r}")

        return SourceOptions(
            subscription=subscription,
            commit_log_topic=commit_log_topic,
            commit_groups=groups,
            client_config=client_config,
            starting=starting,
            initial_offset_reset=reset,
            consumer_group=consumer_group,
            max_offsets_per_trigger=_positive_int(get("maxOffsetsPerTrigger"), "maxOffsetsPerTrigger"),
            fail_on_data_loss=_bool(get("failOnDataLoss"), "failOnDataLoss", True),
            include_headers=_bool(get("includeHeaders"), "includeHeaders", False),
            remote_offsets=remote_mode,
            stale_after_s=_positive_float(get("staleAfter"), "staleAfter", 60.0),
            status_file=get("statusFile"),
            poll_timeout_ms=_positive_int(get("pollTimeoutMs"), "pollTimeoutMs") or 512,
            remote_poll_interval_s=_positive_float(get("remotePollInterval"), "remotePollInterval", 1.0),
            read_stall_timeout_s=_positive_float(get("readStallTimeout"), "readStallTimeout", 120.0),
            commit_log_timeout_s=_positive_float(get("commitLogTimeout"), "commitLogTimeout", 120.0),
            broker_timeout_s=_positive_float(get("brokerTimeout"), "brokerTimeout", 120.0),
            commit_to_consumer_group=commit_to_group,
            publish_commit_log=publish_commit_log,
        )


def _parse_subscription(subscribe: Optional[str], pattern: Optional[str], assign: Optional[str]) -> Subscription:
    given = [name for name, value in
             (("subscribe", subscribe), ("subscribePattern", pattern), ("assign", assign)) if value]
    if len(given) != 1:
        raise SourceOptionError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' is required, got "
            + (", ".join(repr(g) for g in given) or "none")
        )
    if subscribe:
        topics = tuple(t.strip() for t in subscribe.split(",") if t.strip())
        if not topics:
            raise SourceOptionError("option 'subscribe' names no topic")
        return Subscription(topics=topics)
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceOptionError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        return Subscription(pattern=pattern)
    try:
        parsed = json.loads(assign or "")
        assignment = tuple(sorted((str(t), int(p)) for t, ps in parsed.items() for p in ps))
    except (ValueError, TypeError, AttributeError):
        raise SourceOptionError(
            f"option 'assign' must be JSON like {{\"topic\": [0, 1]}}, got {assign!r}"
        ) from None
    if not assignment:
        raise SourceOptionError("option 'assign' names no partition")
    return Subscription(assignment=assignment)


def _parse_starting(text: str) -> Union[str, PartitionOffsets]:
    if text.lower() in STARTING_MODES:
        return text.lower()
    try:
        return parse_offsets_json(json.loads(text))
    except (ValueError, TypeError, AttributeError) as exc:
        raise SourceOptionError(
            "option 'startingOffsets' must be earliest, latest, committed or JSON like "
            f'{{"topic": {{"0": 23}}}} ({exc}), got {text!r}'
        ) from None


def _positive_int(value: Optional[str], name: str) -> Optional[int]:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise SourceOptionError(f"option {name!r} must be a positive integer, got {value!r}")
    return number


def _positive_float(value: Optional[str], name: str, default: float) -> float:
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if number <= 0:
        raise SourceOptionError(f"option {name!r} must be a positive number of seconds, got {value!r}")
    return number


def _bool(value: Optional[str], name: str, default: bool) -> bool:
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise SourceOptionError(f"option {name!r} must be true or false, got {value!r}")
    return value.lower() == "true"
