"""jvm/ivy.xml's versions follow the pinned Python packages: Spark's Kafka source at PySpark's
version, Delta's jar at delta-spark's (a mismatch fails at run time, deep inside the JVM)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ivy_revisions() -> dict[str, str]:
    dependencies = ET.parse(ROOT / "jvm" / "ivy.xml").getroot().iter("dependency")
    return {d.attrib["name"]: d.attrib["rev"] for d in dependencies}


def _pinned(package: str) -> str:
    match = re.search(rf'"{re.escape(package)}(?:\[\w+\])?==([\w.]+)"', (ROOT / "pyproject.toml").read_text())
    assert match, f"pyproject.toml pins no exact version of {package}"
    return match.group(1)


def test_spark_kafka_source_is_at_the_pinned_and_installed_pyspark_version() -> None:
    assert _ivy_revisions()["spark-sql-kafka-0-10_2.13"] == _pinned("pyspark") == version("pyspark")


def test_delta_jar_is_at_the_pinned_and_installed_delta_spark_version() -> None:
    revisions = _ivy_revisions()
    assert revisions["delta-spark_4.2_2.13"] == _pinned("delta-spark") == version("delta-spark")
    assert version("pyspark").startswith("4.2."), "delta-spark_4.2 is built for Spark 4.2"


def test_every_configuration_has_a_dependency() -> None:
    root = ET.parse(ROOT / "jvm" / "ivy.xml").getroot()
    confs = {c.attrib["name"] for c in root.iter("conf")}
    used = {d.attrib["conf"].split("->")[0] for d in root.iter("dependency")}
    assert confs == used
