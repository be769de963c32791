"""Dead letters as operators see them: the progress line, the run's headline, the Prometheus
counter by topic and the status command's line (plain data, no Spark)."""

from __future__ import annotations

from prometheus_client import generate_latest

from synclib.app.metrics import ForwarderMetrics
from synclib.app.progress import ProgressReporter, dead_letters_note
from synclib.app.status import StatusReport, format_status
from synclib.dead_letters.sink import REMEMBERED_BATCHES, _recent
from tests.unit.test_progress import progress


def test_the_progress_line_of_a_batch_with_dead_letters_counts_them() -> None:
    reporter = ProgressReporter()
    lines = reporter.update([progress(0, 1, 10), progress(1, 2, 10), progress(2, 3, 0, ran=False)], None,
                            {1: 2})
    assert "dead letters" not in lines[0] and lines[1].endswith("; 2 dead letters") and "dead" not in lines[2]
    assert reporter.dead_letters == 2
    assert dead_letters_note(2, "/t_dead_letters") == "; dead letters: 2 this run (table /t_dead_letters)"


def test_dead_letters_total_by_topic_in_the_metrics() -> None:
    metrics = ForwarderMetrics()
    assert "synclib_dead_letters_total{" not in generate_latest(metrics.registry).decode()
    metrics.observe([], None, {"events": 3, "other": 1})
    text = generate_latest(metrics.registry).decode()
    assert 'synclib_dead_letters_total{topic="events"} 3.0' in text
    assert 'synclib_dead_letters_total{topic="other"} 1.0' in text


def test_the_status_command_shows_the_dead_letter_table() -> None:
    report = StatusReport(checked_at=0.0, bootstrap_servers="b:9092", remote_offsets="commit_log",
                          commit_log_topic="log", groups=("snuba",), table=None, partitions=(),
                          dead_letters=("/t_dead_letters", {"events": 3}))
    assert "dead letters in /t_dead_letters: 3, 3 of topic events" in format_status(report)
    assert report.to_json()["dead_letters"] == {"path": "/t_dead_letters", "by_topic": {"events": 3}}


def test_per_batch_counts_stay_bounded_over_a_long_run() -> None:
    counts: dict[int, int] = {}
    for batch_id in range(0, 10 * REMEMBERED_BATCHES, 3):  # a poison row every third batch, for weeks
        counts = _recent(counts, batch_id, 1)
    newest = max(counts)
    assert newest == 10 * REMEMBERED_BATCHES - 1 and min(counts) > newest - REMEMBERED_BATCHES
    assert len(counts) <= REMEMBERED_BATCHES // 3 + 1
