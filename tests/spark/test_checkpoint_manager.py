"""Spark's checkpoint on S3 through synclib's manager (jvm/src: `PutIfAbsentCheckpointFileManager`),
driven as Spark's offset and commit logs drive it, against the S3 server: a new entry is one PUT,
a second writer of an entry is refused by the store (put-if-absent), a cancelled entry never
appears. The query side (a checkpoint written in place, two runs at once): tests/e2e/test_two_runs.py."""

from __future__ import annotations

from typing import Any

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from harness.object_store import S3Server
from synclib.app.session import CHECKPOINT_MANAGER, S3_CHECKPOINT
from synclib.compat import py4j as py4j_compat
from synclib.compat import pyspark as spark_compat


@pytest.fixture
def manager(spark: SparkSession, s3: S3Server) -> tuple[Any, Any, str]:
    """The manager on a new bucket's checkpoint, with the session's Hadoop configuration (S3A set as the
    job sets it); the JVM and the bucket."""
    jvm = spark_compat.jvm(spark, "the checkpoint manager (test)")
    assert jvm is not None
    hadoop = jvm.org.apache.spark.sql.SparkSession.active().sessionState().newHadoopConf()
    for key, value in S3_CHECKPOINT.items():
        hadoop.set(key, value)
    bucket = s3.bucket()
    root = jvm.org.apache.hadoop.fs.Path(f"s3a://{bucket}/checkpoint")
    return jvm.synclib.checkpoint.PutIfAbsentCheckpointFileManager(root, hadoop), jvm, bucket


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
