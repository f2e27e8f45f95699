"""The local protocol: one JSON object per line, errors with stable codes, never a crash."""

from __future__ import annotations

import inspect
import json
import os
import re
import resource
import socket
import stat
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hive.sidecar.base.config import load_settings
from hive.sidecar.base.paths import StatePaths, ensure_home
from hive.sidecar.daemon.features import FEATURES, op_table
from hive.sidecar.daemon.server import Sidecar
from hive.sidecar.sessions import folders
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


# ---- the op table: each name once, each op documented ---------------------------------------

# Every registration, read the way op_table reads them but without its duplicate check, so a name
# registered twice fails the test below rather than the collection of this whole file.
REGISTERED = [(op, func) for feature in FEATURES for op, func in feature.ops.items()]


def _sidecar(tmp_path: Path) -> Sidecar:
    ensure_home(tmp_path / "h")
    paths = StatePaths(tmp_path / "h")
    return Sidecar(paths, load_settings(paths.config))


@pytest.mark.parametrize(("op", "handler"), REGISTERED, ids=[op for op, _ in REGISTERED])
def test_every_op_the_sidecar_serves_says_in_a_sentence_what_it_does_and_what_it_returns(op: str, handler: Any) -> None:
    doc = inspect.getdoc(handler) or ""
    assert doc, f"op {op!r} has no docstring: say what it does, the fields it reads and what it returns"
    summary = doc.split("\n\n", 1)[0]
    assert re.match(r"[A-Z`]", summary) and summary.endswith(".") and len(summary.split()) >= 4, (
        f"op {op!r}'s docstring does not open with a sentence saying what it does: {summary!r}"
    )
    assert "return" in doc.lower(), f"op {op!r}'s docstring does not say what it returns"


def test_no_op_name_is_registered_by_two_sources_and_the_sidecar_serves_each_one(tmp_path: Path) -> None:
    names = [op for op, _ in REGISTERED]
    twice = sorted(op for op, count in Counter(names).items() if count > 1)
    assert not twice, f"registered by more than one source: {twice}"
    assert set(_sidecar(tmp_path).handlers) == set(op_table()) == set(names)


def test_an_op_name_registered_twice_stops_the_sidecar_naming_both_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(folders.OPS, "ping", folders.op_folder)
    with pytest.raises(RuntimeError, match="'ping'") as raised:
        _sidecar(tmp_path)
    assert "feature 'daemon'" in str(raised.value) and "feature 'folders'" in str(raised.value)


# ---- hostile lines: nothing a client writes stops the sidecar ------------------------------

MESH = '[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n'


def _alive(hive: Hive, pid: int) -> None:
    assert hive.pid() == pid
    os.kill(pid, 0)  # the same process: `hive status` would have started a new one
    reply = hive.request({"id": "alive", "op": "ping"})
    assert reply["ok"] and reply["result"]["pid"] == pid


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": 11, "op": "ping", "pad": "\xc3\x28"}',  # not UTF-8
        b'{"id": 12, "op": "ping", "pad": "\xed\xa0\x80"}',  # a surrogate encoded as UTF-8
        b'{"id": 13, "op": "ping", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"id": 14, "op": "ping", "x": ' + b"[" * 40 + b"]" * 40 + b"}",
        b'{"id": 15, "op": "ping", "x": ' + b"9" * 5000 + b"}",  # over the interpreter's digit limit
    ],
    ids=["not-utf8", "utf8-surrogate", "nested-5000", "nested-40", "huge-integer"],
)
def test_lines_that_are_not_bounded_utf8_json_get_bad_request_and_the_sidecar_keeps_serving(
    make_hive: Any, line: bytes
) -> None:
    hive = make_hive(MESH)
    pid = hive.start()
    with hive.connect() as conn:
        conn.send_line(line)
        reply = conn.read()
        assert reply["ok"] is False and reply["error"]["code"] == "bad_request"
    _alive(hive, pid)


SURROGATE_REQUESTS = {
    "request id": '{"id": "\\ud800", "op": "ping"}',
    "send to": '{"id": 1, "op": "send", "to": "alice/\\udc00web", "body": "hi"}',
    "send body": '{"id": 1, "op": "send", "to": "alice/terminal", "body": "hi \\ud83d"}',
    "folder path": '{"id": 1, "op": "folder", "path": "/src/\\ud800", "state": "off"}',
    "set_status doing": '{"id": 1, "op": "set_status", "session": "s1", "doing": "fixing \\udfff"}',
    "set_status name": '{"id": 1, "op": "set_status", "session": "s1", "name": "n\\ud800"}',
    "register key": '{"id": 1, "op": "register", "session": {"key": "k\\ud800", "agent": "codex", "cwd": "/src"}}',
    "an object key": '{"id": 1, "op": "who", "\\ud800": 1}',
}


