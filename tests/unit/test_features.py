"""Which engine may write a table with which features, and the one line that refuses it
(`synclib.delta.features`; tests/spark/test_features.py writes the tables)."""

from __future__ import annotations

from synclib.delta.features import TableFeatures, UnwritableTable, refusal, unwritable_in
from synclib.settings.values import DELTA_RS, DELTA_SPARK

PLAIN = TableFeatures("s3://b/events", frozenset({"appendOnly", "invariants"}), frozenset())
MAPPED = TableFeatures("s3://b/events", frozenset({"appendOnly", "invariants", "columnMapping", "deletionVectors"}),
                       frozenset())
ROW_IDS = TableFeatures("s3://b/events", frozenset({"appendOnly", "domainMetadata", "rowTracking"}), frozenset())
CONSTRAINED = TableFeatures("s3://b/events", frozenset({"appendOnly", "checkConstraints"}),
                            frozenset({"checkConstraints"}))
UNKNOWN = TableFeatures("s3://b/events", frozenset({"someFutureFeature"}), frozenset())


def test_delta_rs_writes_column_mapping_and_deletion_vectors_not_row_tracking() -> None:
    assert MAPPED.refused_by(DELTA_RS) == [] == PLAIN.refused_by(DELTA_RS)
    assert ROW_IDS.refused_by(DELTA_RS) == ["domainMetadata", "rowTracking"]
    assert ROW_IDS.refused_by(DELTA_SPARK) == []


def test_a_feature_in_use_that_an_append_must_enforce_is_refused_by_delta_rs_only() -> None:
    assert CONSTRAINED.refused_by(DELTA_RS) == ["checkConstraints"]
    assert CONSTRAINED.refused_by(DELTA_SPARK) == []


def test_the_refusal_is_one_line_naming_table_features_and_the_engine_that_writes_it() -> None:
    error = refusal(ROW_IDS, DELTA_RS)

    assert isinstance(error, UnwritableTable)
    assert str(error) == ("table s3://b/events needs table features that delta-rs does not write (domainMetadata, "
                          "rowTracking): nothing was written; sink.engine delta-spark writes it (Delta's jars on the "
                          "classpath: ./spark-submit.sh has them)")
    assert "no engine of synclib writes it" in str(refusal(UNKNOWN, DELTA_SPARK))
    assert refusal(PLAIN, DELTA_RS) is None


def test_a_refusal_inside_a_batch_is_found_in_the_query_s_error() -> None:
    message = ("[STREAM_FAILED] Query [id = 1] terminated with exception: ...\n  File \"writer.py\", line 9\n"
               "synclib.delta.features.UnwritableTable: table /t needs table features that delta-rs does not write "
               "(rowTracking): nothing was written; no engine of synclib writes it\n\tat org.apache...")

    assert unwritable_in(message) == ("table /t needs table features that delta-rs does not write (rowTracking): "
                                      "nothing was written; no engine of synclib writes it")
    assert unwritable_in("[STREAM_FAILED] something else") is None
