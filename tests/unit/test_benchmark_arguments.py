"""The benchmark's arguments: a bad `--set` stops it in one line, before Spark starts."""

from __future__ import annotations

import pytest

from benchmarks.benchmark import parse_args, trigger_overrides


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
