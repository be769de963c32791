"""The `synclib dead-letters` commands: `list` the dead letters, or `replay` them into the main table
once the transform is fixed (`synclib.dead_letters.replay`). `--where` is a Spark SQL condition on
the dead-letter table's columns, e.g. "error_class = 'CAST_OVERFLOW'" or
"topic = 'events' and batch_id >= 40". The session is the forwarder's (`job_session`: the same
`storage.s3`), started by `synclib.cli` once the configuration and storage are checked."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from synclib.errors import first_line
from synclib.exit_codes import ExitCode
from synclib.settings import ForwarderConfig

if TYPE_CHECKING:  # the types only: the command line parses these arguments without loading pyspark
    from pyspark.sql import SparkSession

    from synclib.dead_letters.transformed import Transform


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "replay"))
    parser.add_argument("--where", help="Spark SQL condition selecting dead letters")
    parser.add_argument("--dry-run", action="store_true", help="replay: say what would be written, write nothing")


def run(spark: SparkSession, args: argparse.Namespace, config: ForwarderConfig, transform: Transform | None) -> int:
    """List or replay (`args.action`); a replay that leaves dead letters failing the transform exits 1."""
    from synclib.dead_letters.replay import dead_letters, replay
    from synclib.delta.catalog import TableError, locate
    from synclib.delta.engine import resolve_engine

    sink = config.sink
    try:  # tables by name: the locations the session's catalog gives them (None: not created yet)
        main_path = sink.path or locate(spark, sink.address)
        dead_path = sink.dead_letters_path or locate(spark, sink.dead_letters_table or "", "sink.dead_letters.table")
    except TableError as exc:
        print(f"dead_letters: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    if args.action == "list":
        letters = None if dead_path is None or main_path is None else dead_letters(spark, dead_path, main_path,
                                                                                   args.where)
        if letters is None:
            print(f"no dead-letter table at {dead_path or sink.dead_letters_table}")
            return ExitCode.OK
        shown = letters.select("topic", "partition", "offset", "batch_id", "error_class",
                               "error_message", "in_main_table").orderBy("topic", "partition", "offset")
        for row in shown.collect():
            print(f"{row.topic}[{row.partition}] offset {row.offset} (batch {row.batch_id}): {row.error_class}: "
                  f"{first_line(row.error_message)}{' [in the main table]' if row.in_main_table else ''}")
        return ExitCode.OK
    if main_path is None or dead_path is None:
        print(f"no dead-letter table at {dead_path or sink.dead_letters_table}")
        return ExitCode.OK
    result = replay(spark, main_path=main_path, dead_path=dead_path,
                    engine=resolve_engine(spark, sink.engine), transform=transform,
                    error_column=sink.dead_letters.error_column, partition_by=tuple(sink.partition_by),
                    partition_by_date=sink.partition_by_date, include_headers=config.source.include_headers,
                    where=args.where, dry_run=args.dry_run, main_table=sink.table)
    verb = "would replay" if args.dry_run else "replayed"
    print(f"dead letters selected: {result.selected}; already in the main table: {result.already}; "
          f"{verb}: {result.selected - result.already - len(result.still_failing)}; "
          f"still failing the transform: {len(result.still_failing)}")
    for line in result.still_failing:
        print(f"  {line}")
    return ExitCode.FAILED if result.still_failing else ExitCode.OK
