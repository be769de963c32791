import logging

import pytest

from synclib.source.state import (
    LOCAL_BEHIND,
    REMOTE_BEHIND,
    SYNCHRONIZED,
    UNKNOWN,
    InvalidStateTransition,
    Offsets,
    SynchronizedPartitionStateManager,
    get_state_from_offsets,
)


@pytest.mark.parametrize(
    ("offsets", "state"),
    [
        (Offsets(None, None), UNKNOWN),
        (Offsets(5, None), UNKNOWN),
        (Offsets(None, 5), UNKNOWN),
        (Offsets(3, 5), LOCAL_BEHIND),
        (Offsets(5, 3), REMOTE_BEHIND),
        (Offsets(5, 5), SYNCHRONIZED),
        (Offsets(0, 0), SYNCHRONIZED),
    ],
)
def test_get_state_from_offsets(offsets, state):
    assert get_state_from_offsets(offsets) is state


def recording_manager():
    calls = []
    manager = SynchronizedPartitionStateManager(lambda *args: calls.append(args))
    return manager, calls


def states(manager):
    return {tp: get_state_from_offsets(offsets) for tp, offsets in manager.snapshot().items()}


def test_local_alone_stays_unknown_without_callback():
    manager, calls = recording_manager()
    manager.set_local_offset("t", 0, 5)
    assert states(manager) == {("t", 0): UNKNOWN}
    assert manager.snapshot() == {("t", 0): Offsets(5, None)}
    assert calls == []


def test_callback_sequence_through_every_state():
    manager, calls = recording_manager()
    manager.set_local_offset("t", 0, 5)
    manager.set_remote_offset("t", 0, 5)   # UNKNOWN -> SYNCHRONIZED
    manager.set_remote_offset("t", 0, 9)   # -> LOCAL_BEHIND
    manager.set_local_offset("t", 0, 7)    # still LOCAL_BEHIND: no callback
    manager.set_local_offset("t", 0, 12)   # -> REMOTE_BEHIND
    manager.set_remote_offset("t", 0, 10)  # still REMOTE_BEHIND: no callback
    manager.set_remote_offset("t", 0, 12)  # -> SYNCHRONIZED
    assert calls == [
        ("t", 0, (UNKNOWN, Offsets(5, None)), (SYNCHRONIZED, Offsets(5, 5))),
        ("t", 0, (SYNCHRONIZED, Offsets(5, 5)), (LOCAL_BEHIND, Offsets(5, 9))),
        ("t", 0, (LOCAL_BEHIND, Offsets(7, 9)), (REMOTE_BEHIND, Offsets(12, 9))),
        ("t", 0, (REMOTE_BEHIND, Offsets(12, 10)), (SYNCHRONIZED, Offsets(12, 12))),
    ]


def test_remote_ahead_is_local_behind_and_local_ahead_is_remote_behind():
    manager, calls = recording_manager()
    manager.set_remote_offset("t", 1, 10)
    manager.set_local_offset("t", 1, 4)
    manager.set_remote_offset("t", 2, 3)
    manager.set_local_offset("t", 2, 4)
    assert states(manager) == {("t", 1): LOCAL_BEHIND, ("t", 2): REMOTE_BEHIND}
    assert [(c[0], c[1], c[3][0]) for c in calls] == [("t", 1, LOCAL_BEHIND), ("t", 2, REMOTE_BEHIND)]


def test_partitions_are_independent():
    manager, _ = recording_manager()
    manager.set_local_offset("a", 0, 1)
    manager.set_remote_offset("a", 0, 1)
    manager.set_local_offset("b", 0, 1)
    assert states(manager) == {("a", 0): SYNCHRONIZED, ("b", 0): UNKNOWN}
    assert manager.snapshot() == {("a", 0): Offsets(1, 1), ("b", 0): Offsets(1, None)}


@pytest.mark.parametrize("setter", ["set_local_offset", "set_remote_offset"])
def test_back_to_none_raises(setter):
    manager, _calls = recording_manager()
    getattr(manager, setter)("t", 0, 3)
    with pytest.raises(InvalidStateTransition, match=r"t\[0\].*3.*None"):
        getattr(manager, setter)("t", 0, None)
    assert manager.snapshot()[("t", 0)] != Offsets(None, None)


def test_none_to_none_is_a_no_op():
    manager, calls = recording_manager()
    manager.set_remote_offset("t", 0, None)
    assert manager.snapshot() == {}
    assert calls == []


def test_backwards_move_is_logged(caplog):
    manager, _ = recording_manager()
    manager.set_remote_offset("t", 0, 10)
    with caplog.at_level(logging.INFO, logger="synclib.source.state"):
        manager.set_remote_offset("t", 0, 4)
    assert "remote offset moved backwards from 10 to 4" in caplog.text
    assert manager.snapshot()[("t", 0)] == Offsets(None, 4)
