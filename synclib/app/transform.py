"""The configured transform (`transform: module:function`), imported before Spark starts."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from synclib.settings import ConfigError

if TYPE_CHECKING:  # the type only: importing the sink would load pyspark before the config is checked
    from synclib.dead_letters.transformed import Transform


def load_transform(spec: str, config_path: str) -> Transform:
    """Import `module:function`; a typo is a configuration error, found before Spark starts."""
    module_name, _, function_name = spec.partition(":")
    try:
        function: object = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{config_path}: transform: cannot load {spec!r}: {exc}") from None
    if not callable(function):
        raise ConfigError(f"{config_path}: transform: {spec!r} is not callable")
    return cast("Transform", function)
