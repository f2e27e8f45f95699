"""The local protocol: one JSON object per line, errors with stable codes, never a crash."""

from __future__ import annotations

import json

import pytest

from tests.conftest import Hive


def test_ping_answers_with_the_version_and_pid(hive: Hive) -> None:
    reply = hive.request({"id": 1, "op": "ping"})
    assert reply["id"] == 1 and reply["ok"] is True
    assert reply["result"]["pid"] == hive.pid()


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"{not json", "bad_request"),
        (b"[1, 2, 3]", "bad_request"),
        (b"\xff\xfe garbage", "bad_request"),
        (b'{"id": 7, "op": "no_such_op"}', "unknown_op"),
        (b'{"id": 8}', "unknown_op"),
        (b'{"id": 9, "op": "send", "to": 5, "body": "x"}', "bad_request"),
        (b'{"id": 10, "op": "inbox", "wait": "soon"}', "bad_request"),
    ],
)
def test_bad_requests_get_a_coded_error_and_the_connection_stays_usable(hive: Hive, line: bytes, code: str) -> None:
    with hive.connect() as conn:
        conn.send_line(line)
        reply = conn.read()
        assert reply["ok"] is False
        assert reply["error"]["code"] == code
        assert reply["error"]["message"]
        conn.send_line({"id": "after", "op": "ping"})
        assert conn.read()["ok"] is True


def test_a_line_over_one_mebibyte_is_refused_and_the_connection_closed(hive: Hive) -> None:
    with hive.connect() as conn:
        conn.sock.sendall(b'{"op": "ping", "pad": "' + b"x" * (1 << 20) + b'"}\n')
        reply = conn.read()
        assert reply["error"]["code"] == "too_large"
        with pytest.raises((EOFError, ConnectionResetError, BrokenPipeError)):
            conn.send_line({"id": 2, "op": "ping"})
            conn.read()
    assert hive.request({"id": 3, "op": "ping"})["ok"] is True


def test_a_long_poll_does_not_hold_up_later_requests_on_the_same_connection(hive: Hive) -> None:
    with hive.connect() as conn:
        conn.send_line({"id": "poll", "op": "inbox", "wait": 30})
        conn.send_line({"id": "ping", "op": "ping"})
        assert conn.read()["id"] == "ping"
        # stop_waiting ends the poll, which then answers with an empty inbox.
        assert hive.request({"id": 1, "op": "stop_waiting"})["result"]["stopped"] == 1
        reply = conn.read()
        assert reply["id"] == "poll" and reply["result"]["messages"] == []


def test_a_long_poll_returns_as_soon_as_mail_arrives(hive: Hive) -> None:
    with hive.connect() as conn:
        conn.send_line({"id": "poll", "op": "inbox", "wait": 60})
        hive.cli("send", "alice/terminal", "are you there?", check=True)
        reply = conn.read()
        assert [m["body"] for m in reply["result"]["messages"]] == ["are you there?"]


def test_replies_are_one_json_object_per_line(hive: Hive) -> None:
    with hive.connect() as conn:
        conn.send_line({"id": 1, "op": "who"})
        raw = conn.file.readline()
        assert raw.endswith(b"\n") and b"\n" not in raw[:-1]
        assert json.loads(raw)["result"]["person"] == "alice"
