"""Attacks on a running sidecar over the mesh: a stranger on ``hive-join/1``, a member on ``hive/1``.

The attacker is a QUIC client (aioquic, through hive's own dial) holding either a fresh key or a
member's key; it writes frames by hand. Every attack must end at most that one link: the
sidecar's pid stays the same and it keeps answering its socket and its other links.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import anyio
import pytest

from hive.sidecar.base.ulid import new_ulid
from hive.sidecar.mesh.transport import ALPN_JOIN, Link, LinkClosed, dial, machine_cert

from ..conftest import Hive
from .test_mesh import MESH, _address, _key_of, _msg, _team_id, form_team, inbox, linked, ok, register, wait_for

DEPTHS = (1_000, 2_000, 5_000)


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")  # several machines on one host, one key file each


def _nested(depth: int) -> bytes:
    body = b'{"t":"join","x":' + b"[" * depth + b"]" * depth + b"}"
    return struct.pack(">I", len(body)) + body


def _raw(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


async def _closed_within(link: Link, seconds: float = 20) -> bool:
    with anyio.fail_after(seconds):
        try:
            while True:
                await link.receive()
        except LinkClosed:
            return True


def _still_serving(hive: Hive, pid: int) -> None:
    assert hive.pid() == pid
    os.kill(pid, 0)  # the same process, not a new one that `hive status` would have started
    reply = hive.request({"id": "after", "op": "ping"})
    assert reply["ok"] and reply["result"]["pid"] == pid


def test_json_nested_thousands_deep_from_a_stranger_on_the_join_protocol_closes_only_that_link(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    pid = alice.pid()

    async def attack(depth: int) -> bool:
        stranger = machine_cert(os.urandom(32))
        async with dial(_address(alice), stranger, lambda key, alpn: True, alpn=ALPN_JOIN) as link:
            link._writer.write(_nested(depth))
            return await _closed_within(link)

    for depth in DEPTHS:
        assert anyio.run(attack, depth)
        _still_serving(alice, pid)
    assert linked(alice) == 1 and linked(bob) == 1  # the members' link never noticed


def test_json_nested_thousands_deep_from_a_member_closes_only_its_link_and_it_can_link_again(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(alice, "a1", "/src/web")
    bob.stop()  # the test speaks for bob's machine with bob's key
    pid = alice.pid()

    async def attack(depth: int) -> bool:
        async with dial(_address(alice), machine_cert(_key_of(bob)), lambda key, alpn: True) as link:
            await link.send({"t": "hello", "team": _team_id(alice), "proto": 1, "features": []})
            with anyio.fail_after(20):
                while (await link.receive())["t"] != "hello":
                    pass
            link._writer.write(_nested(depth))
            return await _closed_within(link)

    for depth in DEPTHS:
        assert anyio.run(attack, depth)
        _still_serving(alice, pid)
    got = anyio.run(_member_link, alice, bob, [_msg(new_ulid(), "bob/api-codex", "alice/web-codex", "still here")], 1)
    assert [f["state"] for f in got if f["t"] == "ack"] == ["queued"]


async def _member_link(
    target: Hive, member: Hive, frames: list[dict[str, Any] | bytes], acks: int
) -> list[dict[str, Any]]:
    """Speak for ``member``'s machine: hello, then ``frames``; collect until ``acks`` acks came."""
    got: list[dict[str, Any]] = []
    async with dial(_address(target), machine_cert(_key_of(member)), lambda key, alpn: True) as link:
        await link.send({"t": "hello", "team": _team_id(target), "proto": 1, "features": []})
        with anyio.fail_after(30):
            while (await link.receive())["t"] != "hello":
                pass
            for item in frames:
                if isinstance(item, bytes):
                    link._writer.write(item)
                else:
                    await link.send(item)
            while sum(1 for f in got if f["t"] == "ack") < acks:
                got.append(await link.receive())
    return got


