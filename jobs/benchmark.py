"""synclib benchmark: forwarder throughput vs a raw kafka-python consumer, gate latency, peak memory.

    spark-submit jobs/benchmark.py [--runs 3] [--messages 250000] [--config conf/local.yaml] [--output FILE]
"""

import sys

from synclib.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
