"""Version guards of the private PySpark and py4j APIs (synclib/compat/pyspark.py, py4j.py)."""

from __future__ import annotations

import logging

import py4j.version
import pyarrow as pa
import pyspark
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType, TimestampType

from synclib.compat import py4j as py4j_compat
from synclib.compat import pyspark as spark_compat
from synclib.schema import output_schema


def test_the_installed_versions_are_the_tested_ones() -> None:
    assert spark_compat.version_problem() is None
    assert py4j_compat.version_problem() is None


def test_an_untested_pyspark_or_py4j_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyspark, "__version__", "4.3.0")
    assert spark_compat.version_problem() == "PySpark 4.3.0 is not the version synclib is tested with (4.2.x)"
    monkeypatch.setattr(py4j.version, "__version__", "0.10.10.1")
    assert py4j_compat.version_problem() == "py4j 0.10.10.1 is not the version synclib is tested with (0.10.9.x)"


def test_with_an_untested_pyspark_the_jvm_conveniences_are_skipped_once_with_a_log_line(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(pyspark, "__version__", "4.3.0")
    monkeypatch.setattr(spark_compat, "_logged", set())
    purpose = "JVM signal handlers not installed"
    with caplog.at_level(logging.WARNING, logger=spark_compat.__name__):
        assert spark_compat.jvm(object(), purpose) is None  # the guard comes before any attribute access
        assert spark_compat.jvm(object(), purpose) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"PySpark 4.3.0 is not the version synclib is tested with (4.2.x): {purpose}"]


def test_an_exception_without_a_jvm_origin_names_no_offsets() -> None:
    assert spark_compat.failed_batch_offsets(ValueError("not from a query")) is None


def test_spark_schemas_become_arrow_schemas_with_utc_timestamps() -> None:
    schema = StructType([StructField("value", BinaryType()), StructField("timestamp", TimestampType())])
    assert spark_compat.to_arrow_schema(schema) == pa.schema(
        [("value", pa.binary()), ("timestamp", pa.timestamp("us", tz="UTC"))])


@pytest.mark.parametrize("include_headers", [False, True])
def test_the_output_schema_is_spark_kafka_sources_and_converts_back_to_itself(include_headers: bool) -> None:
    spark_schema = spark_compat.from_arrow_schema(output_schema(include_headers))

    assert spark_schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int" + (",headers:array<struct<key:string,value:binary>>>" if include_headers else ">"))
    assert all(field.nullable for field in spark_schema.fields)
    assert spark_compat.to_arrow_schema(spark_schema) == output_schema(include_headers)
