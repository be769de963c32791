"""The `run` command: the forwarder job (config -> SparkSession -> synchronized_kafka source ->
transform -> Delta), started by `synclib.cli` after the shared setup."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from synclib.app.embedded_locations import start_embedded_afresh
from synclib.exit_codes import ExitCode
from synclib.settings import ForwarderConfig

if TYPE_CHECKING:  # the type only: the dead-letter sink loads pyspark
    from synclib.dead_letters.transformed import Transform

logger = logging.getLogger("synclib.forwarder")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--available-now", action="store_true",
                        help="forward what is releasable now, then stop (Trigger.AvailableNow)")
    parser.add_argument("--healthcheck-file", metavar="PATH",
                        help="touch PATH while the query is healthy (monitoring.healthcheck_file)")


def overrides(args: argparse.Namespace) -> list[str]:
    """The settings the options stand for."""
    settings = ["trigger.mode=available_now"] if args.available_now else []
    if args.healthcheck_file:
        settings.append(f"monitoring.healthcheck_file={json.dumps(args.healthcheck_file)}")  # a YAML string
    return settings


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


def run(args: argparse.Namespace, config: ForwarderConfig, transform: Transform | None) -> int:
    """Run the forwarder with the checked `config` (logging set up, Kafka and storage checked)."""
    replaced = start_embedded_afresh(config, args.config) if config.kafka.embedded else []
    logger.info("configuration read from %s", args.config)
    for section, settings in config_sections(config):
        logger.info("configuration %s: %s", section, settings)
    if replaced:
        logger.info("embedded: a new world each run; removed the previous embedded run's %s", " and ".join(replaced))
    # Here, not at the top: pyspark, deltalake and the sink load only once the configuration is valid.
    from synclib.app.forwarder import Forwarder

    try:
        return Forwarder(config, transform).run()
    except KeyboardInterrupt:
        print("forwarder: stopped at once by a second signal; the batch in flight is replayed "
              "on restart", file=sys.stderr, flush=True)
        return ExitCode.INTERRUPTED
