"""synclib forwarder: release Kafka events into Delta only after the leader group committed them.

    spark-submit jobs/forwarder.py --config conf/local.yaml [--set key=value ...] [--available-now]
"""

import sys

from synclib.job import main

if __name__ == "__main__":
    sys.exit(main())
