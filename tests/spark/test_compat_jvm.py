"""The private JVM accessors on a classic session (Spark Connect's side: test_spark_connect.py)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from synclib.compat import py4j as py4j_compat
from synclib.compat import pyspark as spark_compat
from synclib.delta.engine import delta_spark_available


def test_a_classic_session_has_a_jvm_that_loads_classes(spark: SparkSession) -> None:
    assert not spark_compat.is_connect(spark)
    jvm = spark_compat.jvm(spark, "nothing (test)")
    assert jvm is not None
    assert py4j_compat.class_loadable(jvm, "java.lang.String")
    assert not py4j_compat.class_loadable(jvm, "org.example.NotOnTheClasspath")
    assert delta_spark_available(spark) is py4j_compat.class_loadable(jvm, "io.delta.tables.DeltaTable")


def test_a_jvm_error_is_named_by_its_java_class_and_message(spark: SparkSession) -> None:
    """A JVM exception PySpark does not convert (as Delta's commit conflicts) is py4j's Py4JJavaError,
    whose first line names only the call (`An error occurred while calling ...`)."""
    jvm = spark_compat.jvm(spark, "nothing (test)")
    assert jvm is not None
    try:
        jvm.java.lang.Class.forName("org.example.NotOnTheClasspath")
    except Exception as exc:  # noqa: BLE001 - what py4j raises is the subject
        assert str(exc).startswith("An error occurred while calling")
        assert py4j_compat.java_error(exc) == "java.lang.ClassNotFoundException: org.example.NotOnTheClasspath"
    else:
        raise AssertionError("Class.forName found a class that is not there")
