"""synclib dead letters under spark-submit: `synclib dead-letters` (usage in synclib.cli)."""

import sys

from synclib.cli import main

if __name__ == "__main__":
    sys.exit(main(["dead-letters", *sys.argv[1:]]))
