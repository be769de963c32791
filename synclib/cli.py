"""The `synclib` command line: one setup for every subcommand.

    synclib run [--config FILE] [--set KEY=VALUE ...] [--available-now] [--healthcheck-file PATH]
    synclib status --config FILE [--set KEY=VALUE ...] [--bootstrap HOST:PORT] [--json] [--timeout SECONDS]
    synclib maintain --config FILE [--set KEY=VALUE ...]
    synclib dead-letters {list,replay} --config FILE [--set KEY=VALUE ...] [--where SQL] [--dry-run]

Every subcommand reads `--config` and `--set` into a `ForwarderConfig` (an invalid one, or a
transform that does not import, is one line on stderr and exit 2, before anything starts), logs
at `logging.level` in synclib's format, makes its checks before Spark starts (Kafka: exit 3, an
object-store location: exit 4) and ends with an exit code of `synclib.exit_codes`. Under
spark-submit, `jobs/forwarder.py` is `synclib run` and `jobs/dead_letters.py` is
`synclib dead-letters`; `python -m synclib` is `synclib`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from synclib.app import job, status
from synclib.app.preflight import check_job_kafka
from synclib.app.storage import StorageUnavailable, check_storage
from synclib.app.transform import load_transform
from synclib.exit_codes import ExitCode
from synclib.kafka.preflight import KafkaUnavailable
from synclib.logs import configure_logging
from synclib.settings import ConfigError, ForwarderConfig, load_config

if TYPE_CHECKING:  # the type only: the dead-letter sink loads pyspark
    from synclib.dead_letters.transformed import Transform

Body = Callable[[argparse.Namespace, ForwarderConfig, "Transform | None"], int]


@dataclass(frozen=True)
class Command:
    """A subcommand: its arguments and body, and what the shared setup does before the body."""

    describe: str
    speaker: str  # the first word of its one-line errors
    arguments: Callable[[argparse.ArgumentParser], None]
    body: Body
    overrides: Callable[[argparse.Namespace], list[str]] = lambda args: []  # --set from its own options
    transform: bool = False  # import the configured transform
    kafka: bool = False  # check Kafka first (not the embedded broker: it starts with the job)
    storage: bool = False  # check the object-store locations first
    logs: bool = True  # False: it reports its failures itself, once, without the clients' log lines


def maintain_arguments(parser: argparse.ArgumentParser) -> None:
    """`maintain` takes only the shared options."""


def maintain(args: argparse.Namespace, config: ForwarderConfig, transform: Transform | None) -> int:
    from synclib.app.tables import TableNotRecorded, sink_locations
    from synclib.delta.maintenance import run_pass

    sink = config.sink
    try:
        locations = sink_locations(config)  # a table by name: the location the job's catalog gave it
    except TableNotRecorded as exc:
        print(f"maintain: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    if locations.left_to_platform and sink.maintenance.leave_to_platform:
        print(f"{sink.address}: left to the platform (predictive optimization maintains it; "
              "sink.maintenance.leave_to_platform)")
        return ExitCode.OK
    try:
        report = run_pass(locations.table, sink.maintenance)
    except Exception as exc:  # noqa: BLE001 - any failure: say what, exit non-zero
        print(f"maintain: the pass over {sink.address} failed: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    print(f"{sink.address}: {report.summary()}")
    return ExitCode.OK


def dead_letter_arguments(parser: argparse.ArgumentParser) -> None:
    from synclib.dead_letters import commands  # argparse only: commands loads pyspark in its body

    commands.add_arguments(parser)


def dead_letters(args: argparse.Namespace, config: ForwarderConfig, transform: Transform | None) -> int:
    # Here: pyspark, deltalake and the sink load only once the configuration and storage are checked.
    from synclib.app.session import job_session
    from synclib.dead_letters import commands

    return commands.run(job_session(config, "synclib-dead-letters"), args, config, transform)


COMMANDS = {
    "run": Command("Run the forwarder: release Kafka events into Delta once the leader group committed them.",
                   "forwarder", job.add_arguments, job.run, job.overrides, transform=True, kafka=True,
                   storage=True),
    "status": Command("Per-partition status of a forwarder, without Spark.", "status", status.add_arguments,
                      status.report, logs=False),
    "maintain": Command("One maintenance pass (compaction, vacuum, checkpoint, log cleanup) over sink.path (or "
                        "sink.table) with the sink.maintenance settings (with delta-rs, whatever sink.engine says; "
                        "enabled is ignored), for cron-style use next to a forwarder whose own maintenance is off.",
                        "maintain", maintain_arguments, maintain),
    "dead-letters": Command("List dead letters, or replay them into the main table once the transform is fixed.",
                            "dead_letters", dead_letter_arguments, dead_letters, transform=True, storage=True),
}


def parser(default_config: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's arguments; `default_config` is `run`'s `--config` default."""
    top = argparse.ArgumentParser(prog="synclib", description=(__doc__ or "").splitlines()[0])
    subcommands = top.add_subparsers(dest="name", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        default = default_config if name == "run" else None
        sub = subcommands.add_parser(name, help=command.describe, description=command.describe)
        sub.add_argument("--config", default=default, required=default is None,
                         help="the forwarder's YAML config" + (" (default: %(default)s)" if default else ""))
        sub.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config key, e.g. --set source.max_offsets_per_trigger=1000")
        command.arguments(sub)
        sub.set_defaults(command=command)
    return top


@contextlib.contextmanager
def exit_on_config_error(speaker: str) -> Iterator[None]:
    """Turn a `ConfigError` raised inside into its one line on stderr and exit code 2."""
    try:
        yield
    except ConfigError as exc:
        print(f"{speaker}: invalid configuration: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(ExitCode.CONFIG) from None


def main(argv: Sequence[str] | None = None, default_config: str | None = None) -> int:
    """Run the subcommand `argv` names (default: the process's arguments)."""
    args = parser(default_config).parse_args(sys.argv[1:] if argv is None else argv)
    command: Command = args.command
    with exit_on_config_error(command.speaker):
        config = load_config(args.config, [*args.overrides, *command.overrides(args)])
        transform = load_transform(config.transform, args.config) if command.transform and config.transform else None
    if command.logs:
        configure_logging(config.logging.level)
    else:
        logging.disable(logging.ERROR)
    try:
        if command.kafka and not config.kafka.embedded:
            check_job_kafka(config)
        if command.storage:
            check_storage(config)
    except (KafkaUnavailable, StorageUnavailable) as exc:
        print(f"{command.speaker}: {exc}", file=sys.stderr, flush=True)
        return ExitCode.KAFKA if isinstance(exc, KafkaUnavailable) else ExitCode.STORAGE
    with exit_on_config_error(command.speaker):
        return command.body(args, config, transform)
