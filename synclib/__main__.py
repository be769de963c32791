"""Command line tools that need no Spark: `python -m synclib status --config FILE [--json]`."""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from synclib.app import status

COMMANDS = {"status": status.main}
USAGE = "usage: python -m synclib status --config FILE [--set KEY=VALUE ...] [--bootstrap HOST:PORT] [--json]"


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        print(USAGE, file=sys.stderr)
        return status.EXIT_USAGE
    return COMMANDS[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
