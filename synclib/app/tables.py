"""Where the sink's tables are for the commands without Spark (`status`, `maintain`): `sink.path`
as configured, or for `sink.table` the location the job's catalog gave it, which the job records in
its checkpoint (`synclib.spark_checkpoint.TableRecord`; names are resolved only in a Spark session,
`synclib.delta.catalog`)."""

from __future__ import annotations

from dataclasses import dataclass

from synclib.settings import ForwarderConfig
from synclib.spark_checkpoint import recorded_tables


class TableNotRecorded(RuntimeError):
    """A table by name whose location the job has not recorded yet (one line)."""


@dataclass(frozen=True)
class SinkLocations:
    """The main table's and the dead-letter table's locations, and whether the platform maintains
    the main one (a table by name under predictive optimization, `sink.maintenance.leave_to_platform`)."""

    table: str
    dead_letters: str | None
    left_to_platform: bool = False


def sink_locations(config: ForwarderConfig) -> SinkLocations:
    """The sink's locations: from the config, or for `sink.table` from the job's record in its
    checkpoint (`TableNotRecorded` when there is none, or it names another table)."""
    sink = config.sink
    if sink.path is not None:
        return SinkLocations(sink.path, sink.dead_letters_path)
    record = recorded_tables(config.checkpoint.location)
    if record is None or record.table != sink.table:
        raise TableNotRecorded(f"sink.table {sink.table}: its location is resolved by the job's Spark catalog and "
                               f"recorded in checkpoint {config.checkpoint.location} when the job starts; no record "
                               f"of it there yet (run the job once)")
    dead_letters = sink.dead_letters_path or record.dead_letters_location
    return SinkLocations(record.location, dead_letters, record.left_to_platform)
