"""synclib forwarder: release Kafka events into Delta only after the leader group committed them.

    spark-submit jobs/forwarder.py --config conf/local.yaml [--set key=value ...] [--available-now]

Without --config it runs the repository's embedded default, conf/local.yaml beside jobs/.
"""

import sys
from pathlib import Path

from synclib.app.job import main

if __name__ == "__main__":
    sys.exit(main(default_config=str(Path(__file__).resolve().parent.parent / "conf" / "local.yaml")))
