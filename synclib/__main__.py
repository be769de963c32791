"""`python -m synclib`: the `synclib` command line (`synclib.cli`)."""

import sys

from synclib.cli import main

if __name__ == "__main__":
    sys.exit(main())
