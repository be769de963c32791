"""Command line tools that need no Spark.

    python -m synclib status --config FILE [--json]         per-partition status
    python -m synclib maintain --config FILE [--set K=V]    one maintenance pass over the sink's table
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from synclib.app import status
from synclib.app.command_line import EXIT_CONFIG, config_parser, exit_on_config_error
from synclib.settings import load_config

USAGE = ("usage: python -m synclib status --config FILE [--set KEY=VALUE ...] [--bootstrap HOST:PORT] [--json]\n"
         "       python -m synclib maintain --config FILE [--set KEY=VALUE ...]")
EXIT_MAINTENANCE_FAILED = 1


def maintain(argv: Sequence[str]) -> int:
    """One maintenance pass (compaction, vacuum, checkpoint, log cleanup) over `sink.path` with the
    `sink.maintenance` settings (with delta-rs, whatever `sink.engine` says; `enabled` is ignored),
    for cron-style use next to a forwarder whose own maintenance is off."""
    args = config_parser("python -m synclib maintain", maintain.__doc__ or "").parse_args(argv)
    with exit_on_config_error("maintain"):
        config = load_config(args.config, args.overrides)
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
        return EXIT_CONFIG
    return COMMANDS[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
