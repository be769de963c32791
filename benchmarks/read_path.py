"""The forwarder's read path alone: `synclib.kafka.reader.read_partition` over one partition of the
benchmark's backlog shape (distinct 200-byte JSON events) on the embedded broker, in this process.

    .venv/bin/python -m benchmarks.read_path [--messages 250000] [--runs 3]
    .venv/bin/py-spy record -r 200 -f raw -o read.txt -- .venv/bin/python -m benchmarks.read_path

Prints rows/s and CPU per row (this process: the reading thread and kafka-python's I/O thread)
per run, after one untimed read (consumer connected, fast-path self-check done); under py-spy,
the samples under `read` show where the CPU per row goes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from kafka import KafkaProducer

from benchmarks.cluster import event_values
from synclib.embedded.broker import EmbeddedBroker, TopicAdmin
from synclib.embedded.simulation import send_ending_single
from synclib.kafka.reader import KafkaInputPartition, OffsetRange, read_partition
from synclib.schema import KAFKA_SCHEMA

TOPIC = "read-path"


def read(bootstrap_servers: str, messages: int) -> None:
    task = KafkaInputPartition([OffsetRange(TOPIC, 0, 0, messages)])
    rows = sum(batch.num_rows for batch in read_partition(
        task, {"bootstrap_servers": [bootstrap_servers]}, KAFKA_SCHEMA, include_headers=False,
        fail_on_data_loss=True, poll_timeout_ms=200, stall_timeout_s=20))
    if rows != messages:
        raise RuntimeError(f"read {rows} rows, expected {messages}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.read_path", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=250_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        admin = TopicAdmin(bootstrap)
        admin.create(TOPIC, 1)
        admin.close()
        event = event_values(args.value_bytes)
        producer = KafkaProducer(bootstrap_servers=bootstrap, batch_size=1 << 20, linger_ms=50)
        for sequence in range(args.messages - 1):
            producer.send(TOPIC, value=event(0, sequence), partition=0)
        send_ending_single(producer, TOPIC, {0: [(None, event(0, args.messages - 1), [])]})
        producer.close()
        read(bootstrap, args.messages)  # untimed: connection, self-check
        for run in range(1, args.runs + 1):
            cpu, wall = time.process_time(), time.perf_counter()
            read(bootstrap, args.messages)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            print(f"run {run}: {args.messages / wall:,.0f} rows/s, {cpu / args.messages * 1e6:.2f} us CPU/row",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