def test_a_members_message_with_a_lone_surrogate_is_refused_with_an_ack_and_the_link_stays(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(alice, "a1", "/src/web")
    bob.stop()
    pid = alice.pid()
    broken, fine = new_ulid(), new_ulid()
    # json.dumps escapes the surrogate as \ud800: valid JSON, not valid Unicode text.
    bad_body = _raw(json.dumps(_msg(broken, "bob/api-codex", "alice/web-codex", "hi \ud800 there")).encode())
    got = anyio.run(_member_link, alice, bob, [bad_body, _msg(fine, "bob/api-codex", "alice/web-codex", "fine")], 2)
    acks = {f["id"]: f for f in got if f["t"] == "ack"}
    assert acks[broken]["state"] == "refused"  # answered: the sender stops replaying it
    assert "Unicode" in acks[broken]["note"]
    assert acks[fine]["state"] == "queued"  # same link, next frame
    assert [m["body"] for m in inbox(alice, "web-codex")] == ["fine"]
    _still_serving(alice, pid)


WRONG = (5, "x", [1, [2]], {"a": {"b": 1}}, True, 1.5, [])


def _malformed_frames() -> list[dict[str, Any]]:
    """Every frame kind hive reads, each field in turn replaced by values of every wrong type."""
    shapes: dict[str, list[str]] = {
        "msg": ["msg"],
        "ack": ["id", "state", "note", "receipts", "retry_after"],
        "receipt": ["receipts"],
        "presence": ["presence"],
        "state": ["state"],
        "sync": ["heads", "want", "reply"],
        "entry": ["entries"],
        "body": ["blobs"],
        "gate": ["id", "item"],
        "gate_ack": ["id"],
        "notify": ["id", "from", "to", "body", "sent_at"],
        "hello": ["features", "team"],
    }
    frames: list[dict[str, Any]] = []
    for kind, fields in shapes.items():
        for name in fields:
            frames.extend({"t": kind, name: value} for value in WRONG)
    # Right types at the top, wrong ones inside.
    frames += [
        {"t": "sync", "heads": ["x", 5, [1, 2, 3], [[], {}, None]], "want": [5, [], {}]},
        {"t": "entry", "entries": ["x", 5, [], {"by": 5, "body": "x"}]},
        {"t": "body", "blobs": ["x", 5, [], {"lesson": []}]},
        {"t": "receipt", "receipts": ["x", 5, {"id": [], "state": {}}]},
        {"t": "ack", "receipts": [5, [[], {}], ["a", 5]]},
        {"t": "msg", "msg": {"id": new_ulid(), "from": [], "to": {}, "body": 5, "files": "x"}},
        {"t": "presence", "presence": {"sessions": "x", "addresses": 5, "peers": [], "features": {}}},
        {
            "t": "presence",
            "presence": {
                "sessions": [{"name": [], "tier": [], "doing": 5, "agent": {}, "activity": [1], "branch": True}],
                "known": 5,
                "peers": {"ab": 5, "0" * 64: "x"},
            },
        },
        {"t": "state", "state": {"id": 5, "entries": "x"}},
        {"t": "gate", "id": new_ulid(), "item": {"kind": [], "ref": {}, "state": 5}},
        {"t": "notify", "id": new_ulid(), "from": "bob/x", "to": "alice/web-codex", "body": "x", "sent_at": 1e308},
    ]
    return frames


def test_frames_with_fields_of_the_wrong_type_are_skipped_and_the_link_keeps_working(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(alice, "a1", "/src/web")
    bob.stop()
    pid = alice.pid()
    frames: list[dict[str, Any] | bytes] = [*_malformed_frames()]
    after = new_ulid()
    frames.append(_msg(after, "bob/api-codex", "alice/web-codex", "after the junk"))
    got = anyio.run(_member_link, alice, bob, frames, 2)  # the malformed msg is answered too
    acks = {f["id"]: f["state"] for f in got if f["t"] == "ack" and "id" in f}
    assert acks[after] == "queued"
    assert list(acks.values()).count("refused") == 1
    _still_serving(alice, pid)
    log = Path(alice.paths.log).read_text()
    assert "could not handle" not in log and "Traceback" not in log


def _udp_ports(pid: int) -> list[tuple[str, int]]:
    """The UDP sockets the process ``pid`` holds, as (local address in hex, port)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                address, port = fields[1].split(":")
                found.append((address, int(port, 16)))
    return found


def test_the_mesh_does_not_listen_before_this_machine_is_in_a_team(make_hive: Any) -> None:
    alice = make_hive(MESH)
    pid = alice.start()
    assert ok(alice, "mesh")["listening"] is None
    assert _udp_ports(pid) == []
    alice.cli("init", "acme", "--as", "alice", check=True)
    port = ok(alice, "mesh")["listening"]
    assert ("0100007F", port) in _udp_ports(pid)  # 127.0.0.1, as the test config says
    alice.cli("leave", check=True)
    wait_for(lambda: _udp_ports(pid) == [], what="the port closed once out of the team")
