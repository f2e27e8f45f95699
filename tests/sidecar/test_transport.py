"""The QUIC transport on loopback: the handshake matrix that guards aioquic's private hooks, and framing.

Cases (see ``../shared/notes/transport.md`` §1): A both pinned, B client unknown to the server,
C server unknown to the client, D a client with no certificate, F a known certificate presented
with another private key. Plus: the join ALPN admits any key that proves possession, and
frames over 4 MiB or that are not typed JSON objects are refused without breaking the link.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import struct
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from aioquic.asyncio import connect
from aioquic.quic.configuration import QuicConfiguration

from hive.sidecar.mesh.transport import (
    ALPN_JOIN,
    ALPN_TEAM,
    MAX_FRAME,
    RELAY_ALLOWANCE,
    FrameError,
    Link,
    LinkClosed,
    Listener,
    MachineCert,
    dial,
    encode_frame,
    listen,
    machine_cert,
)

pytestmark = pytest.mark.anyio


def _key() -> MachineCert:
    return machine_cert(os.urandom(32))


class Server:
    """A listener whose handler answers every frame with an echo and records what it saw."""

    def __init__(self, cert: MachineCert, allowed: Callable[[bytes, str], bool]) -> None:
        self.cert = cert
        self.allowed = allowed
        self.links: list[Link] = []
        self.frames: list[dict[str, Any]] = []
        self.checked: list[tuple[str, str]] = []
        self.listener: Listener

    def check(self, key: bytes, alpn: str) -> bool:
        self.checked.append((key.hex(), alpn))
        return self.allowed(key, alpn)

    async def handle(self, link: Link) -> None:
        self.links.append(link)
        async for frame in link:
            self.frames.append(frame)
            await link.send({"t": "echo", "of": frame, "alpn": link.alpn, "peer": link.peer})

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.listener.port}"


async def _with_server(server: Server, body: Callable[[], Any]) -> None:
    async with anyio.create_task_group() as tg:
        server.listener = await tg.start(listen, "127.0.0.1", 0, server.cert, server.check, server.handle)
        with anyio.fail_after(10):
            await body()
        tg.cancel_scope.cancel()


async def test_a_both_pinned_peers_exchange_frames_and_read_each_others_key() -> None:
    alice, bob = _key(), _key()
    server = Server(bob, lambda key, alpn: key == alice.public_key and alpn == ALPN_TEAM)

    async def body() -> None:
        async with dial(server.address, alice, lambda key, alpn: key == bob.public_key) as link:
            assert link.peer_key == bob.public_key
            assert link.dialer == alice.public_key
            await link.send({"t": "hello", "n": 1})
            reply = await link.receive()
            assert reply == {
                "t": "echo",
                "of": {"t": "hello", "n": 1},
                "alpn": ALPN_TEAM,
                "peer": alice.public_key.hex(),
            }
        assert server.links[0].peer_key == alice.public_key
        assert server.links[0].dialer == alice.public_key

    await _with_server(server, body)


async def test_b_a_client_the_server_does_not_know_gets_no_frame_through() -> None:
    stranger, bob = _key(), _key()
    server = Server(bob, lambda key, alpn: False)

    async def body() -> None:
        # TLS 1.3: the client may finish its side before the server's refusal arrives.
        try:
            async with dial(server.address, stranger, lambda key, alpn: True) as link:
                with pytest.raises(LinkClosed):
                    await link.send({"t": "hello", "team": "probe"})
                    await link.receive()
        except ConnectionError:
            pass
        assert server.checked == [(stranger.public_key.hex(), ALPN_TEAM)]
        assert server.links == []
        assert server.frames == []

    await _with_server(server, body)


async def test_c_a_server_the_client_does_not_know_is_refused_before_anything_is_sent() -> None:
    alice, impostor = _key(), _key()
    server = Server(impostor, lambda key, alpn: True)

    async def body() -> None:
        with pytest.raises(ConnectionError):
            async with dial(server.address, alice, lambda key, alpn: False):
                pytest.fail("the link must not open")
        assert server.frames == []

    await _with_server(server, body)


async def test_d_a_client_without_a_certificate_is_refused() -> None:
    bob = _key()
    server = Server(bob, lambda key, alpn: True)

    async def body() -> None:
        config = QuicConfiguration(
            is_client=True, alpn_protocols=[ALPN_TEAM], verify_mode=ssl.CERT_NONE, server_name="hive.invalid"
        )
        try:
            async with connect("127.0.0.1", server.listener.port, configuration=config) as protocol:
                reader, writer = await protocol.create_stream()
                try:
                    writer.write(encode_frame({"t": "hello"}))
                    with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):  # EOF or an error: a refusal
                        await reader.readexactly(4)
                finally:
                    writer.close()
        except ConnectionError:
            pass
        assert server.checked == []
        assert server.frames == []

    await _with_server(server, body)


async def test_f_a_members_certificate_with_another_private_key_fails_the_handshake() -> None:
    alice, bob, thief = _key(), _key(), _key()
    server = Server(bob, lambda key, alpn: key == alice.public_key)

    async def body() -> None:
        forged = MachineCert(thief.private_key, alice.certificate, alice.public_key)
        try:
            async with dial(server.address, forged, lambda key, alpn: True) as link:
                with pytest.raises(LinkClosed):
                    await link.send({"t": "hello"})
                    await link.receive()
        except ConnectionError:
            pass
        assert server.checked == []  # the signature check fails before the pin is consulted
        assert server.frames == []

    await _with_server(server, body)


async def test_the_join_alpn_reaches_the_check_so_it_can_admit_a_new_key() -> None:
    joiner, bob = _key(), _key()
    server = Server(bob, lambda key, alpn: alpn == ALPN_JOIN)

    async def body() -> None:
        async with dial(server.address, joiner, lambda key, alpn: key == bob.public_key, alpn=ALPN_JOIN) as link:
            assert link.alpn == ALPN_JOIN
            await link.send({"t": "join"})
            assert (await link.receive())["alpn"] == ALPN_JOIN
        with pytest.raises(LinkClosed):
            async with dial(server.address, joiner, lambda key, alpn: True, alpn=ALPN_TEAM) as link:
                await link.send({"t": "hello"})
                await link.receive()

    await _with_server(server, body)


async def test_frames_that_are_not_typed_objects_are_skipped_and_the_link_survives() -> None:
    alice, bob = _key(), _key()
    server = Server(bob, lambda key, alpn: True)

    async def body() -> None:
        async with dial(server.address, alice, lambda key, alpn: True) as link:
            for junk in (b"not json", b"[1, 2]", b'{"no": "type"}', b"\xff\xfe"):
                link._writer.write(struct.pack(">I", len(junk)) + junk)
            await link.send({"t": "after"})
            assert (await link.receive())["of"] == {"t": "after"}
        assert server.frames == [{"t": "after"}]

    await _with_server(server, body)


async def test_a_frame_over_4_mib_is_refused_by_the_sender_and_closes_the_link_at_the_receiver() -> None:
    alice, bob = _key(), _key()
    server = Server(bob, lambda key, alpn: True)

    async def body() -> None:
        async with dial(server.address, alice, lambda key, alpn: True) as link:
            with pytest.raises(FrameError):
                await link.send({"t": "big", "body": "x" * MAX_FRAME})
            await link.send({"t": "ok"})
            assert (await link.receive())["of"] == {"t": "ok"}
            link._writer.write(struct.pack(">I", MAX_FRAME + RELAY_ALLOWANCE + 1) + b"{")  # announcing too much
            with pytest.raises(LinkClosed):
                await link.receive()
        assert server.frames == [{"t": "ok"}]
        assert server.links[0].close_reason == "frame too large"

    await _with_server(server, body)


async def test_only_a_relay_frame_may_pass_4_mib_by_the_seals_allowance() -> None:
    alice, bob = _key(), _key()
    received: list[str] = []
    closed: list[str] = []
    ended = anyio.Event()
    sealed = {"body": {"frame": {"t": "msg", "body": "x" * (MAX_FRAME - 100)}}, "by": "k" * 64, "sig": "s" * 88}

    async def handle(link: Link) -> None:
        async for frame in link:
            received.append(frame["t"])
            await link.send({"t": "ok"})
        closed.append(link.close_reason)
        ended.set()

    async with anyio.create_task_group() as tg:
        listener = await tg.start(listen, "127.0.0.1", 0, bob, lambda key, alpn: True, handle)
        with anyio.fail_after(30):
            async with dial(f"127.0.0.1:{listener.port}", alice, lambda key, alpn: True) as link:
                await link.send({"t": "relay", "sealed": sealed})  # a frame near the limit, wrapped for an anchor
                assert (await link.receive()) == {"t": "ok"}
                with pytest.raises(FrameError):
                    await link.send({"t": "big", "body": "x" * (MAX_FRAME + 10)})
                # The same size written past the sender's check: any kind but relay closes the link.
                data = json.dumps({"t": "big", "body": "x" * (MAX_FRAME + 10)}).encode()
                link._writer.write(struct.pack(">I", len(data)) + data)
                with pytest.raises(LinkClosed):
                    await link.receive()
            await ended.wait()
        tg.cancel_scope.cancel()
    assert received == ["relay"] and closed == ["frame too large"]


async def test_a_frame_of_exactly_the_limit_crosses() -> None:
    alice, bob = _key(), _key()
    received: list[int] = []

    async def handle(link: Link) -> None:
        async for frame in link:
            received.append(len(frame["body"]))
            await link.send({"t": "ok"})

    async with anyio.create_task_group() as tg:
        listener = await tg.start(listen, "127.0.0.1", 0, bob, lambda key, alpn: True, handle)
        with anyio.fail_after(30):
            async with dial(f"127.0.0.1:{listener.port}", alice, lambda key, alpn: True) as link:
                overhead = len(encode_frame({"t": "big", "body": ""})) - 4
                await link.send({"t": "big", "body": "x" * (MAX_FRAME - overhead)})
                assert (await link.receive()) == {"t": "ok"}
        tg.cancel_scope.cancel()
    assert received == [MAX_FRAME - len(encode_frame({"t": "big", "body": ""})) + 4]
