"""The value types of the settings: what each accepts, how it is normalised, what an error says.

Every type accepts its YAML form and its Spark option form (a string), so `${VAR}` works
for numbers and booleans and the same model reads YAML and Spark options. Durations are
strings with a unit ("500ms", "2s", "1.5 s", "5m", "1h"), stored as float seconds; as Spark
options (validation context `SPARK`) a bare number is seconds too.
"""

from __future__ import annotations

import json
import os
import re
from typing import Annotated, Any, Literal, NamedTuple, get_args

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, SecretStr, ValidationInfo

from synclib.offsets import parse_offsets_json, to_offsets_json
from synclib.settings.model import Invalid

# Validation context of Spark reader options (`model_validate(..., context=SPARK)`).
SPARK = {"spark_options": True}

EMBEDDED = "embedded"
Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
StartingMode = Literal["earliest", "latest", "committed"]
OffsetReset = Literal["earliest", "latest"]
RemoteOffsets = Literal["commit_log", "group"]
Engine = Literal["auto", "delta-rs", "delta-spark"]
ENGINES: tuple[Engine, ...] = get_args(Engine)  # sink.engine
AUTO, DELTA_RS, DELTA_SPARK = ENGINES
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
TriggerMode = Literal["leader", "processing_time", "available_now"]
TRIGGER_MODES: tuple[TriggerMode, ...] = get_args(TriggerMode)  # trigger.mode
LEADER, PROCESSING_TIME, AVAILABLE_NOW = TRIGGER_MODES

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SERVER = re.compile(r"[^\s,]+:[0-9]+")
# A one-, two- or three-part table name: identifiers of letters, digits and `_`, or back-quoted.
_IDENTIFIER = r"(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`)"
_TABLE_NAME = re.compile(rf"{_IDENTIFIER}(?:\.{_IDENTIFIER}){{0,2}}")
_NAME_PART = re.compile(_IDENTIFIER)
_TRANSFORM = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", re.ASCII)
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_NUMBER = re.compile(r"\s*[0-9]*\.?[0-9]+\s*")
_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]+)\s*")
_UNITS = {
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("s", "sec", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
}
_DURATION_EXAMPLES = "such as '500ms', '2s' or '5m'"


class Kind(NamedTuple):
    """Annotated metadata naming a value type in the configuration reference (pydantic ignores it)."""

    name: str
    duration: bool = False  # a default is shown as a duration ("5m"), not as seconds


class Secret(SecretStr):
    """A secret string: masked in repr, str and dumps; compares equal to its plain value."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.get_secret_value() == other
        return super().__eq__(other)

    __hash__ = SecretStr.__hash__

    def _display(self) -> str:
        return "***"


def parse_duration(text: str) -> float:
    """Seconds in a duration such as "500ms", "2s", "1.5 s", "5m" or "1h"; ValueError otherwise."""
    match = _DURATION.fullmatch(text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ValueError(f"not a duration: {text!r}")
    return float(match.group(1)) * unit


def parse_bool(text: str) -> bool:
    """`true` or `false` in any case, as Spark options spell booleans; ValueError otherwise."""
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"not a boolean: {text!r}")
    return lowered == "true"


def choices(values: Any) -> BeforeValidator:
    """Accept one of the strings of a `Literal` (any case), normalised to its spelling there."""
    allowed: tuple[str, ...] = get_args(values)
    by_lower = {value.lower(): value for value in allowed}

    def convert(raw: Any) -> str:
        if isinstance(raw, str) and raw.strip().lower() in by_lower:
            return by_lower[raw.strip().lower()]
        raise Invalid("one of " + ", ".join(repr(c) for c in allowed))
    return BeforeValidator(convert)


def _string(raw: Any) -> str:
    if isinstance(raw, str) and raw.strip():
        return raw
    raise Invalid("a non-empty string", "quote it in YAML" if isinstance(raw, (int, float)) else "")


def _boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        try:
            return parse_bool(raw)
        except ValueError:
            pass
    raise Invalid("true or false")


def _positive_int(raw: Any) -> int:
    if isinstance(raw, str) and re.fullmatch(r"\s*[0-9]+\s*", raw):
        raw = int(raw)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        return raw
    raise Invalid("a positive integer")


def _port(raw: Any) -> int:
    try:
        port = _positive_int(raw)
    except Invalid:
        port = 0
    if not 0 < port < 65536:
        raise Invalid("a TCP port number, 1 to 65535")
    return port


def _duration(raw: Any, info: ValidationInfo) -> float:
    if isinstance(raw, str):
        if info.context == SPARK and _NUMBER.fullmatch(raw):
            return float(raw)
        try:
            return parse_duration(raw)
        except ValueError:
            pass
    raise Invalid(f"a duration {_DURATION_EXAMPLES}")


def _positive(seconds: float) -> float:
    if seconds <= 0:
        raise Invalid(f"a positive duration {_DURATION_EXAMPLES}")
    return seconds


def _path(raw: Any) -> str:
    """URIs (s3://, dbfs:/, file:) and absolute paths as written; relative paths resolved now."""
    text = _string(raw)
    if _URI.match(text) or os.path.isabs(text):
        return text
    return os.path.abspath(os.path.expanduser(text))


def _bootstrap_servers(raw: Any) -> str:
    text = _string(raw).strip()
    if text == EMBEDDED:
        return text
    servers = [s.strip() for s in text.split(",")]
    if all(_SERVER.fullmatch(s) for s in servers):
        return ",".join(servers)
    raise Invalid(f"{EMBEDDED!r} or a comma-separated list of host:port")


def is_topic(name: Any) -> bool:
    return isinstance(name, str) and _TOPIC.fullmatch(name) is not None


def _topic(raw: Any) -> str:
    if is_topic(raw):
        return str(raw)
    raise Invalid("a topic name (letters, digits, '.', '_', '-')")


def _topic_list(raw: Any) -> str:
    # Empty names are dropped (`a,b,` is a and b), as Spark's Kafka source does.
    names = raw.split(",") if isinstance(raw, str) else raw
    if isinstance(names, list):
        names = [n.strip() if isinstance(n, str) else n for n in names]
        names = [n for n in names if n != ""]
    if isinstance(names, list) and names and all(isinstance(n, str) and is_topic(n) for n in names):
        return ",".join(names)
    raise Invalid("topic names, comma-separated or as a list")


def _group_list(raw: Any) -> tuple[str, ...]:
    groups = [g for g in raw.split(",") if g.strip()] if isinstance(raw, str) else raw
    if isinstance(groups, (list, tuple)) and groups and all(isinstance(g, str) and g.strip() and "," not in g
                                                    for g in groups):
        return tuple(g.strip() for g in groups)
    raise Invalid("a non-empty list of group ids (without commas)")


def _fraction(raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise Invalid("a fraction between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise Invalid("a fraction between 0 and 1")
    return value


def _column(raw: Any) -> str:
    if not isinstance(raw, str) or not _COLUMN.fullmatch(raw):
        raise Invalid("a column name (letters, digits, _)")
    return raw


def _columns(raw: Any) -> tuple[str, ...]:
    if (isinstance(raw, (list, tuple)) and all(isinstance(c, str) and _COLUMN.fullmatch(c) for c in raw)
            and len(set(raw)) == len(raw)):
        return tuple(raw)
    raise Invalid("a list of distinct column names")


def table_name_parts(name: str) -> tuple[str, ...]:
    """The identifiers of a table name that `TableName` accepted, back quotes removed:
    `main.events.raw` is ("main", "events", "raw"), `` `my-db`.t `` is ("my-db", "t")."""
    parts = [m.group(0) for m in _NAME_PART.finditer(name)]
    return tuple(p[1:-1].replace("``", "`") if p.startswith("`") else p for p in parts)


def _table_name(raw: Any) -> str:
    text = _string(raw).strip()
    if _TABLE_NAME.fullmatch(text):
        return text
    raise Invalid("a table name: table, schema.table or catalog.schema.table (letters, digits, _; "
                  "other characters inside `back quotes`)")


def _properties(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(k, str) and k.strip() for k in raw):
        raise Invalid("a mapping of table property names to values")
    bad = [k for k, v in raw.items() if v is None or isinstance(v, (dict, list))]
    if bad:
        raise Invalid("a mapping of table property names to values", f"{bad[0]!r} needs a string, number or boolean")
    return {str(k): spark_value(v) for k, v in raw.items()}


def _regex(raw: Any) -> str:
    text = _string(raw)
    try:
        re.compile(text)
    except re.error as exc:
        raise Invalid("a valid regular expression", str(exc)) from None
    return text


def _transform(raw: Any) -> str:
    if isinstance(raw, str) and _TRANSFORM.fullmatch(raw):
        return raw
    raise Invalid("'module:function', e.g. 'mypackage.transforms:enrich'")


def _assign(raw: Any) -> str:
    expected = 'JSON such as {"events": [0, 1]}'
    value = _json_object(raw, expected)
    for topic, partitions in value.items():
        if not (is_topic(topic) and isinstance(partitions, list) and partitions
                and all(_is_int(p) and p >= 0 for p in partitions) and len(set(partitions)) == len(partitions)):
            raise Invalid(expected, f"topic {topic!r} needs a list of distinct partition numbers")
    return json.dumps(value, separators=(",", ":"))


def _starting_offsets(raw: Any) -> str:
    modes = get_args(StartingMode)
    if isinstance(raw, str) and raw.strip().lower() in modes:
        return raw.strip().lower()
    expected = f"{', '.join(repr(m) for m in modes)} or offsets JSON such as {{\"events\": {{\"0\": 23}}}}"
    value = _json_object(raw, expected)
    for topic, partitions in value.items():
        if not (is_topic(topic) and isinstance(partitions, dict) and partitions):
            raise Invalid(expected, f"topic {topic!r} needs a mapping of partition to offset")
    try:
        offsets = parse_offsets_json(value)
    except ValueError as exc:
        raise Invalid(expected, str(exc)) from None
    return json.dumps(to_offsets_json(offsets), separators=(",", ":"))


def _json_object(raw: Any, expected: str) -> dict[str, Any]:
    """A mapping given either as YAML or as a JSON string."""
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise Invalid(expected, f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(value, dict) or not value:
        raise Invalid(expected)
    return {str(k): v for k, v in value.items()}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


String = Annotated[str, BeforeValidator(_string), Kind("string")]
SecretString = Annotated[Secret, BeforeValidator(_string), PlainSerializer(str, when_used="json"), Kind("secret")]
Boolean = Annotated[bool, BeforeValidator(_boolean), Kind("boolean")]
PositiveInt = Annotated[int, BeforeValidator(_positive_int), Kind("integer > 0")]
Port = Annotated[int, BeforeValidator(_port), Kind("port")]
Duration = Annotated[float, BeforeValidator(_duration), Kind("duration", duration=True)]
PositiveDuration = Annotated[float, BeforeValidator(_duration), AfterValidator(_positive),
                             Kind("duration > 0", duration=True)]
FilePath = Annotated[str, BeforeValidator(_path), Kind("path")]
BootstrapServers = Annotated[str, BeforeValidator(_bootstrap_servers), Kind("servers")]
Topic = Annotated[str, BeforeValidator(_topic), Kind("topic")]
TopicList = Annotated[str, BeforeValidator(_topic_list), Kind("topics")]  # comma-separated
GroupList = Annotated[tuple[str, ...], BeforeValidator(_group_list), Kind("group ids")]
Columns = Annotated[tuple[str, ...], BeforeValidator(_columns), Kind("column names")]
ColumnName = Annotated[str, BeforeValidator(_column), Kind("column name")]
Fraction = Annotated[float, BeforeValidator(_fraction), Kind("fraction")]
Regex = Annotated[str, BeforeValidator(_regex), Kind("regex")]
TableName = Annotated[str, BeforeValidator(_table_name), Kind("table name")]
TableProperties = Annotated[dict[str, str], BeforeValidator(_properties), Kind("mapping")]
TransformSpec = Annotated[str, BeforeValidator(_transform), Kind("`module:function`")]
Assignment = Annotated[str, BeforeValidator(_assign), Kind("JSON")]  # compact JSON {"topic": [partitions]}
# A StartingMode or compact offsets JSON.
StartingOffsets = Annotated[str, BeforeValidator(_starting_offsets), Kind("mode or JSON")]
ProtocolChoice = Annotated[Protocol, choices(Protocol)]
SaslMechanismChoice = Annotated[SaslMechanism, choices(SaslMechanism)]
OffsetResetChoice = Annotated[OffsetReset, choices(OffsetReset)]
RemoteOffsetsChoice = Annotated[RemoteOffsets, choices(RemoteOffsets)]
EngineChoice = Annotated[Engine, choices(Engine)]
LogLevelChoice = Annotated[LogLevel, choices(LogLevel)]
TriggerModeChoice = Annotated[TriggerMode, choices(TriggerMode)]


def spark_value(value: Any) -> str:
    """Spark option spelling: true/false, integral floats without '.0', lists comma-separated."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (tuple, list)):
        return ",".join(spark_value(v) for v in value)
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return str(value)
