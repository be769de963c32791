"""synclib forwarder under spark-submit: `synclib run` (see synclib.cli).

    spark-submit jobs/forwarder.py --config conf/local.yaml [--set key=value ...] [--available-now]

Without --config it runs the repository's embedded default, conf/local.yaml beside jobs/.
"""

import sys
from pathlib import Path

from synclib.cli import main

if __name__ == "__main__":
    default_config = Path(__file__).resolve().parents[1] / "conf" / "local.yaml"
    sys.exit(main(["run", *sys.argv[1:]], default_config=str(default_config)))
