"""One settings model for the forwarder job (YAML) and the `synchronized_kafka` source (Spark options).

Modules: `values` (value types: what each accepts, how an error reads), `model` (the
`Section` base and error translation), `kafka`, `source`, `job` (the sections),
`loading` (YAML, `${VAR}`, `--set`, `ConfigError`) and `reference` (the tables of every
setting in docs/configuration.md). pydantic v2 does the schema work.
This package imports no Spark, so the job validates its config before Spark starts.

A setting is one field of a `Section`: its name is the YAML key, its type (from `values`)
the validation, its default the default, the docstring below it its meaning; a source
setting's `serialization_alias` is its Spark option name. Unknown keys, did-you-mean,
null-means-default, `--set`, `${VAR}`, `<file>: <dotted.key>: <problem>` messages and masked
secrets (type `SecretString`) all follow from the model.

Adding a section is a one-class change. For example `monitoring`:

    class MonitoringConfig(Section):
        \"\"\"`monitoring`: what the job exposes for health checks and metrics.\"\"\"

        healthcheck_file: FilePath | None = None
        \"\"\"A file touched while the query is healthy.\"\"\"
        metrics_port: PositiveInt | None = None
        \"\"\"Serve Prometheus metrics on this port.\"\"\"

and one field in its parent, here `ForwarderConfig`:
`monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)` (or a required
`MonitoringConfig` without a default). A rule between settings is a `model_validator(mode="after")`
raising `SettingError("metrics_port", "requires {0}", "healthcheck_file")`. A new kind of
value is one `Annotated[...]` type in `values` raising `Invalid("what it expects")`, named
by a `Kind`. After a change, `python -m synclib.settings.reference docs/configuration.md`
renders the page's tables anew (a unit test fails until then).
Renaming a key: keep the old name accepted in the section's `mode="before"` validator,
moving its value to the new key with a `DeprecationWarning`.
"""

from synclib.settings.job import (
    CheckpointConfig,
    EmbeddedConfig,
    ForwarderConfig,
    LoggingConfig,
    SinkConfig,
    TriggerConfig,
)
from synclib.settings.kafka import KafkaConfig, SecurityConfig
from synclib.settings.loading import ConfigError, load_config
from synclib.settings.source import SourceConfig, SourceOptionError, SourceOptions
from synclib.settings.values import EMBEDDED, parse_duration

__all__ = [
    "EMBEDDED", "CheckpointConfig", "ConfigError", "EmbeddedConfig", "ForwarderConfig", "KafkaConfig",
    "LoggingConfig", "SecurityConfig", "SinkConfig", "SourceConfig", "SourceOptionError", "SourceOptions",
    "TriggerConfig", "load_config", "parse_duration",
]
