import json
from datetime import datetime, timezone

import pytest

from synclib.leader.commitlog import Commit, CommitLogDecodeError, decode_commit, encode_commit


def test_round_trip_current_format():
    commit = Commit("snuba-consumers", "events", 3, 1234, orig_message_ts=1700000000.25, received_p99=0.5)
    key, value = encode_commit(commit)
    assert key == b"events:3:snuba-consumers"
    assert json.loads(value) == {"offset": 1234, "orig_message_ts": 1700000000.25, "received_p99": 0.5}
    assert decode_commit(key, value) == commit


def test_group_may_contain_colons():
    commit = Commit("team:snuba:v2", "events", 0, 7)
    assert decode_commit(*encode_commit(commit)) == commit


def test_received_p99_may_be_null():
    decoded = decode_commit(b"events:0:g", b'{"offset": 5, "orig_message_ts": 1.5, "received_p99": null}')
    assert decoded == Commit("g", "events", 0, 5, 1.5, None)


def test_legacy_value_without_header():
    assert decode_commit(b"events:1:g", b"5") == Commit("g", "events", 1, 5)


def test_legacy_value_with_timestamp_header():
    header = ("orig_message_ts", b"2024-05-06T07:08:09.500000Z")
    decoded = decode_commit(b"events:1:g", b"5", [header])
    expected_ts = datetime(2024, 5, 6, 7, 8, 9, 500000, tzinfo=timezone.utc).timestamp()
    assert decoded == Commit("g", "events", 1, 5, orig_message_ts=expected_ts)


@pytest.mark.parametrize(
    ("key", "value", "headers", "message"),
    [
        (b"\xff\xfe:0:g", b"5", (), "not UTF-8"),
        (b"events:0", b"5", (), "not 'topic:partition:group'"),
        (b"events::g", b"5", (), "not 'topic:partition:group'"),
        (b"events:zero:g", b"5", (), "partition 'zero'"),
        (b"events:-1:g", b"5", (), "partition -1 is negative"),
        (None, b"5", (), "missing key"),
        (b"events:0:g", b"-3", (), "offset -3 is negative"),
        (b"events:0:g", b'{"offset": -3}', (), "offset -3 is negative"),
        (b"events:0:g", b'{"offset": 3', (), "not valid JSON"),
        (b"events:0:g", b'{"orig_message_ts": 1.0}', (), "no 'offset'"),
        (b"events:0:g", b'{"offset": "12"}', (), "not an integer"),
        (b"events:0:g", b'{"offset": 1.5}', (), "not an integer"),
        (b"events:0:g", b'{"offset": true}', (), "not an integer"),
        (b"events:0:g", b"", (), "empty value"),
        (b"events:0:g", None, (), "empty value"),
        (b"events:0:g", b"12abc", (), "not a non-negative integer"),
        (b"events:0:g", b"\xff", (), "not ASCII"),
        (b"events:0:g", b'{"offset": 1, "orig_message_ts": "yesterday"}', (), "not a number"),
        (b"events:0:g", b"5", [("orig_message_ts", b"06/05/2024")], "orig_message_ts"),
    ],
)
def test_malformed_messages_raise_typed_error(key, value, headers, message):
    with pytest.raises(CommitLogDecodeError, match=message.replace("[", r"\[")):
        decode_commit(key, value, headers)
