"""The forwarder's read path alone: `synclib.kafka.reader.read_partition` over the benchmark's
backlog shape (distinct 200-byte JSON events), in this process, on the embedded broker or a
one-node Apache Kafka.

    .venv/bin/python -m benchmarks.read_path [--messages 250000] [--runs 3]
    .venv/bin/python -m benchmarks.read_path --broker apache-kafka --partitions 256 --messages 100 --range-rows 5
    .venv/bin/py-spy record -r 200 -f raw -o read.txt -- .venv/bin/python -m benchmarks.read_path

One task reads `--range-rows` rows (default: all) of each of `--partitions` partitions holding
`--messages` each, as a micro-batch behind the leader does. Prints rows/s, the task's wall time,
CPU per row (this process: the reading thread and kafka-python's I/O thread) and the record bytes
the task decoded per run (with `--compare-unsized`, then the same with every fetch at the
configured limits), after one untimed read (consumer connected, fast-path self-check done);
under py-spy, the samples under `read` show where the CPU per row goes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from unittest import mock

from kafka import KafkaProducer

from benchmarks.cluster import event_values
from synclib.embedded.broker import EmbeddedBroker, TopicAdmin
from synclib.embedded.simulation import send_ending_single
from synclib.kafka import reader
from synclib.kafka.reader import KafkaInputPartition, OffsetRange, cached_consumer, read_partition
from synclib.schema import KAFKA_SCHEMA

TOPIC = "read-path"
BROKERS = ("embedded", "apache-kafka")


def read(bootstrap_servers: str, partitions: int, rows: int) -> None:
    task = KafkaInputPartition([OffsetRange(TOPIC, p, 0, rows) for p in range(partitions)])
    read_rows = sum(batch.num_rows for batch in read_partition(
        task, {"bootstrap_servers": [bootstrap_servers]}, KAFKA_SCHEMA, include_headers=False,
        fail_on_data_loss=True, poll_timeout_ms=200, stall_timeout_s=20))
    if read_rows != partitions * rows:
        raise RuntimeError(f"read {read_rows} rows, expected {partitions * rows}")


def broker(stack: ExitStack, kind: str) -> str:
    if kind == "embedded":
        return stack.enter_context(EmbeddedBroker()).bootstrap_servers
    from harness.apache_kafka import KafkaCluster

    directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="read-path-"))
    return stack.enter_context(KafkaCluster(1, directory=directory)).bootstrap_servers


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.read_path", description=__doc__.splitlines()[0])
    parser.add_argument("--broker", choices=BROKERS, default="embedded")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--messages", type=int, default=250_000, help="backlog per partition")
    parser.add_argument("--range-rows", type=int, help="rows the task reads per partition (default: all)")
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--batch-bytes", type=int, default=1 << 20,
                        help="the producer's batch size (a few hundred: a batch per record, as a live producer "
                        "spread over hundreds of partitions writes)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compare-unsized", action="store_true",
                        help="after each run, the same task with every fetch at the configured limits (4 MiB)")
    args = parser.parse_args(argv)
    rows = args.range_rows or args.messages
    with ExitStack() as stack:
        bootstrap = broker(stack, args.broker)
        admin = TopicAdmin(bootstrap)
        admin.create(TOPIC, args.partitions)
        admin.close()
        event = event_values(args.value_bytes)
        producer = KafkaProducer(bootstrap_servers=bootstrap, batch_size=args.batch_bytes, linger_ms=50)
        for partition in range(args.partitions):
            for sequence in range(args.messages - 1):
                producer.send(TOPIC, value=event(partition, sequence), partition=partition)
        send_ending_single(producer, TOPIC, {p: [(None, event(p, args.messages - 1), [])]
                                             for p in range(args.partitions)})
        producer.close()
        read(bootstrap, args.partitions, rows)  # untimed: connection, self-check
        consumer = cached_consumer({"bootstrap_servers": [bootstrap]})
        for run in range(1, args.runs + 1):
            for sized in (True, False) if args.compare_unsized else (True,):
                with ExitStack() as unsized:
                    if not sized:  # every fetch at the configured limits, as before the sizing
                        unsized.enter_context(mock.patch.object(reader, "_size_fetches", lambda *_: None))
                        consumer.size_fetches(*consumer.limits)
                    cpu, wall, fetched = time.process_time(), time.perf_counter(), consumer.fetched_bytes
                    read(bootstrap, args.partitions, rows)
                    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                total = args.partitions * rows
                print(f"run {run}{'' if sized else ' unsized'}: {total / wall:,.0f} rows/s, task {wall * 1000:.0f} ms, "
                      f"{cpu / total * 1e6:.2f} us CPU/row ({cpu * 1000:.0f} ms), "
                      f"{(consumer.fetched_bytes - fetched) / 2**20:.2f} MiB decoded", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
