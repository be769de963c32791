"""The commit-log follower against a real Kafka-protocol broker."""

import time

import pytest

from synclib.leader.follower import CommitLogFollower
from synclib.leader.tracker import RemoteOffsetsError
from tests.support import publish_commit, publish_raw, wait_until


def follower_failure(follower: CommitLogFollower):
    """The error `check()` raises, or None while the follower is healthy."""
    try:
        follower.check()
    except RemoteOffsetsError as error:
        return error
    return None


def remote(follower: CommitLogFollower, partition: int = 0):
    """The follower's remote offset of partition `partition` of topic "events"."""
    return follower.remote_offsets([("events", partition)])[("events", partition)]


@pytest.fixture
def follow(bootstrap_servers):
    followers = []

    def start(topic, groups, **kwargs):
        follower = CommitLogFollower(
            topic, groups, {"bootstrap_servers": bootstrap_servers}, partition_refresh_s=0.2, **kwargs
        ).start()
        followers.append(follower)
        return follower

    yield start
    for follower in followers:
        follower.stop()


def test_min_over_two_groups_unknown_until_both_report(new_topic, producer, follow):
    log = new_topic("commit-log")
    follower = follow(log, ["snuba", "search"])
    assert follower.wait_until_caught_up(30)
    publish_commit(producer, log, "snuba", "events", 0, 10)
    wait_until(lambda: follower.stats().applied == 1, what="first commit applied")
    assert remote(follower) is None
    publish_commit(producer, log, "search", "events", 0, 7)
    assert wait_until(lambda: remote(follower), what="both groups") == 7
    publish_commit(producer, log, "search", "events", 0, 15)
    assert wait_until(lambda: remote(follower) == 10, what="min moves to snuba")
    assert follower.remote_offsets([("events", 0), ("events", 1)]) == {("events", 0): 10, ("events", 1): None}


def test_reads_existing_history_from_earliest(new_topic, producer, follow):
    log = new_topic("commit-log")
    for offset in (3, 8, 12):
        publish_commit(producer, log, "g", "events", 2, offset)
    follower = follow(log, ["g"])
    assert follower.wait_until_caught_up(30)
    assert remote(follower, 2) == 12
    assert follower.stats().applied == 3


def test_last_write_wins_when_a_group_goes_backwards(new_topic, producer, follow):
    log = new_topic("commit-log")
    follower = follow(log, ["g"])
    publish_commit(producer, log, "g", "events", 0, 50)
    wait_until(lambda: remote(follower) == 50, what="offset 50")
    publish_commit(producer, log, "g", "events", 0, 20)
    wait_until(lambda: remote(follower) == 20, what="reset to 20")


def test_unfollowed_groups_are_ignored(new_topic, producer, follow):
    log = new_topic("commit-log")
    follower = follow(log, ["g"])
    publish_commit(producer, log, "other", "events", 0, 99)
    publish_commit(producer, log, "g", "events", 0, 4)
    wait_until(lambda: remote(follower) == 4, what="g's commit")
    assert follower.stats().skipped_unfollowed_group == 1


def test_malformed_messages_are_skipped_and_counted(new_topic, producer, follow):
    log = new_topic("commit-log")
    follower = follow(log, ["g"])
    publish_commit(producer, log, "g", "events", 0, 5)
    publish_raw(producer, log, b"events:0:g", b"{not json")
    publish_raw(producer, log, b"no-colons", b"9")
    publish_raw(producer, log, b"events:0:g", b'{"offset": -1}')
    publish_raw(producer, log, b"events:0:g", b"")
    publish_commit(producer, log, "g", "events", 0, 11)
    wait_until(lambda: remote(follower) == 11, what="good commit after malformed ones")
    stats = follower.stats()
    assert stats.skipped_malformed == 4
    assert stats.applied == 2
    assert set(stats.last_commit_time) == {"g"}


