"""The exit-code table of docs/running.md is rendered from synclib/exit_codes.py."""

from pathlib import Path

from synclib import exit_codes
from synclib.exit_codes import ExitCode

PAGE = Path(__file__).resolve().parents[2] / "docs" / "running.md"


def test_the_documented_table_is_the_modules() -> None:
    text = PAGE.read_text(encoding="utf-8")

    assert exit_codes.doc_tables.update(text, exit_codes.TABLES, exit_codes.COMMAND) == text, (
        f"docs/running.md's exit-code table differs from synclib/exit_codes.py: run `{exit_codes.COMMAND}` "
        "(with synclib's venv)")


def test_every_exit_code_has_a_meaning() -> None:
    assert set(exit_codes.MEANINGS) == set(ExitCode)
