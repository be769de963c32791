"""synclib benchmark: forwarder throughput vs a raw kafka-python consumer, gate latency, peak memory.

    spark-submit jobs/benchmark.py [--runs 3] [--messages 250000] [--config conf/local.yaml] [--output FILE]
"""

import os
import sys

from synclib.benchmark import main

if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main(default_config=os.path.join(root, "conf", "local.yaml")))
