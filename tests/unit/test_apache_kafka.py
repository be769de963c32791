"""The test broker: its cluster ids (Kafka's storage tool parses its arguments like a shell, so an
id starting with '-', 1 in 64 random ids, failed `kafka-storage format` in CI) and where its logs live."""

from __future__ import annotations

import base64
import shutil
import tempfile
from pathlib import Path

import pytest

from harness import apache_kafka
from harness.apache_kafka import KafkaCluster, new_cluster_id


def test_cluster_ids_are_uuids_that_never_look_like_an_option() -> None:
    ids = [new_cluster_id() for _ in range(5000)]  # about 78 would start with '-' unfiltered
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)


def test_an_in_memory_cluster_keeps_its_logs_on_dev_shm_when_it_has_room(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = KafkaCluster(in_memory=True)
    try:
        room = shutil.disk_usage(apache_kafka.MEMORY_DIRECTORY).free >= apache_kafka.MEMORY_DIRECTORY_BYTES
        assert cluster.directory.parent == Path(apache_kafka.MEMORY_DIRECTORY if room else tempfile.gettempdir())
    finally:
        cluster.stop()  # never started: removes its directory
    assert not cluster.directory.exists()

    monkeypatch.setattr(apache_kafka, "MEMORY_DIRECTORY", str(tmp_path / "absent"))
    cluster = KafkaCluster(in_memory=True)
    try:
        assert cluster.directory.parent == Path(tempfile.gettempdir())
    finally:
        cluster.stop()
