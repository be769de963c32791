"""Read the job's YAML file into a `ForwarderConfig`; every problem is one `ConfigError`.

`load_config(path, overrides)` reads the YAML (duplicate keys are an error), expands
`${VAR}` and `${VAR:-default}` in string values from the environment (keys are never
expanded), applies `--set dotted.key=value` overrides (values parsed as YAML: `500` is an
int, `[a, b]` a list) and validates. The message is `<file>: <dotted.key>: <problem>`, every invalid setting on one line
(`; ` between them); secrets never appear in it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from synclib.settings.job import ForwarderConfig
from synclib.settings.model import Naming, describe, explain, is_secret, known_names, nested, suggestion

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_YAML_NAMING = Naming(name=".".join, noun="key")


class ConfigError(ValueError):
    """An invalid configuration; the message names the file and the dotted key."""


def load_config(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> ForwarderConfig:
    """Read, expand, override and validate the YAML at `path`; raise `ConfigError` if invalid."""
    file = os.fspath(path)
    tree = _expand(_read_yaml(file), "", file)
    for override in overrides:
        _apply_override(tree, override, file)
    try:
        return ForwarderConfig.model_validate(tree)
    except ValidationError as exc:
        problems = explain(exc, ForwarderConfig, _YAML_NAMING)
        raise ConfigError(f"{file}: " + "; ".join(f"{'.'.join(key)}: {problem}" for key, problem in problems)) from None


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys instead of keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[str] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key_node.value!r}", key_node.start_mark)
            seen.add(key_node.value)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(file: str) -> dict[Any, Any]:
    try:
        with open(file, "rb") as stream:
            tree = yaml.load(stream, Loader=_StrictLoader)
    except FileNotFoundError:
        raise ConfigError(f"{file}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read: {exc.strerror}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{file}: not valid YAML{where}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{file}: expected a mapping with sections kafka, source, sink, checkpoint "
                          f"at the top level, got {describe(tree) if tree is not None else 'an empty file'}")
    return tree


def _expand(value: Any, key: str, file: str) -> Any:
    """A copy of `value` with `${VAR}` / `${VAR:-default}` expanded in every string value."""
    if isinstance(value, dict):
        return {k: _expand(v, _join(key, str(k)), file) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{key}[{i}]", file) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        current = os.environ.get(name)
        if current is not None and (current or default is None):
            return current
        if default is not None:
            return default
        raise ConfigError(f"{file}: {key}: environment variable {name} is not set "
                          f"(write ${{{name}:-default}} to give a default)")

    return _ENV_REFERENCE.sub(substitute, value)


def _apply_override(tree: dict[Any, Any], override: str, file: str) -> None:
    """Set one `dotted.key=value` in the raw tree, walking the model so option names may hold dots."""
    dotted, sep, text = override.partition("=")
    dotted = dotted.strip()
    if not sep or not dotted:
        raise ConfigError(f"{file}: --set {describe(override, secret=is_secret(override))}: expected dotted.key=value")
    try:
        value = _expand(yaml.safe_load(text), dotted, file)
    except yaml.YAMLError:
        raise ConfigError(f"{file}: {dotted}: --set value is not a valid YAML value") from None
    parts = tuple(dotted.split("."))
    node = tree
    for depth, name in enumerate(parts):
        path = parts[: depth + 1]
        known = known_names(ForwarderConfig, parts[:depth])
        if name not in known:
            raise ConfigError(f"{file}: {'.'.join(path)}: unknown key in --set{suggestion(path, known)}")
        if depth == len(parts) - 1:
            node[name] = value
            return
        child = nested(ForwarderConfig, path)
        if child is None:
            raise ConfigError(f"{file}: {'.'.join(path)}: is a value, not a section (in --set {dotted}=...)")
        if not isinstance(node.get(name), dict):
            node[name] = {}
        node = node[name]
        if child is dict:
            node[".".join(parts[depth + 1:])] = value
            return


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key
