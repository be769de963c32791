"""What every synclib command line shares: `--config FILE` and `--set KEY=VALUE ...` read into a
`ForwarderConfig`, and an invalid configuration reported as one line, `COMMAND: invalid
configuration: ...`, with exit code 2 (argparse's own for bad usage), before anything starts."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from synclib.settings import ConfigError

EXIT_CONFIG = 2


def config_parser(prog: str, description: str, default_config: str | None = None) -> argparse.ArgumentParser:
    """A parser with `--config` (required unless there is a default) and `--set`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", default=default_config, required=default_config is None,
                        help="the forwarder's YAML config" + (" (default: %(default)s)" if default_config else ""))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set source.max_offsets_per_trigger=1000")
    return parser


@contextlib.contextmanager
def exit_on_config_error(command: str) -> Iterator[None]:
    """Turn a `ConfigError` raised inside into its one line on stderr and exit code 2."""
    try:
        yield
    except ConfigError as exc:
        print(f"{command}: invalid configuration: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_CONFIG) from None
