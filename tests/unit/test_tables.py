"""Where `status` and `maintain` find the sink's tables (`synclib.app.tables`): the configured
path, or the location the job recorded in its checkpoint for a table by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from synclib.app.tables import SinkLocations, TableNotRecorded, sink_locations
from synclib.settings import ForwarderConfig
from synclib.spark_checkpoint import TableRecord, record_tables


def config(tmp_path: Path, **sink: object) -> ForwarderConfig:
    return ForwarderConfig.model_validate({
        "kafka": {"bootstrap_servers": "localhost:9092"},
        "source": {"subscribe": "events", "commit_log_topic": "log", "commit_groups": ["g"]},
        "sink": sink, "checkpoint": {"location": str(tmp_path / "checkpoint")}})


def test_a_path_is_its_own_location(tmp_path: Path) -> None:
    assert sink_locations(config(tmp_path, path="/data/events")) == SinkLocations("/data/events",
                                                                                  "/data/events_dead_letters")


def test_a_name_is_found_at_the_location_the_job_recorded(tmp_path: Path) -> None:
    named = config(tmp_path, table="main.sentry.events")
    with pytest.raises(TableNotRecorded, match=r"^sink.table main.sentry.events: .* no record of it there yet"):
        sink_locations(named)
    record_tables(str(tmp_path / "checkpoint"), TableRecord("main.sentry.events", "s3://b/events",
                                                            "main.sentry.events_dead_letters", "s3://b/dl", True))

    assert sink_locations(named) == SinkLocations("s3://b/events", "s3://b/dl", left_to_platform=True)
    with pytest.raises(TableNotRecorded):  # a record of another table is not this one's
        sink_locations(config(tmp_path, table="main.sentry.other"))


def test_the_dead_letter_table_is_named_beside_the_main_one_unless_set(tmp_path: Path) -> None:
    assert config(tmp_path, table="main.s.events").sink.dead_letters_table == "main.s.events_dead_letters"
    assert config(tmp_path, table="main.s.`my events`").sink.dead_letters_table == "main.s.`my events_dead_letters`"
    assert config(tmp_path, table="t", dead_letters={"table": "s.dl"}).sink.dead_letters_table == "s.dl"
    assert config(tmp_path, table="t", dead_letters={"path": "/dl"}).sink.dead_letters_table is None
    assert config(tmp_path, table="t", dead_letters={"path": "/dl"}).sink.dead_letters_path == "/dl"
