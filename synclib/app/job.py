"""The forwarder job: config -> SparkSession -> synchronized_kafka source -> transform -> Delta.

Run as `spark-submit jobs/forwarder.py --config FILE [--set key=value ...] [--available-now]`.
Exit codes: 0 done, or stopped by SIGTERM/SIGINT after the batch in flight; 1 the query
failed; 2 invalid configuration (checked before Spark starts); 3 Kafka cannot be reached or
used with these settings, or a topic is missing (checked before Spark starts); 4 an `s3://` location
cannot be listed with the `storage` settings (checked before Spark starts); 5 another run of the job
started on the same checkpoint and took it over (the newest run wins; do not retry this one); 130 a
second signal stopped the job at once (the interrupted batch is replayed, exactly once, on restart).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from synclib.app.command_line import config_parser, exit_on_config_error
from synclib.app.embedded_locations import start_embedded_afresh
from synclib.app.preflight import (
    EXIT_KAFKA,
    EXIT_STORAGE,
    KafkaUnavailable,
    StorageUnavailable,
    check_job_kafka,
    check_storage,
)
from synclib.app.transform import load_transform
from synclib.settings import ForwarderConfig, load_config

logger = logging.getLogger("synclib.forwarder")

EXIT_INTERRUPTED = 130


def parse_args(argv: Sequence[str], default_config: str | None = None) -> argparse.Namespace:
    """The job's arguments; `--config` is required unless the job file supplies a default."""
    parser = config_parser("forwarder.py", __doc__.splitlines()[0], default_config)
    parser.add_argument("--available-now", action="store_true",
                        help="forward what is releasable now, then stop (Trigger.AvailableNow)")
    parser.add_argument("--healthcheck-file", metavar="PATH",
                        help="touch PATH while the query is healthy (monitoring.healthcheck_file)")
    return parser.parse_args(argv)


def config_sections(config: ForwarderConfig) -> Iterator[tuple[str, str]]:
    """The effective configuration, a line per section: `dotted.key=value` for every setting
    that is set (secrets masked, as `ForwarderConfig.redacted` gives them)."""
    for section, values in config.redacted().items():
        if isinstance(values, dict):
            settings = [f"{key}={json.dumps(value)}" for key, value in _flatten(values) if value is not None]
            yield section, " ".join(settings) or "(defaults)"
        elif values is not None:
            yield section, json.dumps(values)


def _flatten(values: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in values.items():
        if isinstance(value, dict) and value:
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(max(logging.WARNING, logging.getLevelName(level)))
    logging.getLogger("py4j").setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None, default_config: str | None = None) -> int:
    """Run the forwarder; `default_config` is the job file's own default (the repository's
    conf/local.yaml), since an installed package cannot know where a checkout is."""
    args = parse_args(sys.argv[1:] if argv is None else argv, default_config)
    overrides = list(args.overrides) + (["trigger.mode=available_now"] if args.available_now else [])
    if args.healthcheck_file:
        overrides.append(f"monitoring.healthcheck_file={json.dumps(args.healthcheck_file)}")  # a YAML string
    with exit_on_config_error("forwarder"):
        config = load_config(args.config, overrides)
        transform = load_transform(config.transform, args.config) if config.transform else None
        replaced = start_embedded_afresh(config, args.config) if config.kafka.embedded else []
    configure_logging(config.logging.level)
    logger.info("configuration read from %s", args.config)
    for section, settings in config_sections(config):
        logger.info("configuration %s: %s", section, settings)
    if replaced:
        logger.info("embedded: a new world each run; removed the previous embedded run's %s", " and ".join(replaced))
    if not config.kafka.embedded:
        try:
            check_job_kafka(config)
        except KafkaUnavailable as exc:
            print(f"forwarder: {exc}", file=sys.stderr, flush=True)
            return EXIT_KAFKA
    try:
        check_storage(config)
    except StorageUnavailable as exc:
        print(f"forwarder: {exc}", file=sys.stderr, flush=True)
        return EXIT_STORAGE
    # Here, not at the top: pyspark, deltalake and the sink load only once the configuration is valid.
    from synclib.app.forwarder import Forwarder

    try:
        return Forwarder(config, transform).run()
    except KeyboardInterrupt:
        print("forwarder: stopped at once by a second signal; the batch in flight is replayed "
              "on restart", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
