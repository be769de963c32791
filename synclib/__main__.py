"""Command line tools that need no Spark.

    python -m synclib status --config FILE [--json]         per-partition status
    python -m synclib maintain --config FILE [--set K=V]    one maintenance pass over the sink's table
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from synclib.app import status

USAGE = ("usage: python -m synclib status --config FILE [--set KEY=VALUE ...] [--bootstrap HOST:PORT] [--json]\n"
         "       python -m synclib maintain --config FILE [--set KEY=VALUE ...]")
EXIT_MAINTENANCE_FAILED = 1


def maintain(argv: Sequence[str]) -> int:
    """One maintenance pass (compaction, vacuum, checkpoint, log cleanup) over `sink.path` with the
    `sink.maintenance` settings (with delta-rs, whatever `sink.engine` says; `enabled` is ignored),
    for cron-style use next to a forwarder whose own maintenance is off."""
    parser = argparse.ArgumentParser(prog="python -m synclib maintain", description=maintain.__doc__)
    parser.add_argument("--config", required=True, help="the forwarder's YAML config")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    from synclib.settings import ConfigError, load_config

    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"maintain: invalid configuration: {exc}", file=sys.stderr)
        return status.EXIT_USAGE
    logging.basicConfig(level=config.logging.level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from synclib.delta.maintenance import run_pass

    try:
        report = run_pass(config.sink.path, config.sink.maintenance)
    except Exception as exc:  # noqa: BLE001 - any failure: say what, exit non-zero
        print(f"maintain: the pass over {config.sink.path} failed: {exc}", file=sys.stderr)
        return EXIT_MAINTENANCE_FAILED
    print(f"{config.sink.path}: {report.summary()}")
    return 0


COMMANDS = {"status": status.main, "maintain": maintain}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        print(USAGE, file=sys.stderr)
        return status.EXIT_USAGE
    return COMMANDS[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