def test_a_lone_surrogate_in_any_field_is_refused_with_bad_request_and_never_stored(make_hive: Any) -> None:
    hive = make_hive(MESH)
    pid = hive.start()
    register = {"id": 0, "op": "register", "session": {"key": "s1", "agent": "codex", "cwd": "/src/web"}}
    assert hive.request(register)["ok"]
    assert hive.request({"id": 0, "op": "set_status", "session": "s1", "doing": "reviewing"})["ok"]
    for field, line in SURROGATE_REQUESTS.items():
        with hive.connect() as conn:
            conn.send_line(line.encode())
            reply = conn.read()
        assert reply["ok"] is False and reply["error"]["code"] == "bad_request", field
        assert reply["id"] in (None, 1), field  # never the surrogate echoed back
        _alive(hive, pid)
    sessions = hive.request({"id": 2, "op": "who", "all": True})["result"]["sessions"]
    assert [(s["name"], s["doing"]) for s in sessions] == [("web-codex", "reviewing")]
    assert hive.request({"id": 3, "op": "folder"})["result"]["off"] == []
    assert hive.request({"id": 4, "op": "inbox", "peek": True})["result"]["messages"] == []


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def test_a_client_that_never_reads_its_replies_is_closed_and_the_sidecars_memory_stays_bounded(make_hive: Any) -> None:
    hive = make_hive(MESH)
    pid = hive.start()
    before = _rss_kib(pid)
    limit = before + 100 * 1024  # the unbounded sidecar grew by ~7.5 KiB a request, to 3 GB
    burst = b'{"id": 1, "op": "ping"}\n' * 2000
    peak = before
    with hive.connect(timeout=60) as conn, pytest.raises((BrokenPipeError, ConnectionResetError)):
        for _ in range(200):  # 400,000 requests, never a reply read
            conn.sock.sendall(burst)
            peak = max(peak, _rss_kib(pid))
            assert peak < limit, f"the sidecar grew from {before} KiB to {peak} KiB"
    assert _rss_kib(pid) < limit
    _alive(hive, pid)


def test_1100_idle_connections_under_a_1024_descriptor_limit_cost_the_oldest_their_connection_not_the_sidecar(
    make_hive: Any,
) -> None:
    hive = make_hive(MESH)
    pid = hive.start()
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (1024, resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1300:  # this test process holds the 1,100 client ends
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    idle: list[socket.socket] = []
    try:
        for _ in range(1100):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(30)
            sock.connect(str(hive.paths.socket))
            idle.append(sock)
        _alive(hive, pid)
        assert idle[0].recv(1) == b""  # the oldest idle client was closed to make room
        idle[-1].sendall(b'{"id": "last", "op": "ping"}\n')
        assert json.loads(idle[-1].makefile("rb").readline())["id"] == "last"  # the newest still served
    finally:
        for sock in idle:
            sock.close()
    _alive(hive, pid)


def test_after_a_log_rotation_the_log_and_its_rotated_copies_are_the_users_alone(make_hive: Any) -> None:
    hive = make_hive(MESH)
    log_file = hive.home / "sidecar.log"
    log_file.write_text("x" * (1 << 20) + "\n")  # full: the sidecar's first line rotates it
    (hive.home / "sidecar.log.1").write_text("from an older hive\n")
    (hive.home / "sidecar.log.1").chmod(0o644)
    old_umask = os.umask(0o022)  # the common default, under which a new file is 0644
    try:
        pid = hive.start()
    finally:
        os.umask(old_umask)
    _alive(hive, pid)
    rotated = sorted(hive.home.glob("sidecar.log*"))
    assert hive.home / "sidecar.log.2" in rotated and "listening on" in log_file.read_text()
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in rotated} == {p.name: 0o600 for p in rotated}


def test_out_of_descriptors_the_sidecar_drops_idle_clients_and_keeps_accepting(make_hive: Any) -> None:
    hive = make_hive(MESH)
    pid = hive.start()
    in_use = len(os.listdir(f"/proc/{pid}/fd"))
    hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 8, hard))  # accept() meets EMFILE at the 9th client
    idle: list[socket.socket] = []
    try:
        for _ in range(60):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(60)
            sock.connect(str(hive.paths.socket))
            idle.append(sock)
        with hive.connect(timeout=60) as conn:
            conn.send_line({"id": "through", "op": "ping"})
            assert conn.read()["result"]["pid"] == pid
    finally:
        for sock in idle:
            sock.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (1024, hard))
    _alive(hive, pid)
    assert "accepting a client failed" in hive.paths.log.read_text()
