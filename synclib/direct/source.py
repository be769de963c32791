"""Format `synchronized_kafka_direct`: the `synchronized_kafka` source on the direct write path.

Planning is the source's own; each read task writes the records it reads as the Delta table's
Parquet files and gives Spark one row per file, its add action (`synclib.delta.direct`), for the
delta-rs sink to commit. The table is named by the reader options of `TableFiles`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from synclib.compat import pyspark as spark_compat
from synclib.delta.direct import FILES_SCHEMA, OPTIONS, TableFiles
from synclib.settings.source import SourceOptions
from synclib.source.datasource import SynchronizedKafkaDataSource, SynchronizedKafkaStreamReader

FORMAT_NAME = "synchronized_kafka_direct"


def register(spark: SparkSession) -> None:
    spark.dataSource.register(DirectKafkaDataSource)


class DirectKafkaStreamReader(SynchronizedKafkaStreamReader):
    """The source's reader whose tasks write the table's files and yield their add actions."""

    def __init__(self, options: SourceOptions, schema: StructType, table: TableFiles) -> None:
        super().__init__(options, schema)
        self.table = table

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.table.write(super().read(partition))


class DirectKafkaDataSource(SynchronizedKafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return spark_compat.from_arrow_schema(FILES_SCHEMA)

    def streamReader(self, schema: StructType) -> DirectKafkaStreamReader:
        kafka = SynchronizedKafkaDataSource({k: v for k, v in self.options.items() if k.lower() not in OPTIONS})
        reader = kafka.streamReader(kafka.schema())
        return DirectKafkaStreamReader(reader.options, reader.schema, TableFiles.from_options(self.options))
