"""synclib benchmark: forwarder throughput vs a raw kafka-python consumer, gate latency, peak memory.

    spark-submit jobs/benchmark.py [run] [--runs 3] [--messages 250000] [--config conf/local.yaml] [--output FILE]
    spark-submit jobs/benchmark.py object-store [--engines delta-rs,delta-spark] [--record NAME]
    spark-submit jobs/benchmark.py growth [--versions 20000] [--store local|s3]

The benchmark is a development tool: it lives in the repository's benchmarks/ package (with
the harness/ it shares with the tests), which is neither in the wheel nor in the zip shipped to
executors.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.benchmark import main  # noqa: E402  (needs the repository root on sys.path)

if __name__ == "__main__":
    sys.exit(main(default_config=str(ROOT / "conf" / "local.yaml")))
