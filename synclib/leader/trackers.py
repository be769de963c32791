"""The tracker of the leader's offsets that a source's options ask for (`remoteOffsets`)."""

from __future__ import annotations

from synclib.leader.follower import CommitLogFollower
from synclib.leader.group_poller import GroupOffsetsPoller
from synclib.leader.tracker import RemoteOffsetsTracker
from synclib.settings.source import SourceOptions


def remote_offsets_tracker(options: SourceOptions, *, deadlines: bool = True) -> RemoteOffsetsTracker:
    """The commit-log follower, or with `remote_offsets: group` the group poller (not started);
    `deadlines`: whether `check()` fails once it makes no progress for `commitLogTimeout`."""
    unreachable_timeout_s = options.commit_log_timeout if deadlines else None
    if options.remote_offsets == "group":
        return GroupOffsetsPoller(options.commit_groups, options.client_config,
                                  poll_interval_s=options.remote_poll_interval,
                                  unreachable_timeout_s=unreachable_timeout_s)
    return CommitLogFollower(options.commit_log_topic or "", options.commit_groups, options.client_config,
                             unreachable_timeout_s=unreachable_timeout_s)
