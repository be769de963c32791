"""The dead-letter commands: list dead letters, or replay them into the main table once the transform is fixed.

    ./spark-submit.sh jobs/dead_letters.py --config FILE list [--where SQL]
    ./spark-submit.sh jobs/dead_letters.py --config FILE replay [--where SQL] [--dry-run]

`--where` is a Spark SQL condition on the dead-letter table's columns, e.g.
"error_class = 'CAST_OVERFLOW'" or "topic = 'events' and batch_id >= 40". Exit codes: 0 done
(a replay: every selected dead letter is in the main table), 1 some still fail the transform,
2 invalid configuration, 4 an `s3://` location cannot be listed with the `storage` settings
(checked before Spark starts). The session is the forwarder's (`job_session`: the same
`storage.s3`). The work is synclib.delta.replay's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from synclib.app.command_line import config_parser, exit_on_config_error
from synclib.app.preflight import EXIT_STORAGE, StorageUnavailable, check_storage
from synclib.app.transform import load_transform
from synclib.settings import load_config


def main(argv: Sequence[str]) -> int:
    parser = config_parser("dead_letters.py", (__doc__ or "").splitlines()[0])
    parser.add_argument("command", choices=("list", "replay"))
    parser.add_argument("--where", help="Spark SQL condition selecting dead letters")
    parser.add_argument("--dry-run", action="store_true", help="replay: say what would be written, write nothing")
    args = parser.parse_args(argv)
    with exit_on_config_error("dead_letters"):
        config = load_config(args.config, args.overrides)
        transform = load_transform(config.transform, args.config) if config.transform else None

    try:
        check_storage(config)
    except StorageUnavailable as exc:
        print(f"dead_letters: {exc}", file=sys.stderr, flush=True)
        return EXIT_STORAGE
    # Here: pyspark, deltalake and the sink load only once the configuration and storage are checked.
    from synclib.app.session import job_session
    from synclib.delta.engine import resolve_engine
    from synclib.delta.replay import dead_letters, replay

    spark = job_session(config, "synclib-dead-letters")
    sink = config.sink
    if args.command == "list":
        letters = dead_letters(spark, sink.dead_letters_path, sink.path, args.where)
        if letters is None:
            print(f"no dead-letter table at {sink.dead_letters_path}")
            return 0
        shown = letters.select("topic", "partition", "offset", "batch_id", "error_class",
                               "error_message", "in_main_table").orderBy("topic", "partition", "offset")
        for row in shown.collect():
            message = (row.error_message or "").strip().splitlines()
            print(f"{row.topic}[{row.partition}] offset {row.offset} (batch {row.batch_id}): {row.error_class}: "
                  f"{message[0] if message else ''}{' [in the main table]' if row.in_main_table else ''}")
        return 0
    result = replay(spark, main_path=sink.path, dead_path=sink.dead_letters_path,
                    engine=resolve_engine(spark, sink.engine), transform=transform,
                    error_column=sink.dead_letters.error_column, partition_by=tuple(sink.partition_by),
                    partition_by_date=sink.partition_by_date, include_headers=config.source.include_headers,
                    where=args.where, dry_run=args.dry_run)
    verb = "would replay" if args.dry_run else "replayed"
    print(f"dead letters selected: {result.selected}; already in the main table: {result.already}; "
          f"{verb}: {result.selected - result.already - len(result.still_failing)}; "
          f"still failing the transform: {len(result.still_failing)}")
    for line in result.still_failing:
        print(f"  {line}")
    return 1 if result.still_failing else 0
