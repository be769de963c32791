"""The benchmark's arguments: its subcommands each with their own options, and a bad `--set`
stopping it in one line, before Spark starts."""

from __future__ import annotations

import pytest

from benchmarks.benchmark import parse_args, recorded_command
from benchmarks.trigger_phases import trigger_overrides


def test_a_bad_override_stops_the_benchmark_naming_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--set", "metrics.enabled=false"])

    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "metrics: unknown key in --set" in error and "monitoring" in error, error
    assert parse_args(["--set", "sink.maintenance.enabled=false"]).overrides == ["sink.maintenance.enabled=false"]


def test_triggers_are_leader_or_intervals_and_default_to_the_configs(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args(["--floor-triggers", "Leader, 0.4s", "--latency-triggers", "1s"])
    assert (args.floor_triggers, args.latency_triggers) == (["leader", "400ms"], ["1s"])
    assert trigger_overrides("leader") == ["trigger.mode=leader"]
    assert trigger_overrides("400ms") == ["trigger.mode=processing_time", "trigger.processing_time=400ms"]
    assert parse_args([]).floor_triggers == []  # the config's: `leader` for conf/local.yaml
    with pytest.raises(SystemExit):
        parse_args(["--floor-triggers", "asap"])
    assert "--floor-triggers take 'leader' or intervals" in capsys.readouterr().err


def test_each_subcommand_takes_its_own_options_and_run_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args([]).command == parse_args(["--runs", "1"]).command == "run"
    store = parse_args(["object-store", "--engines", "delta-rs", "--cost-batches", "5", "--partitions", "2"])
    assert (store.command, store.engines, store.cost_batches, store.partitions) == ("object-store", ["delta-rs"], 5, 2)
    with pytest.raises(SystemExit):
        parse_args(["object-store", "--runs", "3"])
    assert "unrecognized arguments: --runs 3" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["run", "--cost-batches", "5"])
    growth = parse_args(["growth", "--versions", "900", "--store", "s3"])
    assert (growth.command, growth.growth_args) == ("growth", ["--versions", "900", "--store", "s3"])


def test_a_recorded_command_names_its_subcommand() -> None:
    assert recorded_command(["--runs", "1", "--output", "x.json"]) == "./spark-submit.sh jobs/benchmark.py run --runs 1"
    assert recorded_command(["object-store", "--record", "object-store", "--floor-steps", "0"]) == (
        "./spark-submit.sh jobs/benchmark.py object-store --floor-steps 0")
