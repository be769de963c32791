"""Spark's offsets JSON: the one parser (synclib/offsets.py) and the failed batch it describes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from synclib.app.forwarder import failed_batch
from synclib.offsets import parse_offsets_json, to_offsets_json


def test_text_and_decoded_json_give_the_same_offsets_and_round_trip() -> None:
    text = '{"events": {"1": 9, "0": -2}, "audit": {"10": 0}}'
    offsets = parse_offsets_json(text)

    assert offsets == {("events", 1): 9, ("events", 0): -2, ("audit", 10): 0}
    assert parse_offsets_json({"events": {1: 9, "0": -2}, "audit": {"10": 0}}) == offsets
    assert to_offsets_json(offsets) == {"audit": {"10": 0}, "events": {"0": -2, "1": 9}}
    assert parse_offsets_json(to_offsets_json(offsets)) == offsets


@pytest.mark.parametrize(("offsets", "message"), [
    ('{"events": {"0": 1}', "Expecting"),
    ("[1]", "offsets JSON maps topics to their partitions' offsets, not [1]"),
    ({"events": [1]}, "topic 'events' needs a mapping of partition to offset"),
    ({"events": {"-1": 1}}, "'events' partition '-1': offset must be an integer >= -2"),
    ({"events": {"0": -3}}, "'events' partition '0': offset must be an integer >= -2"),
    ({"events": {"0": True}}, "'events' partition '0': offset must be an integer >= -2"),
    ({"events": {"0": "5"}}, "'events' partition '0': offset must be an integer >= -2"),
])
def test_anything_else_is_a_value_error_naming_it(offsets: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_offsets_json(offsets)


class _Origin:
    """The JVM StreamingQueryException's offsets, as Spark prints them (one JSON per source)."""

    def __init__(self, start: str, end: str) -> None:
        self._start, self._end = start, end

    def startOffset(self) -> str:
        return self._start

    def endOffset(self) -> str:
        return self._end


def _failed(start: str, end: str) -> Exception:
    exc = RuntimeError("the query failed")
    exc._origin = _Origin(start, end)  # type: ignore[attr-defined]
    return exc


def test_the_failed_batch_names_each_partitions_offset_range() -> None:
    assert failed_batch(_failed('[{"events":{"1":4,"0":5}}]', '[{"events":{"0":9,"1":4,"10":2}}]')) == (
        "events[0] offsets [5, 9), events[10] offsets below 2")
    assert failed_batch(_failed("[-]", '[{"events":{"0":3}}]')) == "events[0] offsets below 3"


def test_a_failed_batch_of_another_shape_adds_nothing() -> None:
    assert failed_batch(_failed('[{"events":{"0":5}}]', '[{"events":{"0":5}}]')) is None  # nothing read
    assert failed_batch(_failed("[-]", "[5]")) is None  # not Kafka offsets
    assert failed_batch(_failed("[-, -]", '[{"a":{"0":1}}, {"b":{"0":1}}]')) is None  # two sources
    assert failed_batch(RuntimeError("outside a batch")) is None
