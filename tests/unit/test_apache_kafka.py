"""The test broker's cluster ids: Kafka's storage tool parses its arguments like a shell, so an
id starting with '-' (1 in 64 random ids) failed `kafka-storage format` in CI."""

from __future__ import annotations

import base64

from harness.apache_kafka import new_cluster_id


def test_cluster_ids_are_uuids_that_never_look_like_an_option() -> None:
    ids = [new_cluster_id() for _ in range(5000)]  # about 78 would start with '-' unfiltered
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
