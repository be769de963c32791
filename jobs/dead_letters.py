"""synclib dead letters: list them, or replay them into the main table once the transform is fixed.

    ./spark-submit.sh jobs/dead_letters.py --config FILE list [--where SQL]
    ./spark-submit.sh jobs/dead_letters.py --config FILE replay [--where SQL] [--dry-run]

`--where` is a Spark SQL condition on the dead-letter table's columns, e.g.
"error_class = 'CAST_OVERFLOW'" or "topic = 'events' and batch_id >= 40". Exit codes: 0 done
(a replay: every selected dead letter is in the main table), 1 some still fail the transform,
2 invalid configuration, 4 an `s3://` location cannot be listed with the `storage` settings.
`storage.s3` applies as in the forwarder. See synclib.delta.replay.
"""

import sys

from synclib.app.dead_letter_commands import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
