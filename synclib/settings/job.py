"""The forwarder job's configuration: the sections of the YAML file below its root, `ForwarderConfig`."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from synclib.settings.kafka import BOOTSTRAP_OPTION, KafkaConfig
from synclib.settings.model import KEEP_NULL, Section, SettingError
from synclib.settings.source import LEADER_WAIT_S, SourceConfig
from synclib.settings.storage import StorageConfig
from synclib.settings.values import (
    AVAILABLE_NOW,
    EMBEDDED,
    LEADER,
    PROCESSING_TIME,
    Boolean,
    ColumnName,
    Columns,
    Duration,
    EngineChoice,
    FilePath,
    Fraction,
    LogLevelChoice,
    Port,
    PositiveDuration,
    PositiveInt,
    TableName,
    TableProperties,
    TransformSpec,
    TriggerModeChoice,
    spark_value,
)


class MaintenanceConfig(Section):
    """`sink.maintenance`: compaction, vacuum and log checkpoints of the table."""

    enabled: Boolean = True
    """Run table maintenance on a background thread of the job (see [Table
    maintenance](operations/maintenance.md)); the `maintain` command ignores it."""
    interval: PositiveDuration = 300.0
    """Between the end of one maintenance pass and the start of the next."""
    time_budget: PositiveDuration = 60.0
    """A pass starts no new compaction after this long (the rest waits for the next pass)."""
    target_file_size_mb: PositiveInt = 128
    """Compaction bin-packs files smaller than this (MiB) into files of about this size."""
    min_age: Duration = 60.0
    """Files younger than this are not compacted (in closed dates, below today UTC with
    `partition_by_date`, all are)."""
    vacuum_retention: Duration = 7 * 86_400.0
    """Files compaction removed are deleted this long after (whole hours, rounded up); readers of
    older table versions need them until then."""
    checkpoint_interval: PositiveInt = 100
    """Versions between Delta log checkpoints: a pass writes one when this many passed without
    (delta-rs batch commits write one every `delta.checkpointInterval` versions of the table;
    delta-spark's table gets this value as its `delta.checkpointInterval`)."""
    log_cleanup: Boolean = True
    """Delete expired log entries: older than `log_retention` and below the newest checkpoint."""
    log_retention: Duration = 3600.0
    """How far back the log (time travel, lagging Delta streaming readers of the table) reaches; on
    HDFS a longer log costs every delta-rs batch commit time (it lists the log), on local storage
    only the commits after another writer's, such as maintenance's."""
    leave_to_platform: Boolean = True
    """A `sink.table` whose catalog runs OPTIMIZE and VACUUM itself (Databricks' predictive
    optimization, as `DESCRIBE TABLE EXTENDED` reports it) is left to it: no maintenance thread, and
    `maintain` passes over it; false: synclib maintains it too (see [Who maintains the
    table](operations/maintenance.md#who-maintains-the-table))."""

    @property
    def target_file_size(self) -> int:
        """`target_file_size_mb` in bytes."""
        return self.target_file_size_mb << 20


class DeadLettersConfig(Section):
    """`sink.dead_letters`: rows the transform rejects or raises on go to a second Delta table
    instead of failing their micro-batch (`synclib.dead_letters.sink`). Off by default."""

    enabled: Boolean = False
    """Rows the transform rejects or raises on go to a dead-letter table instead of failing their
    batch (see [Dead letters](operations/dead-letters.md))."""
    path: FilePath | None = None
    """The dead-letter Delta table, beside the main table (never inside it); unset:
    `<sink.path>_dead_letters`, or with `sink.table` the table `<sink.table>_dead_letters`."""
    table: TableName | None = None
    """The dead-letter table by name (as `sink.table`), instead of `path`."""
    error_column: ColumnName | None = None
    """A nullable string column the transform adds: not null marks the row a dead letter (the value
    is its message); the column is not written to the main table. The transform's output must then
    keep `topic`, `partition`, `offset`."""
    max_fraction: Fraction = 1.0
    """Stop the job when more than this fraction of a batch fails (1.0: never on the fraction)."""
    max_rows: PositiveInt = 25
    """Stop the job when more rows than this fail in one batch (also bounds the search for them)."""


class SinkConfig(Section):
    """`sink`: the Delta table and how it is written."""

    path: FilePath | None = None
    """The Delta table's location (local path, `s3://`, `abfss://`, `/Volumes/...`); or `table`."""
    table: TableName | None = None
    """The Delta table by name, instead of `path`: `table`, `schema.table` or `catalog.schema.table`,
    resolved by the job's Spark catalog (Unity Catalog on Databricks) and created when missing (see
    [Tables by name](running.md#tables-by-name))."""
    engine: EngineChoice = "auto"
    """The writer (see [Choosing the
    writer](operations/writer-and-trigger.md#choosing-the-writer))."""
    partition_by: Columns = ()
    """Partition columns."""
    partition_by_date: Boolean = False
    """Add `date` (UTC, from the Kafka timestamp) and partition by it."""
    cluster_by: Columns = ()
    """Liquid clustering columns of a table the job creates (`CLUSTER BY`; delta-spark only), instead
    of partitioning."""
    table_properties: TableProperties = Field(default_factory=dict)
    """Table properties of a table the job creates (`TBLPROPERTIES`), e.g.
    `delta.enableChangeDataFeed: true`; an existing table keeps its own."""
    resume_from_table: Boolean = True
    """A new checkpoint on an existing table starts from the offsets the table records."""
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    dead_letters: DeadLettersConfig = Field(default_factory=DeadLettersConfig)

    @model_validator(mode="after")
    def _consistent(self) -> SinkConfig:
        if (self.path is None) == (self.table is None):
            raise SettingError("table" if self.path else "path", "set exactly one of {0} and {1}", "path", "table")
        if self.dead_letters.path is not None and self.dead_letters.table is not None:
            raise SettingError("dead_letters.table", "set at most one of {0} and {1}", "dead_letters.path",
                               "dead_letters.table")
        if self.cluster_by and (self.partition_by or self.partition_by_date):
            raise SettingError("cluster_by", "a table is clustered or partitioned, not both: remove {0} or {1}",
                               "cluster_by", "partition_by" if self.partition_by else "partition_by_date")
        return self

    @property
    def dead_letters_path(self) -> str | None:
        """The dead-letter table's location when it is given by one: `dead_letters.path`, else
        `<path>_dead_letters` (None: the table `dead_letters_table` names)."""
        if self.dead_letters.path or self.dead_letters_table:
            return self.dead_letters.path
        assert self.path is not None
        return self.path.rstrip("/") + "_dead_letters"

    @property
    def dead_letters_table(self) -> str | None:
        """The dead-letter table's name: `dead_letters.table`, else with `table` and no
        `dead_letters.path` `<table>_dead_letters` (beside it, in its catalog and schema)."""
        if self.dead_letters.table or self.dead_letters.path or self.table is None:
            return self.dead_letters.table
        return dead_letters_name(self.table)

    @property
    def address(self) -> str:
        """The table as the config gives it, for messages: its name or its location."""
        return self.table or self.path or ""


def dead_letters_name(table: str) -> str:
    """`<table>_dead_letters`, in the same catalog and schema (a back-quoted last part keeps its quotes)."""
    return f"{table[:-1]}_dead_letters`" if table.endswith("`") else f"{table}_dead_letters"


class CheckpointConfig(Section):
    """`checkpoint`: Spark's checkpoint location."""

    location: FilePath
    """Spark's streaming checkpoint."""


class TriggerConfig(Section):
    """`trigger`: when micro-batches start."""

    mode: TriggerModeChoice = LEADER
    """`leader`: a micro-batch starts as soon as a leader commit releases new offsets (at most one
    per `min_interval`); `processing_time`: every `processing_time`, as Spark's trigger;
    `available_now`: what is releasable at the start in one Trigger.AvailableNow run, then stop
    (same as `--available-now`). See [Choosing the
    trigger](operations/writer-and-trigger.md#choosing-the-trigger)."""
    min_interval: Duration = 0.4
    """With `mode: leader`, the shortest time between the starts of two micro-batches: a leader that
    commits more often is forwarded in fewer, larger batches, so a busy job's object-store requests
    stay those of a 400 ms trigger."""
    processing_time: Duration = 0.4
    """With `mode: processing_time`, the micro-batch interval."""

    @model_validator(mode="after")
    def _consistent(self) -> TriggerConfig:
        if "processing_time" in self.model_fields_set and self.mode != PROCESSING_TIME:
            raise SettingError("processing_time", f"only used with {{0}}: {PROCESSING_TIME} (the mode is "
                                                  f"{self.mode}); set both, or remove it", "mode")
        return self

    @property
    def spark_trigger(self) -> dict[str, Any]:
        """`DataStreamWriter.trigger`'s keyword arguments: `leader` polls the source without a pause,
        which waits for the leader's commits (`source_options`)."""
        if self.mode == AVAILABLE_NOW:
            return {"availableNow": True}
        interval = self.processing_time if self.mode == PROCESSING_TIME else 0.0
        return {"processingTime": f"{round(interval * 1000)} milliseconds"}

    def source_options(self) -> dict[str, str]:
        """The `synchronized_kafka` options of this trigger: with `leader`, wait for the leader's commits."""
        if self.mode != LEADER:
            return {}
        return {"awaitLeaderCommits": "true", "minBatchInterval": spark_value(self.min_interval)}

    @property
    def busiest_interval(self) -> float:
        """The shortest time between two batch starts of a busy query, in seconds (0: none)."""
        if self.mode == AVAILABLE_NOW:
            return 0.0
        return self.processing_time if self.mode == PROCESSING_TIME else self.min_interval

    @property
    def longest_pause(self) -> float:
        """The longest time between two triggers of a healthy query, in seconds."""
        if self.mode == PROCESSING_TIME:
            return self.processing_time
        return max(self.min_interval, LEADER_WAIT_S)


class LoggingConfig(Section):
    """`logging`: log level and the progress lines."""

    level: LogLevelChoice = "INFO"
    """synclib's log level (Spark's is `spark.log.level`)."""
    progress: Boolean = True
    """Print the per-batch lines, the partition table and the summary."""
    progress_interval: PositiveDuration = 1.0
    """How often the console is updated."""
    partition_table_rows: PositiveInt | None = 10
    """The partition table and the summary list at most this many partitions (stale and most held
    back first) and summarise the others in one line; null: every partition."""


class MonitoringConfig(Section):
    """`monitoring`: the health-check file and the Prometheus endpoint (`synclib.app.monitoring`)."""

    healthcheck_file: FilePath | None = None
    """A file touched while the query is healthy, for liveness probes (`--healthcheck-file`)."""
    metrics_port: Port | None = None
    """Serve Prometheus metrics on `http://<driver>:PORT/metrics` (`9898` in `conf/local.yaml`); unset: off."""


class EmbeddedConfig(Section):
    """`embedded`: the local broker's simulated producer and leader (only with bootstrap 'embedded')."""

    partitions: PositiveInt = 4
    """Partitions of the simulated events topic."""
    events_per_second: PositiveInt = 200
    """The simulated producer's rate."""
    event_bytes: PositiveInt = 2048
    """The size of a simulated event."""
    leader_lag: Duration = 2.0
    """The simulated leader commits what it consumed this long ago."""
    leader_commit_interval: PositiveDuration = 1.0
    """How often the simulated leader commits."""
    run_for: Annotated[PositiveDuration | None, KEEP_NULL] = 30.0
    """Stop with the summary after this long; `null` runs until Ctrl-C."""


class ForwarderConfig(Section):
    """The whole YAML file."""

    kafka: KafkaConfig
    source: SourceConfig
    sink: SinkConfig
    checkpoint: CheckpointConfig
    storage: StorageConfig = Field(default_factory=StorageConfig)
    trigger: TriggerConfig = Field(default_factory=TriggerConfig)
    transform: TransformSpec | None = None
    """A function applied to the DataFrame of each micro-batch."""
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
        return {BOOTSTRAP_OPTION: bootstrap_servers, **self.kafka.client_options(), **self.source.spark_options(),
                **self.trigger.source_options()}

    def redacted(self) -> dict[str, Any]:
        """The configuration as JSON-able data with secret values replaced by '***', for logging."""
        return self.model_dump(mode="json")
