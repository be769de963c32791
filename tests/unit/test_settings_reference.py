"""The configuration reference (docs/configuration.md) is rendered from the settings model
(synclib/settings/reference.py)."""

import re
from pathlib import Path

import pytest

from synclib.settings import reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_documented_tables_are_the_models() -> None:
    text = PAGE.read_text(encoding="utf-8")

    assert reference.update(text) == text, (
        f"docs/configuration.md's settings tables differ from the settings model: run `{reference.COMMAND}` "
        "(with synclib's venv)")


def test_every_setting_has_a_row_with_its_type_default_and_spark_option(capsys: pytest.CaptureFixture[str]) -> None:
    reference.main([])
    rows = capsys.readouterr().out.splitlines()

    assert "| `kafka.security.sasl_mechanism` | one of `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` | - | " \
           "`kafka.sasl.mechanism` | SASL: the mechanism; required with a SASL protocol. |" in rows
    assert [row.split(" | ")[:4] for row in rows if row.startswith(("| `source.commit_groups`", "| `sink.path`",
                                                                      "| `sink.maintenance.vacuum_retention`",
                                                                      "| `remotePollInterval`"))] == [
        ["| `source.commit_groups`", "group ids", "required", "`synchronizeCommitGroups`"],
        ["| `sink.path`", "path", "-", ""],
        ["| `sink.maintenance.vacuum_retention`", "duration", "`168h`", ""],
        ["| `remotePollInterval`", "duration > 0", "`1s`",
         "How often `remoteOffsets=group` polls the leader groups. |"],
    ]


def test_a_text_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape(f"no '<!-- generated configuration table: {reference.COMMAND}")):
        reference.update("# a page without the tables\n")