def test_topic_created_after_start_is_followed(admin, producer, follow):
    import uuid

    log = f"late-commit-log-{uuid.uuid4().hex[:8]}"
    follower = follow(log, ["g"])
    assert follower.wait_until_caught_up(30)
    admin.create(log, 1)
    publish_commit(producer, log, "g", "events", 0, 3)
    wait_until(lambda: remote(follower) == 3, what="commit on a topic created late")


def test_thread_failure_surfaces_with_its_cause(new_topic, producer, follow):
    log = new_topic("commit-log")

    def failing_listener(commit):
        raise RuntimeError(f"listener exploded on offset {commit.offset}")

    follower = follow(log, ["g"], listener=failing_listener)
    publish_commit(producer, log, "g", "events", 0, 42)


    error = wait_until(lambda: follower_failure(follower), what="follower death to surface")
    assert "listener exploded on offset 42" in str(error)
    assert isinstance(error.__cause__, RuntimeError)
    with pytest.raises(RemoteOffsetsError, match="listener exploded"):
        remote(follower)


def test_deleted_commit_log_topic_kills_the_follower_with_a_clear_error(new_topic, admin, producer, follow):
    log = new_topic("commit-log")
    follower = follow(log, ["g"])
    publish_commit(producer, log, "g", "events", 0, 1)
    wait_until(lambda: remote(follower) == 1, what="first commit")
    admin.delete([log])


    error = wait_until(lambda: follower_failure(follower), what="follower death after the topic is deleted")
    assert f"commit-log topic {log!r} was deleted" in str(error)


def test_unreachable_broker_kills_the_follower_after_its_deadline(tmp_path):
    from synclib.embedded.broker import EmbeddedBroker, TopicAdmin

    with EmbeddedBroker() as broker:
        TopicAdmin(broker.bootstrap_servers).create("commit-log", 1)
        follower = CommitLogFollower(
            "commit-log", ["g"], {"bootstrap_servers": [broker.bootstrap_servers]},
            unreachable_timeout_s=2.0, partition_refresh_s=0.2,
        ).start()
        try:
            assert follower.wait_until_caught_up(30)
            broker.stop()


            error = wait_until(lambda: follower_failure(follower), timeout_s=60,
                               what="follower death after the broker went away")
            assert "no progress for" in str(error) and "last error" in str(error)
        finally:
            follower.stop()


def test_a_commit_that_moves_the_minimum_is_announced_once_with_its_record_time(new_topic, producer, follow):
    """What the source's leader-driven trigger and its gate latency rest on: a waiter wakes when a
    commit releases offsets (the minimum over the groups moves forward), and the release carries the
    commit-log record's timestamp; a commit that leaves the minimum where it is releases nothing."""
    topic = new_topic("commit-log")
    follower = follow(topic, ["snuba", "search"])
    follower.wait_until_caught_up(30)
    seen = follower.release_generation()
    publish_commit(producer, topic, "snuba", "events", 0, 8)
    wait_until(lambda: follower.stats().applied == 1, what="snuba's commit applied")
    assert follower.wait_for_release(seen, 0.0) == seen  # search has not reported: nothing released
    before = time.time()
    publish_commit(producer, topic, "search", "events", 0, 5)
    released = follower.wait_for_release(seen, 30.0)

    assert released > seen
    [release] = follower.take_releases({("events", 0): 0}, {("events", 0): 9})
    assert release.offset == 5 and before - 1 <= release.committed_at <= time.time()
    assert follower.take_releases({("events", 0): 0}, {("events", 0): 9}) == []  # taken once
    publish_commit(producer, topic, "search", "events", 0, 12)  # the minimum moves to snuba's 8
    follower.wait_for_release(released, 30.0)
    assert [r.offset for r in follower.take_releases({("events", 0): 5}, {("events", 0): 7})] == []
    assert [r.offset for r in follower.take_releases({("events", 0): 5}, {("events", 0): 8})] == [8]
