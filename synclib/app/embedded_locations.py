"""An embedded run's checkpoint and table: a new world each run, so its old locations go."""

from __future__ import annotations

import os
import shutil

from synclib.settings import ConfigError, ForwarderConfig

EMBEDDED_MARKER = ".synclib-embedded"  # in the checkpoint and table of an embedded run


def start_embedded_afresh(config: ForwarderConfig, config_path: str) -> list[str]:
    """Prepare an embedded run's checkpoint and table; return what was removed.

    The embedded broker keeps its topics in memory, so every embedded run is a new world
    whose offsets restart at 0: a previous embedded run's checkpoint and table (recognised
    by the marker this leaves in them) are removed; any other existing location is refused.
    """
    if config.sink.path is None:
        raise ConfigError(f"{config_path}: sink.table: embedded runs write to a local path: set sink.path instead")
    locations = {"checkpoint.location": config.checkpoint.location, "sink.path": config.sink.path}
    for key, location in locations.items():
        if not os.path.isabs(location):
            raise ConfigError(f"{config_path}: {key}: embedded runs write to local paths, not {location!r}")
        if os.path.exists(location) and not os.path.exists(os.path.join(location, EMBEDDED_MARKER)):
            raise ConfigError(f"{config_path}: {key}: {location} exists and was not written by an embedded "
                              "run; embedded runs start afresh and replace their locations, so give them "
                              "their own (e.g. under data/)")
    removed = [location for location in locations.values() if os.path.exists(location)]
    for location in removed:
        shutil.rmtree(location, ignore_errors=True)  # one may hold the other
    for location in locations.values():
        os.makedirs(location, exist_ok=True)
        open(os.path.join(location, EMBEDDED_MARKER), "w").close()
    return removed
