"""The exit codes of every synclib command, defined once; docs/running.md's table is rendered
from `MEANINGS` (`python -m synclib.exit_codes docs/running.md`)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

from synclib import doc_tables


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    CONFIG = 2
    KAFKA = 3
    STORAGE = 4
    SUPERSEDED = 5
    INTERRUPTED = 130


MEANINGS = {
    ExitCode.OK: "done (`--available-now`, `embedded.run_for`), or stopped by SIGTERM/SIGINT after the batch in "
                 "flight; `status` reported, `maintain` made its pass, `dead-letters replay` left no selected dead "
                 "letter outside the main table",
    ExitCode.FAILED: "`run`: the query failed (the error names the cause; restarting resumes exactly once); "
                     "`status`: the broker, the table or the forwarder's files could not be read; `maintain`: the "
                     "pass failed; `dead-letters replay`: some dead letters still fail the transform (listed)",
    ExitCode.CONFIG: "invalid configuration or arguments: one line naming the file and every invalid key; Spark was "
                     "not started",
    ExitCode.KAFKA: "Kafka cannot be used: unreachable, a rejected credential or certificate, or a named topic "
                    "missing; one line naming the broker, protocol and cause (see "
                    "[Kafka security](operations/security.md)); Spark's query was not started",
    ExitCode.STORAGE: "an `s3://`/`s3a://` location cannot be used: the server does not answer, refuses the "
                      "credentials, or is plain HTTP without `allow_http` (or `AWS_ALLOW_HTTP`); one line naming "
                      "the location and the setting (see [Object storage](operations/object-storage.md)); Spark was "
                      "not started. `run`: the store failed transiently (503, 5xx, resets, timeouts) for longer than "
                      "`storage.s3.retry_deadline`: one line naming the store, the request and how long it failed; "
                      "restarting after the outage resumes exactly once",
    ExitCode.SUPERSEDED: "another run of the job started on the same checkpoint and took it over (the newest run "
                         "wins): one line naming the checkpoint and the other run (run id, host, pid, start time); "
                         "this run committed nothing after the other started. Do not retry it automatically: a "
                         "retry would take the checkpoint back (see "
                         "[Object storage](operations/object-storage.md#two-runs-at-once))",
    ExitCode.INTERRUPTED: "a second signal stopped it at once (130: the Python driver; 143 when the JVM itself "
                          "got the signal); the batch in flight is replayed, exactly once, on restart",
}
COMMAND = "python -m synclib.exit_codes docs/running.md"


def exit_code_table() -> str:
    """The exit codes as a markdown table."""
    return "\n".join(["| exit code | meaning |", "|---|---|",
                      *(f"| {int(code)} | {MEANINGS[code]} |" for code in ExitCode)])


TABLES = {"exit codes": exit_code_table}


def main(argv: Sequence[str] | None = None) -> None:
    doc_tables.main("python -m synclib.exit_codes", "Print the exit codes (a markdown table).", TABLES, COMMAND, argv)


if __name__ == "__main__":
    main()
