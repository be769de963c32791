"""The `synclib` command line's shared setup (synclib/cli.py): every subcommand parses `--config`
and `--set` the same way and reports an invalid configuration as one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from synclib import cli
from synclib.exit_codes import ExitCode


@pytest.mark.parametrize("argv", [
    ["run", "--config", "c.yaml", "--available-now"],
    ["status", "--config", "c.yaml", "--json"],
    ["maintain", "--config", "c.yaml", "--set", "sink.maintenance.enabled=false"],
    ["dead-letters", "--config", "c.yaml", "list", "--where", "batch_id > 1"],
    ["dead-letters", "replay", "--config", "c.yaml", "--dry-run"],
])
def test_every_subcommand_takes_the_shared_options(argv: list[str]) -> None:
    args = cli.parser().parse_args(argv)

    assert args.config == "c.yaml" and args.command is cli.COMMANDS[argv[0]]


def test_run_alone_has_a_default_config() -> None:
    assert cli.parser("conf/local.yaml").parse_args(["run"]).config == "conf/local.yaml"
    with pytest.raises(SystemExit) as exited:
        cli.parser("conf/local.yaml").parse_args(["status"])
    assert exited.value.code == ExitCode.CONFIG


def test_an_invalid_configuration_is_one_line_naming_the_command(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("no_such_section: {}\n")

    with pytest.raises(SystemExit) as exited:
        cli.main(["maintain", "--config", str(config)])

    err = capsys.readouterr().err
    assert exited.value.code == ExitCode.CONFIG
    assert err.startswith(f"maintain: invalid configuration: {config}") and err.count("\n") == 1, err


def test_run_options_stand_for_settings() -> None:
    args = cli.parser().parse_args(["run", "--config", "c.yaml", "--available-now", "--healthcheck-file", "/h"])

    assert cli.COMMANDS["run"].overrides(args) == ["trigger.mode=available_now", 'monitoring.healthcheck_file="/h"']
