"""Spark's own micro-batch floor on this machine: the lower bound under the forwarder's.

    ./spark-submit.sh benchmarks/spark_floor.py [--trigger 400ms] [--seconds 40] [--runs 3]

Spark's `rate` source (2 rows a second) into its own Parquet file sink, local[2], a local
checkpoint: no Kafka, no Python worker, no Delta. Prints the medians of Spark's `durationMs` over
the batches after the first five, per run and over the runs: what a micro-batch costs Spark before
anything synclib adds (benchmarks/floor.py measures the forwarder's one-row batch).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence

from pyspark.sql import SparkSession

from synclib.app.signals import stop_after_batch_in_flight
from synclib.settings.values import parse_duration

STOP_TIMEOUT_S = 60.0
KEYS = ("triggerExecution", "addBatch", "commitOffsets", "walCommit", "queryPlanning", "latestOffset")
WARM_UP_BATCHES = 5


def run(spark: SparkSession, trigger_s: float, seconds: float) -> dict[str, float]:
    """One query for `seconds`: the medians of its batches' durations (ms) by part."""
    with tempfile.TemporaryDirectory(prefix="synclib-spark-floor-") as directory:
        query = (spark.readStream.format("rate").option("rowsPerSecond", 2).load()
                 .writeStream.format("parquet").option("path", f"{directory}/out")
                 .option("checkpointLocation", f"{directory}/checkpoint")
                 .trigger(processingTime=f"{int(trigger_s * 1000)} milliseconds").start())
        time.sleep(seconds)
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0][WARM_UP_BATCHES:]
        # between batches: a batch stopped mid-way still writes files while the directory goes
        stop_after_batch_in_flight(spark, query, STOP_TIMEOUT_S)
    if not batches:
        raise RuntimeError(f"no batch after the first {WARM_UP_BATCHES} in {seconds:g} s: run it longer")
    return {key: statistics.median(p["durationMs"].get(key, 0) for p in batches) for key in KEYS}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/spark_floor.py", description=__doc__.splitlines()[0])
    parser.add_argument("--trigger", default="400ms")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    runs = []
    for number in range(args.runs):
        runs.append(run(spark, parse_duration(args.trigger), args.seconds))
        print(f"run {number + 1}: " + ", ".join(f"{k} {v:g}" for k, v in runs[-1].items()), flush=True)
    print(f"Spark's rate source -> Parquet file sink at {args.trigger}, medians of {args.runs} runs (ms): "
          + ", ".join(f"{k} {statistics.median(r[k] for r in runs):g}" for k in KEYS), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
