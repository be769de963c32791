"""The forwarder job's configuration: the sections of the YAML file below its root, `ForwarderConfig`."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from synclib.settings.kafka import KafkaConfig
from synclib.settings.model import KEEP_NULL, Invalid, Section, SettingError
from synclib.settings.source import BOOTSTRAP_OPTION, SourceConfig
from synclib.settings.values import (
    EMBEDDED,
    Boolean,
    Columns,
    Duration,
    EngineChoice,
    FilePath,
    LogLevelChoice,
    Port,
    PositiveDuration,
    PositiveInt,
    TransformSpec,
)


class MaintenanceConfig(Section):
    """`sink.maintenance`: compaction, vacuum and log checkpoints of the table."""

    enabled: Boolean = True  # run passes in the forwarder (the `maintain` command ignores it)
    interval: PositiveDuration = 300.0  # between the end of one pass and the start of the next
    time_budget: PositiveDuration = 60.0  # a pass starts no new compaction after this long
    target_file_size_mb: PositiveInt = 128  # compaction writes files of about this size (MiB)
    min_age: Duration = 60.0  # newer files are not compacted (except in closed dates)
    vacuum_retention: Duration = 7 * 86_400.0  # removed files are deleted after this long
    checkpoint_interval: PositiveInt = 100  # versions between log checkpoints
    log_cleanup: Boolean = True
    log_retention: Duration = 3600.0  # log entries older than this (below the newest checkpoint) are deleted

    @property
    def target_file_size(self) -> int:
        """`target_file_size_mb` in bytes."""
        return self.target_file_size_mb << 20


def _fraction(raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise Invalid("a fraction between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise Invalid("a fraction between 0 and 1")
    return value


def _column(raw: Any) -> str:
    if not isinstance(raw, str) or not _COLUMN.fullmatch(raw):
        raise Invalid("a column name (letters, digits, _)")
    return raw


Fraction = Annotated[float, BeforeValidator(_fraction)]
ColumnName = Annotated[str, BeforeValidator(_column)]
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class DeadLettersConfig(Section):
    """`sink.dead_letters`: rows the transform rejects or raises on go to a second Delta table
    instead of failing their micro-batch (`synclib.delta.dead_letters`). Off by default."""

    enabled: Boolean = False
    path: FilePath | None = None  # default: `<sink.path>_dead_letters`, beside the main table
    # A nullable string column the transform may add: not null marks the row as a dead letter
    # (the value is its error message). The transform's output must then keep topic, partition, offset.
    error_column: ColumnName | None = None
    max_fraction: Fraction = 1.0  # more failed rows than this fraction of a batch stop the job
    max_rows: PositiveInt = 25  # more failed rows than this in one batch stop the job


class SinkConfig(Section):
    """`sink`: the Delta table and how it is written."""

    path: FilePath
    engine: EngineChoice = "auto"
    partition_by: Columns = ()
    partition_by_date: Boolean = False
    # With a new checkpoint on an existing table, start from the offsets the table records.
    resume_from_table: Boolean = True
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    dead_letters: DeadLettersConfig = Field(default_factory=DeadLettersConfig)

    @property
    def dead_letters_path(self) -> str:
        """The dead-letter table: `dead_letters.path`, else `<path>_dead_letters`."""
        return self.dead_letters.path or self.path.rstrip("/") + "_dead_letters"


class CheckpointConfig(Section):
    """`checkpoint`: Spark's checkpoint location."""

    location: FilePath


class TriggerConfig(Section):
    """`trigger`: micro-batch interval, or one Trigger.AvailableNow run."""

    processing_time: Duration = 1.0
    available_now: Boolean = False


class LoggingConfig(Section):
    """`logging`: log level and the progress lines."""

    level: LogLevelChoice = "INFO"
    progress: Boolean = True
    progress_interval: PositiveDuration = 1.0


class MonitoringConfig(Section):
    """`monitoring`: the health-check file and the Prometheus endpoint (`synclib.app.monitoring`)."""

    healthcheck_file: FilePath | None = None  # touched while the query is healthy (liveness probes)
    metrics_port: Port | None = None  # serve /metrics on this port; null: no metrics endpoint


class EmbeddedConfig(Section):
    """`embedded`: the local broker's simulated producer and leader (only with bootstrap 'embedded')."""

    partitions: PositiveInt = 4
    events_per_second: PositiveInt = 200
    event_bytes: PositiveInt = 2048
    leader_lag: Duration = 2.0
    leader_commit_interval: PositiveDuration = 1.0
    run_for: Annotated[PositiveDuration | None, KEEP_NULL] = 30.0  # null: until interrupted


class ForwarderConfig(Section):
    """The whole YAML file."""

    kafka: KafkaConfig
    source: SourceConfig
    sink: SinkConfig
    checkpoint: CheckpointConfig
    trigger: TriggerConfig = Field(default_factory=TriggerConfig)
    transform: TransformSpec | None = None  # "module:function" applied to each micro-batch
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    embedded: EmbeddedConfig | None = None  # set exactly when kafka.embedded

    @model_validator(mode="before")
    @classmethod
    def _embedded_defaults(cls, data: Any) -> Any:
        """An embedded broker gets the `embedded` section's defaults when the file has none."""
        kafka = data.get("kafka") if isinstance(data, dict) else None
        if (isinstance(kafka, dict) and str(kafka.get("bootstrap_servers")).strip() == EMBEDDED
                and data.get("embedded") is None):
            return {**data, "embedded": {}}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ForwarderConfig:
        if self.kafka.embedded and self.kafka.security.protocol != "PLAINTEXT":
            raise SettingError("kafka.security.protocol", "the embedded broker speaks PLAINTEXT only")
        if not self.kafka.embedded and self.embedded is not None:
            raise SettingError("embedded", f"only used when {{0}} is {EMBEDDED!r}; "
                                           "remove the section (or --set embedded=null)", "kafka.bootstrap_servers")
        source = self.source
        starting = source.starting
        if isinstance(starting, dict) and source.topics:
            for topic in sorted({topic for topic, _ in starting}):
                if topic not in source.topics:
                    raise SettingError("source.starting_offsets", f"topic {topic!r} is not subscribed")
        return self

    def source_options(self, bootstrap_servers: str) -> dict[str, str]:
        """Reader options of the `synchronized_kafka` source; all values are strings."""
        if bootstrap_servers == EMBEDDED:
            raise ValueError("pass the address of the started embedded broker, not 'embedded'")
        return {BOOTSTRAP_OPTION: bootstrap_servers, **self.kafka.client_options(), **self.source.spark_options()}

    def redacted(self) -> dict[str, Any]:
        """The configuration as JSON-able data with secret values replaced by '***', for logging."""
        return self.model_dump(mode="json")
