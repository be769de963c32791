"""What dead letters cost: the same events forwarded through the same transform (harness.poison's
parse_events) by the plain sink (keeping the rows the transform does not reject, as a user
without dead letters would) and by the dead-letter sink, then with one poison row per batch
(a number too large for the int column, in partition 0).

    .venv/bin/python -m benchmarks.dead_letters [--events 100000] [--batch 25000] [--only clean|poison]
        [--record NAME]

One local[2] Spark session, an embedded broker, a topic of two partitions; each variant is a
Trigger.AvailableNow run over all of it into a fresh table; reported: wall time of the run and
the mean `addBatch` time per batch (Spark's durationMs), load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from pyspark.sql import functions as F

from benchmarks import records
from harness.poison import ERROR_COLUMN, TOO_LARGE, parse_events
from synclib.app.resume import initial_offsets_file
from synclib.dead_letters.sink import DeadLetterBatches, Limits, start_with_dead_letters
from synclib.dead_letters.source_rows import MicroBatchSourceRows
from synclib.delta.stream import DeltaStream, start_delta_stream
from synclib.embedded.broker import EmbeddedBroker, TopicAdmin
from synclib.leader.commitlog import Commit, encode_commit


def produce(bootstrap: str, topic: str, log: str, events: int, poison_every: int | None) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=512 * 1024, acks=1)
    per_partition = events // 2
    for partition in (0, 1):
        for offset in range(per_partition):
            poison = partition == 0 and poison_every is not None and offset % poison_every == poison_every // 2
            value = TOO_LARGE if poison else json.dumps({"n": offset, "name": f"e{offset}"}).encode()
            producer.send(topic, value=value, key=b"k", partition=partition)
        producer.flush()
        producer.send(topic, value=b'{"n": 1, "name": "last"}', partition=partition).get(30)  # exact watermark
        key, value = encode_commit(Commit("snuba", topic, partition, per_partition + 1, orig_message_ts=time.time()))
        producer.send(log, key=key, value=value, partition=0).get(30)
    producer.close()


def run(spark: Any, bootstrap: str, topic: str, log: str, directory: Path, variant: str, batch: int,
        engine: str) -> dict[str, Any]:
    checkpoint = str(directory / "checkpoint")
    options = {
        "kafka.bootstrap.servers": bootstrap, "subscribe": topic, "commitLogTopic": log,
        "synchronizeCommitGroups": "snuba", "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": str(batch), "initialOffsetsFile": initial_offsets_file(checkpoint)}
    raw = spark.readStream.format("synchronized_kafka").options(**options).load()
    target = DeltaStream(str(directory / "table"), checkpoint, engine, trigger={"availableNow": True})
    load = os.getloadavg()[0]
    started = time.monotonic()
    dead_letters: DeadLetterBatches | None = None
    if variant == "plain":
        # the rows a user without dead letters keeps: those the transform does not reject
        kept = parse_events(raw).where(F.col(ERROR_COLUMN).isNull()).drop(ERROR_COLUMN)
        query = start_delta_stream(kept, target)
    else:
        query, dead_letters = start_with_dead_letters(
            raw, parse_events, target, dead_letters_path=str(directory / "dead"), error_column=ERROR_COLUMN,
            limits=Limits(max_rows=100), source_rows=MicroBatchSourceRows(options, checkpoint))
    query.awaitTermination()
    wall = time.monotonic() - started
    batches = [p for p in query.recentProgress if "addBatch" in p.durationMs]
    return {"variant": variant, "wall_s": round(wall, 1), "batches": len(batches),
            "rows": sum(p.numInputRows if dead_letters is None else dead_letters.input_rows(p.batchId, p.numInputRows)
                        for p in batches),
            "add_batch_ms": round(sum(p.durationMs["addBatch"] for p in batches) / max(1, len(batches))),
            "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dead_letters", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=25_000)
    parser.add_argument("--engine", default="delta-rs")
    parser.add_argument("--only", choices=("clean", "poison"), help="run one of the two topics")
    parser.add_argument("--record", metavar="NAME", help="add the run to benchmarks/results/NAME.json, which the "
                        "docs' dead-letter cost table is rendered from (benchmarks/records.py)")
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(given)
    started = records.environment()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this venv's
    from pyspark.sql import SparkSession

    from synclib.source.datasource import register

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="synclib-dl-bench-") as scratch:
        admin = TopicAdmin(broker.bootstrap_servers)
        results = []
        for name, poison_every in (("clean", None), ("poison", args.batch // 2)):
            if args.only not in (None, name):
                continue
            topic, log = f"bench-{name}", f"bench-{name}-log"
            admin.create(topic, 2)
            admin.create(log, 1)
            produce(broker.bootstrap_servers, topic, log, args.events, poison_every)
            # twice each, alternating: the first run of a session also warms the JVM up
            variants = ("plain", "dead-letters") * 2 if poison_every is None else ("dead-letters",)
            for number, variant in enumerate(variants):
                directory = Path(scratch) / f"{name}-{variant}-{number}"
                result = run(spark, broker.bootstrap_servers, topic, log, directory, variant, args.batch, args.engine)
                result["events"] = name
                results.append(result)
                print(json.dumps(result), flush=True)
        admin.close()
    spark.stop()
    if args.record:
        print("recorded in " + str(records.record_run(args.record, "python -m benchmarks.dead_letters", given, started,
                                                      dead_letters=results)))


if __name__ == "__main__":
    main()
