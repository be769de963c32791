"""Spark's checkpoint on S3 through synclib's manager (jvm/src: `PutIfAbsentCheckpointFileManager`),
driven as Spark's offset and commit logs drive it, against the S3 server: a new entry is one PUT,
a second writer of an entry is refused by the store (put-if-absent), a cancelled entry never
appears; through the fault proxy (harness/fault_proxy.py), each of S3's transient failures of an
entry's PUT is retried by S3A, and a retry whose first attempt took effect (its answer lost) finds
its own bytes: created, not another writer's. The query side (a checkpoint written in place, two
runs at once): tests/e2e/test_two_runs.py."""

from __future__ import annotations

from typing import Any

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from harness.fault_proxy import INTERNAL, RESET_AFTER, RESET_BEFORE, SLOW_DOWN, FaultProxy
from harness.object_store import S3Server
from synclib.app.session import CHECKPOINT_MANAGER, S3_CHECKPOINT
from synclib.compat import py4j as py4j_compat
from synclib.compat import pyspark as spark_compat


def _manager(spark: SparkSession, s3: S3Server, endpoint: str | None = None) -> tuple[Any, Any, str]:
    """The manager on a new bucket's checkpoint, with the session's Hadoop configuration (S3A set as the
    job sets it, at `endpoint` when given); the manager, the JVM and the bucket."""
    jvm = spark_compat.jvm(spark, "the checkpoint manager (test)")
    assert jvm is not None
    hadoop = jvm.org.apache.spark.sql.SparkSession.active().sessionState().newHadoopConf()
    for key, value in {**S3_CHECKPOINT, **({"fs.s3a.endpoint": endpoint} if endpoint else {})}.items():
        hadoop.set(key, value)
    bucket = s3.bucket()
    root = jvm.org.apache.hadoop.fs.Path(f"s3a://{bucket}/checkpoint")
    return jvm.synclib.checkpoint.PutIfAbsentCheckpointFileManager(root, hadoop), jvm, bucket


@pytest.fixture
def manager(spark: SparkSession, s3: S3Server) -> tuple[Any, Any, str]:
    return _manager(spark, s3)


def _write(jvm: Any, manager: Any, bucket: str, name: str, data: bytes, overwrite: bool = False) -> Any:
    stream = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(f"s3a://{bucket}/checkpoint/{name}"), overwrite)
    stream.write(data)
    return stream


def test_the_job_names_the_manager_and_it_is_on_the_classpath(spark: SparkSession) -> None:
    jvm = spark_compat.jvm(spark, "the checkpoint manager (test)")
    assert jvm is not None
    assert py4j_compat.class_loadable(jvm, S3_CHECKPOINT[CHECKPOINT_MANAGER])


def test_a_new_entry_is_one_put_and_a_second_writer_of_it_is_refused_by_the_store(
        manager: tuple[Any, Any, str], s3: S3Server) -> None:
    files, jvm, bucket = manager
    mark = len(s3.log())
    _write(jvm, files, bucket, "offsets/0", b"v1\nfirst").close()
    written = [r for r in s3.log()[mark:] if r.key.startswith(f"{bucket}/")]
    assert [(r.method, r.key) for r in written] == [("PUT", f"{bucket}/checkpoint/offsets/0")]

    late = _write(jvm, files, bucket, "offsets/0", b"v1\nsecond")  # a run that planned batch 0 too
    with pytest.raises(Py4JJavaError) as refused:
        late.close()
    assert (py4j_compat.java_error(refused.value) or "").startswith("org.apache.hadoop.fs.FileAlreadyExistsException")
    assert (s3.directory / "data" / bucket / "checkpoint" / "offsets" / "0").read_bytes() == b"v1\nfirst"

    _write(jvm, files, bucket, "metadata", b"{}", overwrite=True).close()  # an entry Spark may replace
    _write(jvm, files, bucket, "metadata", b'{"id": "q"}', overwrite=True).close()
    assert (s3.directory / "data" / bucket / "checkpoint" / "metadata").read_bytes() == b'{"id": "q"}'


def test_a_cancelled_entry_never_appears(manager: tuple[Any, Any, str], s3: S3Server) -> None:
    files, jvm, bucket = manager
    stream = _write(jvm, files, bucket, "commits/3", b"v1\n{}")
    stream.cancel()
    stream.close()  # after a cancel: nothing more
    assert not files.exists(jvm.org.apache.hadoop.fs.Path(f"s3a://{bucket}/checkpoint/commits/3"))
    assert not (s3.directory / "data" / bucket / "checkpoint" / "commits" / "3").exists()
    assert not [r for r in s3.log() if r.method == "PUT" and r.key == f"{bucket}/checkpoint/commits/3"]


@pytest.mark.parametrize("fault", [SLOW_DOWN, INTERNAL, RESET_BEFORE, RESET_AFTER])
def test_an_entry_whose_put_fails_transiently_is_retried_and_a_lost_answer_is_its_own(
        spark: SparkSession, s3: S3Server, fault: str) -> None:
    with FaultProxy(s3.port) as proxy:
        files, jvm, bucket = _manager(spark, s3, s3.behind(proxy.port).endpoint)
        key = f"{bucket}/checkpoint/offsets/0"
        proxy.inject(fault, count=1, method="PUT", key=f"^{key}$")
        _write(jvm, files, bucket, "offsets/0", b"v1\nours").close()
        assert proxy.faults(fault) == [(fault, "PUT", key)]
        assert (s3.directory / "data" / bucket / "checkpoint" / "offsets" / "0").read_bytes() == b"v1\nours"

        proxy.inject(fault, count=1, method="PUT", key=f"^{key}$")  # another writer, its answer lost too
        late = _write(jvm, files, bucket, "offsets/0", b"v1\ntheirs")
        with pytest.raises(Py4JJavaError) as refused:
            late.close()
        assert (py4j_compat.java_error(refused.value) or "").startswith(
            "org.apache.hadoop.fs.FileAlreadyExistsException")
        assert (s3.directory / "data" / bucket / "checkpoint" / "offsets" / "0").read_bytes() == b"v1\nours"
