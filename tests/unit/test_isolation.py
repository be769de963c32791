"""Isolating poison rows by halving (synclib.dead_letters.isolation): found exactly, in bounded work."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from synclib.dead_letters.isolation import Key, TooManyFailures, describe, isolate, ranges_of
from synclib.offsets import OffsetRange
from synclib.settings import ConfigError, load_config


def batch(ends: dict[int, int], gaps: frozenset[tuple[int, int]] = frozenset()) -> list[Key]:
    return sorted(("events", p, o) for p, end in ends.items() for o in range(end) if (p, o) not in gaps)


class Transform:
    """Fails on `poison` keys; counts the evaluations."""

    def __init__(self, keys: Sequence[Key], poison: set[Key]) -> None:
        self.keys, self.poison, self.calls = keys, poison, 0

    def __call__(self, ranges: Sequence[OffsetRange]) -> tuple[str, str] | None:
        self.calls += 1
        hit = [k for k in self.keys if k in self.poison
               and any((r.topic, r.partition) == k[:2] and r.start <= k[2] < r.end for r in ranges)]
        return ("CAST_OVERFLOW", f"at {hit[0]}") if hit else None


def test_ranges_and_their_description() -> None:
    keys = batch({0: 9, 1: 4}, gaps=frozenset({(0, 0), (0, 1), (0, 2), (0, 3), (0, 4)}))
    assert ranges_of(keys) == [OffsetRange("events", 0, 5, 9), OffsetRange("events", 1, 0, 4)]
    assert describe(keys) == "events[0] offsets [5, 9), events[1] offsets [0, 4)"


@pytest.mark.parametrize("poison", [set(), {("events", 0, 0)}, {("events", 1, 99)},
                                    {("events", 0, 17), ("events", 0, 18), ("events", 1, 3)}])
def test_every_poison_row_is_found_within_2_k_log2_n_evaluations(poison: set[Key]) -> None:
    keys = batch({0: 100, 1: 100}, gaps=frozenset({(0, 50), (1, 7)}))
    transform = Transform(keys, poison)
    found = isolate(keys, transform, limit=10)
    assert [f.key for f in found] == sorted(poison)
    assert all(f.error_class == "CAST_OVERFLOW" and f.message == f"at {f.key}" for f in found)
    assert transform.calls <= 1 + 2 * len(poison) * math.ceil(math.log2(len(keys)))
    if poison == {("events", 1, 99)}:  # always in the second half: each first half passes, one evaluation a level
        assert transform.calls <= 2 + math.ceil(math.log2(len(keys)))


def test_a_known_failure_of_the_whole_batch_is_not_evaluated_again() -> None:
    keys = batch({0: 2})
    transform = Transform(keys, {("events", 0, 1)})
    found = isolate(keys, transform, limit=10, known_error=("X", "y"))
    assert [f.key for f in found] == [("events", 0, 1)] and transform.calls == 2  # first half, then the row


def test_more_failures_than_the_limit_stop_the_search() -> None:
    keys = batch({0: 64})
    transform = Transform(keys, {("events", 0, o) for o in range(0, 64, 2)})
    with pytest.raises(TooManyFailures) as stopped:
        isolate(keys, transform, limit=3)
    assert len(stopped.value.found) == 4 and transform.calls < 40


def test_dead_letters_settings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "job.yaml"
    path.write_text("kafka: {bootstrap_servers: 'localhost:9092'}\n"
                    "source: {subscribe: events, commit_log_topic: log, commit_groups: [snuba]}\n"
                    f"sink: {{path: {tmp_path}/table}}\ncheckpoint: {{location: {tmp_path}/cp}}\n")
    config = load_config(str(path), [])
    assert not config.sink.dead_letters.enabled  # off unless asked for
    assert config.sink.dead_letters_path == f"{tmp_path}/table_dead_letters"
    config = load_config(str(path), ["sink.dead_letters.enabled=true", "sink.dead_letters.max_fraction=0.25",
                                     "sink.dead_letters.error_column=bad"])
    assert (config.sink.dead_letters.max_fraction, config.sink.dead_letters.error_column) == (0.25, "bad")
    for override, message in [("sink.dead_letters.max_fraction=1.5", "a fraction between 0 and 1"),
                              ("sink.dead_letters.error_column='a b'", "a column name"),
                              ("sink.dead_letters.max_rows=0", "sink.dead_letters.max_rows")]:
        with pytest.raises(ConfigError, match=message):
            load_config(str(path), [override])
