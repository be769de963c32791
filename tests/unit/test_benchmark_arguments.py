"""The benchmark's arguments: a bad `--set` stops it in one line, before Spark starts."""

from __future__ import annotations

import pytest

from benchmarks.benchmark import parse_args


def test_a_bad_override_stops_the_benchmark_naming_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--set", "metrics.enabled=false"])

    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "metrics: unknown key in --set" in error and "monitoring" in error, error
    assert parse_args(["--set", "sink.maintenance.enabled=false"]).overrides == ["sink.maintenance.enabled=false"]
