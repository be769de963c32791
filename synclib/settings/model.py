"""The base of every settings section and the translation of validation errors into one message.

A section is a frozen pydantic model that forbids unknown keys and reads null as "use the
default". Validators raise `Invalid` (a value is not what the setting takes) or `SettingError`
(a rule between settings is broken, naming the settings involved); `explain` turns each error of
a `ValidationError` into `(setting, problem)`, with settings named by a `Naming`: dotted YAML keys
for a config file, option names for Spark.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import ErrorDetails

KeyPath = tuple[str, ...]  # a setting's keys from the root: ("kafka", "security", "protocol")

# Annotated metadata of a field whose explicit null means None, not the default.
KEEP_NULL = "keep-null"
# pydantic's error types of a key the section does not have (a name, or not even a string).
_UNKNOWN_KEY = ("extra_forbidden", "invalid_key")
# Parts of a setting's or option's name that mark its value as secret.
_SECRET_MARKERS = ("password", "secret", "jaas", "token", "key.password")


class Invalid(ValueError):
    """Raised by a value validator: what the setting expects, and optionally why the value is not it."""

    def __init__(self, expected: str, detail: str = "") -> None:
        super().__init__(expected)
        self.expected = expected
        self.detail = detail


class SettingError(ValueError):
    """A broken rule. `at` is the dotted setting to blame and `refs` the dotted settings that
    `problem` mentions as {0}, {1}, ... (and the word for a setting as {noun}), both relative to
    where the validator runs. Without refs, `problem` is taken as written."""

    def __init__(self, at: str, problem: str, *refs: str) -> None:
        super().__init__(problem)
        self.at = at
        self.problem = problem
        self.refs = refs


class Section(BaseModel):
    """A settings section: immutable, unknown keys rejected, null read as the default. The
    docstring below a setting is its meaning in the configuration reference (`reference`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True,
                              use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {k: v for k, v in data.items()
                if v is not None or (k in fields and KEEP_NULL in fields[k].metadata)}


@dataclass(frozen=True)
class Naming:
    """How an error message names a setting: `name(path)` and the noun for a setting."""

    name: Callable[[KeyPath], str]
    noun: str


def explain(error: ValidationError, root: type[BaseModel], naming: Naming) -> list[tuple[KeyPath, str]]:
    """Every problem of `error` as `(setting, problem)`, unknown keys first, each setting once."""
    errors = error.errors(include_url=False)
    ordered = [e for e in errors if e["type"] in _UNKNOWN_KEY] + [e for e in errors if e["type"] not in _UNKNOWN_KEY]
    problems: dict[KeyPath, str] = {}
    for entry in ordered:
        path, problem = _explain_one(entry, root, naming)
        problems.setdefault(path, problem)
    return list(problems.items())


def _explain_one(error: ErrorDetails, root: type[BaseModel], naming: Naming) -> tuple[KeyPath, str]:
    path = tuple(str(part) for part in error["loc"])
    kind, context = error["type"], error.get("ctx") or {}
    cause = context.get("error")
    if isinstance(cause, SettingError):
        refs = [naming.name(path + tuple(ref.split("."))) for ref in cause.refs]
        at = path + tuple(cause.at.split(".")) if cause.at else path
        return at, cause.problem.format(*refs, noun=naming.noun) if refs else cause.problem
    value = describe(error.get("input"), secret=bool(path) and is_secret(path[-1]))
    if isinstance(cause, Invalid):
        detail = f" ({cause.detail})" if cause.detail else ""
        return path, f"expected {cause.expected}, got {value}{detail}"
    if kind in _UNKNOWN_KEY:
        return path, f"unknown {naming.noun}" + suggestion(path, known_names(root, path[:-1]))
    if kind == "missing":
        return path, f"missing required {'section' if known_names(root, path) else naming.noun}"
    if kind in ("model_type", "dict_type"):
        return path, f"expected a mapping, got {value}"
    return path, f"{error['msg']}, got {value}"


def nested(root: type[BaseModel], path: KeyPath) -> type[BaseModel] | type[dict[Any, Any]] | None:
    """What `path` holds below `root`: a section's model, `dict` (free-form mapping) or None (a value)."""
    current: Any = root
    for name in path:
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or name not in current.model_fields:
            return None
        current = _section_type(current.model_fields[name].annotation)
    return current  # type: ignore[no-any-return]


def known_names(root: type[BaseModel], path: KeyPath) -> list[str]:
    """The keys of the section at `path` (empty if it is not a section)."""
    section = nested(root, path)
    return list(section.model_fields) if isinstance(section, type) and issubclass(section, BaseModel) else []


def suggestion(path: KeyPath, known: list[str]) -> str:
    """' (did you mean 'a.b'?)' for a misspelt last key of dotted `path`, else the known keys."""
    candidates = sorted(known)
    match = difflib.get_close_matches(path[-1], candidates, n=1)
    if match:
        return f" (did you mean {'.'.join((*path[:-1], match[0]))!r}?)"
    return f" (known keys: {', '.join(candidates)})"


def is_secret(name: str) -> bool:
    """True for setting and option names whose values must never be logged or shown in an error."""
    lowered = name.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def describe(value: Any, secret: bool = False) -> str:
    """A short rendering of a bad value for an error message; secrets show only their type."""
    if secret and value is not None:
        return f"<hidden {type(value).__name__}>"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _section_type(annotation: Any) -> type[Any] | None:
    for candidate in (annotation, *union_members(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
        if candidate is dict or get_origin(candidate) is dict:
            return dict
    return None


def union_members(annotation: Any) -> tuple[Any, ...]:
    origin = get_origin(annotation)
    return get_args(annotation) if origin is Union or origin is types.UnionType else ()
