import pytest

from synclib.source.planning import cap_offsets, limit_rows, plan_end_offsets, releasable_end, watermarks_to_ask


@pytest.mark.parametrize(
    ("start", "high_watermark", "remote", "end"),
    [
        (0, 10, None, 0),      # leader unknown: wait
        (0, 10, 4, 4),         # leader behind the data: release up to the leader
        (0, 10, 25, 10),       # leader ahead of what is visible: stop at the data
        (6, 10, 4, 6),         # leader moved back below us: never plan below start
        (10, 10, 10, 10),      # synchronized
    ],
)
def test_releasable_end(start, high_watermark, remote, end):
    assert releasable_end(start, high_watermark, remote) == end


def test_plan_keeps_partitions_without_a_high_watermark_where_they_are():
    start = {("t", 0): 3, ("t", 1): 5}
    assert plan_end_offsets(start, {("t", 0): 9}, {("t", 0): 7, ("t", 1): 8}) == {("t", 0): 7, ("t", 1): 5}


def test_watermarks_are_asked_only_where_a_batch_can_move():
    start = {("t", 0): 5, ("t", 1): 5, ("t", 2): 5, ("t", 3): 5, ("t", 4): 5}
    remote = {("t", 0): 9, ("t", 1): 5, ("t", 2): 3, ("t", 3): None}
    known = {("t", 0), ("t", 1), ("t", 2), ("t", 3)}
    # the leader past the follower, or no watermark known yet; not caught up, behind, unknown: not asked
    assert watermarks_to_ask(start, remote, known, every=False) == [("t", 0), ("t", 4)]
    assert watermarks_to_ask(start, remote, known, every=True) == list(start)


def test_cap_to_available_now_target():
    start = {("t", 0): 2, ("t", 1): 2, ("t", 2): 2}
    end = {("t", 0): 10, ("t", 1): 10, ("t", 2): 10}
    # ("t", 2) has no target (leader unknown at prepare time): it stays at its start
    assert cap_offsets(end, {("t", 0): 6, ("t", 1): 1}, start) == {("t", 0): 6, ("t", 1): 2, ("t", 2): 2}


def test_limit_is_split_in_proportion_to_backlog():
    start = {("t", 0): 0, ("t", 1): 0}
    assert limit_rows(start, {("t", 0): 30, ("t", 1): 10}, 8) == {("t", 0): 6, ("t", 1): 2}


def test_small_partitions_are_not_starved():
    start = {("t", 0): 0, ("t", 1): 0}
    # 10 * 1/1001 < 1 row: rounded up to one
    assert limit_rows(start, {("t", 0): 1000, ("t", 1): 1}, 10) == {("t", 0): 9, ("t", 1): 1}


def test_limit_larger_than_backlog_changes_nothing():
    start = {("t", 0): 5, ("t", 1): 7}
    end = {("t", 0): 8, ("t", 1): 7}
    assert limit_rows(start, end, 100) == end
