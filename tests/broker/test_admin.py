"""The planner's broker queries (`synclib.kafka.admin.KafkaMetadata`): offsets are asked of the
leaders its last partition listing named, without a metadata round trip each (at 1,024 partitions
kafka-python's own call turned a whole metadata answer into dicts, about 11 ms of CPU, three times
a trigger); a leader that no longer answers for its partitions sends the question through
kafka-python's call, with fresh metadata, and the same offsets come back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from synclib.compat import kafka_python
from synclib.kafka.admin import KafkaMetadata
from synclib.kafka.subscription import Subscription
from tests.support import produce


@pytest.fixture
def asked_of_leaders(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each `list_offsets_from` call answered (None: the hook could not ask)."""
    answers: list[Any] = []
    ask = kafka_python.list_offsets_from

    def counted(*args: Any) -> Any:
        try:
            answer = ask(*args)
        except Exception as exc:
            answers.append(exc)
            raise
        answers.append(answer)
        return answer

    monkeypatch.setattr(kafka_python, "list_offsets_from", counted)
    return answers


def test_offsets_come_from_the_listed_leaders_and_match_kafka_pythons_own_call(
        producer: Producer, bootstrap_servers: str, new_topic: Callable[..., str], asked_of_leaders: list[Any]) -> None:
    topic = new_topic("admin-offsets", 3)
    for partition, count in ((0, 4), (1, 0), (2, 7)):
        produce(producer, topic, partition, [(None, b"x%d" % i) for i in range(count)])
    metadata = KafkaMetadata({"bootstrap_servers": [bootstrap_servers]}, Subscription(topics=(topic,)))
    try:
        assert metadata.high_watermarks([(topic, 0)]) == {(topic, 0): 4}  # nothing listed yet: kafka-python's call
        assert asked_of_leaders == []

        partitions = metadata.partitions()
        latest, earliest = metadata.high_watermarks(partitions), metadata.earliest_offsets(partitions)

        assert latest == {(topic, 0): 4, (topic, 1): 0, (topic, 2): 7}
        assert earliest == dict.fromkeys(partitions, 0)
        assert len(asked_of_leaders) == 2 and all(isinstance(answer, dict) for answer in asked_of_leaders)
    finally:
        metadata.close()


def test_a_leader_that_does_not_answer_sends_the_question_through_fresh_metadata(
        producer: Producer, bootstrap_servers: str, new_topic: Callable[..., str], asked_of_leaders: list[Any]) -> None:
    topic = new_topic("admin-moved", 2)
    produce(producer, topic, 1, [(None, b"x%d" % i) for i in range(5)])
    metadata = KafkaMetadata({"bootstrap_servers": [bootstrap_servers]}, Subscription(topics=(topic,)))
    try:
        partitions = metadata.partitions()
        metadata._leaders = dict.fromkeys(metadata._leaders, 4242)  # a node no broker of the cluster is

        assert metadata.high_watermarks(partitions) == {(topic, 0): 0, (topic, 1): 5}
        assert len(asked_of_leaders) == 1 and isinstance(asked_of_leaders[0], Exception)
        assert metadata.high_watermarks(partitions) == {(topic, 0): 0, (topic, 1): 5}
        assert len(asked_of_leaders) == 1  # forgotten until the next listing

        metadata.partitions()
        assert metadata.high_watermarks(partitions) == {(topic, 0): 0, (topic, 1): 5}
        assert isinstance(asked_of_leaders[-1], dict)
    finally:
        metadata.close()
