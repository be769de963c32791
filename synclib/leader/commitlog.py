"""Codec for the leader's commit-log messages.

Key: ``"{topic}:{partition}:{group}"`` (UTF-8; group ids may contain ':').
Value, current format: JSON ``{"offset": int, "orig_message_ts": float, "received_p99": float|null}``.
Value, legacy format: an ASCII integer, with an optional ``orig_message_ts`` header
formatted ``%Y-%m-%dT%H:%M:%S.%fZ``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

LEGACY_TIMESTAMP_HEADER = "orig_message_ts"
LEGACY_TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

Headers = Sequence[tuple[str, bytes | None]]


class CommitLogDecodeError(ValueError):
    """A commit-log message whose key or value cannot be decoded."""


@dataclass(frozen=True)
class Commit:
    """One leader commit: events of (topic, partition) below `offset` are committed."""

    group: str
    topic: str
    partition: int
    offset: int
    orig_message_ts: float | None = None
    received_p99: float | None = None
    committed_at: float | None = None  # the commit-log record's timestamp (seconds): when the leader committed


def encode_commit(commit: Commit) -> tuple[bytes, bytes]:
    """Encode a commit as (key, value) in the current format."""
    key = f"{commit.topic}:{commit.partition}:{commit.group}".encode()
    value = json.dumps(
        {
            "offset": commit.offset,
            "orig_message_ts": commit.orig_message_ts,
            "received_p99": commit.received_p99,
        }
    ).encode("utf-8")
    return key, value


def decode_commit(key: bytes | None, value: bytes | None, headers: Headers = (),
                  committed_at: float | None = None) -> Commit:
    """Decode a commit-log message in either format (`committed_at`: its record's timestamp, in
    seconds); raise `CommitLogDecodeError` if invalid."""
    topic, partition, group = _decode_key(key)
    if not value:
        raise CommitLogDecodeError("empty value")
    if value.lstrip()[:1] == b"{":
        offset, orig_ts, p99 = _decode_json_value(value)
    else:
        offset, orig_ts, p99 = _decode_legacy_value(value, headers)
    return Commit(group, topic, partition, offset, orig_ts, p99, committed_at)


def _decode_key(key: bytes | None) -> tuple[str, int, str]:
    if not key:
        raise CommitLogDecodeError("missing key")
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommitLogDecodeError(f"key is not UTF-8: {key[:64]!r}") from exc
    parts = text.split(":", 2)
    if len(parts) != 3 or not all(parts):
        raise CommitLogDecodeError(f"key {text[:128]!r} is not 'topic:partition:group'")
    topic, partition_text, group = parts
    partition = _parse_non_negative_int(partition_text, "partition")
    return topic, partition, group


def _decode_json_value(value: bytes) -> tuple[int, float | None, float | None]:
    try:
        payload = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CommitLogDecodeError(f"value is not valid JSON: {value[:64]!r}") from exc
    if not isinstance(payload, dict):
        raise CommitLogDecodeError(f"value is not a JSON object: {value[:64]!r}")
    if "offset" not in payload:
        raise CommitLogDecodeError("value has no 'offset'")
    offset = payload["offset"]
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise CommitLogDecodeError(f"offset {offset!r} is not an integer")
    if offset < 0:
        raise CommitLogDecodeError(f"offset {offset} is negative")
    return offset, _optional_float(payload, "orig_message_ts"), _optional_float(payload, "received_p99")


def _decode_legacy_value(
    value: bytes, headers: Headers
) -> tuple[int, float | None, float | None]:
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError as exc:
        raise CommitLogDecodeError(f"legacy value is not ASCII: {value[:64]!r}") from exc
    offset = _parse_non_negative_int(text, "offset")
    orig_ts = None
    for name, header_value in headers:
        if name == LEGACY_TIMESTAMP_HEADER and header_value is not None:
            try:
                parsed = datetime.strptime(header_value.decode("ascii"), LEGACY_TIMESTAMP_FORMAT)
            except (UnicodeDecodeError, ValueError) as exc:
                raise CommitLogDecodeError(
                    f"header {LEGACY_TIMESTAMP_HEADER} {header_value[:64]!r} is not "
                    f"{LEGACY_TIMESTAMP_FORMAT}"
                ) from exc
            orig_ts = parsed.replace(tzinfo=timezone.utc).timestamp()
    return offset, orig_ts, None


def _parse_non_negative_int(text: str, what: str) -> int:
    stripped = text.strip()
    if not stripped.isdigit() or not stripped.isascii():
        if stripped.startswith("-") and stripped[1:].isdigit():
            raise CommitLogDecodeError(f"{what} {stripped} is negative")
        raise CommitLogDecodeError(f"{what} {text[:64]!r} is not a non-negative integer")
    return int(stripped)


def _optional_float(payload: dict[str, Any], name: str) -> float | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommitLogDecodeError(f"{name} {value!r} is not a number")
    return float(value)
