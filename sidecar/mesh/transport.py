"""QUIC links between sidecars, each end pinned to an ed25519 machine key.

Every sidecar presents a self-signed certificate made from its machine key, and both ends of
a connection check the other's raw public key inside the TLS handshake (``PeerCheck``), so a
key that the check refuses never gets an application byte through: the server installs its
1-RTT decryption key only after our check has passed, and a refusal is a generic
``bad_certificate`` alert that says nothing about the team. ALPN ``hive/1`` carries the team
protocol, ``hive-join/1`` carries joins (whose check accepts any key that proves possession;
the join frame then has to present an invite secret).

aioquic 1.7 has no public switch for client certificates, so three private hooks are used
(see ``../shared/notes/transport.md``; the pin ``aioquic>=1.7,<1.8`` and the handshake matrix
in ``tests/sidecar/test_transport.py`` guard them):

- ``QuicConnection._initialize`` is wrapped so the TLS context it creates becomes
  :class:`_PinnedContext` and, on a server, asks for a client certificate;
- ``tls.Context._request_client_certificate`` turns that request on;
- ``_client_handle_certificate_verify`` / ``_server_handle_certificate_verify`` /
  ``_server_handle_finished`` and ``_peer_certificate`` are where the pin is checked.

No session tickets, no resumption and no 0-RTT: a resumed handshake carries no certificate.

A link is one bidirectional stream of frames: a 4-byte big-endian length, then one JSON
object with a string ``t``. Frames over :data:`MAX_FRAME` are refused in both directions (a
``relay`` frame, which wraps one such frame with its seal, may be :data:`RELAY_ALLOWANCE` longer); a
body nested too deep or too large (``wire.decode``) closes the link, and one whose text is not
proper Unicode reaches the owner as an ``invalid`` frame, so a message can still be answered. One
reader task per link owns the stream (cancelling a read between the length and the body would
desynchronise it) and hands decoded frames to a bounded memory stream. aioquic's ``drain()``
never pushes back, so senders must bound what they put in flight (the mesh does, per link).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import ssl
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import anyio
from aioquic import tls
from aioquic.asyncio import QuicConnectionProtocol, connect, serve
from aioquic.asyncio.server import QuicServer
from aioquic.quic import events
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509.oid import NameOID

from ..base import wire

ALPN_TEAM = "hive/1"
ALPN_JOIN = "hive-join/1"
MAX_FRAME = 4 * 1024 * 1024
# What a seal adds (signature, sealer, recipient, time) around a frame relayed through an anchor,
# with room to spare: a frame near MAX_FRAME must still travel relayed, or its mail would wait in
# an outbox for ever.
RELAY_ALLOWANCE = 64 * 1024
IDLE_TIMEOUT = 90.0
KEEPALIVE = 20.0  # under the ~30 s after which many home NATs forget an idle UDP mapping
CONNECT_TIMEOUT = 20.0
INBOX_FRAMES = 256  # decoded frames a link buffers before its reader stops reading

# Application close codes (QUIC application error space).
CLOSE_NORMAL = 0
CLOSE_PROTOCOL = 1  # malformed or oversize frame
CLOSE_REFUSED = 2  # not (or no longer) a member
CLOSE_DUPLICATE = 3  # another link to the same peer was kept

PeerCheck = Callable[[bytes, str], bool]
"""``check(peer_public_key, alpn) -> allowed``; called inside the TLS handshake."""

log = logging.getLogger("hive.sidecar.mesh.transport")
_REFUSAL = "certificate refused"  # reaches the peer: says nothing about why


INVALID = "invalid"  # made here, never sent: a frame refused for its text (see Link._decode)
_CLOSE: Any = object()


def _printable(value: str) -> str:
    return value.encode("ascii", errors="replace").decode()[:40]


class FrameError(Exception):
    """A frame that cannot be sent or was received malformed; the link is closed."""


class LinkClosed(Exception):
    """The link is gone; whatever was being sent did not go out."""


# ---- identity ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MachineCert:
    """A machine key in the shapes aioquic wants, plus its raw public key."""

    private_key: Ed25519PrivateKey
    certificate: x509.Certificate
    public_key: bytes


def machine_cert(seed: bytes) -> MachineCert:
    """The self-signed certificate for the ed25519 key whose 32-byte seed is ``seed``.

    Validity dates are never checked (``CERT_NONE``, key pinning): what is pinned is the key.
    """
    return _machine_cert(bytes(seed))


@cache
def _machine_cert(seed: bytes) -> MachineCert:
    private_key = Ed25519PrivateKey.from_private_bytes(seed)
    public = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, public.hex())])
    start = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private_key.public_key())
        .serial_number(int.from_bytes(public[:16], "big") >> 1 or 1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=365 * 100))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("hive.invalid")]), critical=False)
        .sign(private_key, algorithm=None)
    )
    return MachineCert(private_key, certificate, public)


def _configuration(cert: MachineCert, alpns: list[str], *, is_client: bool) -> QuicConfiguration:
    return QuicConfiguration(
        is_client=is_client,
        alpn_protocols=alpns,
        idle_timeout=IDLE_TIMEOUT,
        verify_mode=ssl.CERT_NONE,  # identity is the pinned key, not a CA chain
        server_name="hive.invalid" if is_client else None,
        certificate=cert.certificate,
        private_key=cert.private_key,
        max_datagram_frame_size=None,
    )


# ---- the TLS pin -------------------------------------------------------------------------


class _PinnedContext(tls.Context):
    """aioquic's TLS context with the peer's key checked right after its signature verified."""

    hive_check: PeerCheck
    hive_peer_key: bytes | None

    def _hive_pin(self) -> None:
        certificate = self._peer_certificate
        key = certificate.public_key() if certificate is not None else None
        if not isinstance(key, Ed25519PublicKey):
            raise tls.AlertBadCertificate(_REFUSAL)
        raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
        try:
            allowed = self.hive_check(raw, self.alpn_negotiated or "")
        except Exception:  # a broken check must refuse, never let a peer in
            log.exception("peer check failed")
            allowed = False
        if not allowed:
            raise tls.AlertBadCertificate(_REFUSAL)
        self.hive_peer_key = raw

    def _client_handle_certificate_verify(self, input_buf: Any) -> None:
        super()._client_handle_certificate_verify(input_buf)  # proof of possession first
        self._hive_pin()

    def _server_handle_certificate_verify(self, input_buf: Any) -> None:
        super()._server_handle_certificate_verify(input_buf)
        self._hive_pin()

    def _server_handle_finished(self, input_buf: Any, output_buf: Any) -> None:
        if self.hive_peer_key is None:  # an empty Certificate message is legal TLS; not here
            raise tls.AlertBadCertificate(_REFUSAL)
        super()._server_handle_finished(input_buf, output_buf)


def _install_pin(quic: QuicConnection, check: PeerCheck, *, server: bool) -> None:
    original = quic._initialize

    def initialize(peer_cid: bytes) -> None:
        original(peer_cid)
        context = quic.tls
        context.__class__ = _PinnedContext  # same layout; only the handshake methods change
        assert isinstance(context, _PinnedContext)
        context.hive_check = check
        context.hive_peer_key = None
        if server:
            context._request_client_certificate = True

    quic._initialize = initialize  # type: ignore[method-assign]


class _Protocol(QuicConnectionProtocol):
    """One QUIC connection; hands its first bidirectional stream over as a :class:`Link`."""

    def __init__(
        self,
        quic: QuicConnection,
        stream_handler: Any = None,
        *,
        check: PeerCheck,
        server: bool,
        on_stream: Callable[[_Protocol, asyncio.StreamReader, asyncio.StreamWriter], None] | None = None,
    ) -> None:
        super().__init__(quic)
        _install_pin(quic, check, server=server)
        self._on_stream = on_stream
        self._stream_id: int | None = None
        self.close_reason = ""

    @property
    def peer_key(self) -> bytes | None:
        context = getattr(self._quic, "tls", None)
        return getattr(context, "hive_peer_key", None)

    @property
    def alpn(self) -> str:
        context = getattr(self._quic, "tls", None)
        return getattr(context, "alpn_negotiated", None) or ""

    def quic_event_received(self, event: events.QuicEvent) -> None:
        if isinstance(event, events.StreamDataReceived):
            if self._stream_id is None and self._on_stream is not None and event.stream_id % 4 == 0:
                self._stream_id = event.stream_id
                reader, writer = self._create_stream(event.stream_id)
                self._on_stream(self, reader, writer)
            elif event.stream_id not in self._stream_readers:
                return  # one stream per link: anything else a peer opens is ignored
        elif isinstance(event, events.ConnectionTerminated):
            self.close_reason = event.reason_phrase or f"code {event.error_code}"
        super().quic_event_received(event)


# ---- frames and links --------------------------------------------------------------------


def encode_frame(frame: dict[str, Any]) -> bytes:
    """Length-prefixed JSON. Raises FrameError when over :data:`MAX_FRAME`."""
    body = json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode("utf-8", errors="replace")
    limit = MAX_FRAME + RELAY_ALLOWANCE if frame.get("t") == "relay" else MAX_FRAME
    if len(body) > limit:
        raise FrameError(f"a frame is limited to {limit} bytes; this one is {len(body)}")
    return struct.pack(">I", len(body)) + body


class Link:
    """One authenticated connection to a peer machine: send frames, receive frames, close.

    ``peer_key`` is the pinned key; ``dialer`` is the key of the side that dialed (used to keep
    exactly one of two simultaneous links). Frames arrive on :meth:`receive`; a frame whose
    body is not a JSON object with a string ``t`` is logged and skipped.
    """

    relayed = False  # a direct QUIC stream; .relay.RelayedLink is one whose frames ride another link

    def __init__(
        self,
        protocol: _Protocol,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        local_key: bytes,
        outbound: bool,
        address: str,
    ) -> None:
        self.protocol = protocol
        self._reader = reader
        self._writer = writer
        peer = protocol.peer_key
        assert peer is not None, "a link exists only after the pin passed"
        self.peer_key: bytes = peer
        self.alpn = protocol.alpn
        self.outbound = outbound
        self.dialer = local_key if outbound else peer
        self.address = address
        self.opened_at = time.monotonic()
        self.closed = anyio.Event()
        self.close_reason = ""
        self._frames_in: MemoryObjectSendStream[dict[str, Any]]
        self._frames: MemoryObjectReceiveStream[dict[str, Any]]
        self._frames_in, self._frames = anyio.create_memory_object_stream[dict[str, Any]](INBOX_FRAMES)
        self.bytes_in = 0
        self.bytes_out = 0

    @property
    def peer(self) -> str:
        return self.peer_key.hex()

    def __repr__(self) -> str:
        direction = "to" if self.outbound else "from"
        return f"<Link {direction} {self.peer[:12]} {self.address} {self.alpn}>"

    async def send(self, frame: dict[str, Any]) -> None:
        """Queue one frame on the stream. Raises LinkClosed or FrameError."""
        await self.send_encoded(encode_frame(frame))

    async def send_encoded(self, data: bytes) -> None:
        """Queue a frame already made by :func:`encode_frame` (one frame sent to many links)."""
        if self.closed.is_set():
            raise LinkClosed(self.close_reason or "the link is closed")
        try:
            self._writer.write(data)  # whole frames only: write() never interleaves two callers
        except Exception as exc:  # aioquic raises plain errors on a stream that already ended
            self.close(CLOSE_NORMAL, "send failed")
            raise LinkClosed(f"the link broke while sending ({exc})") from exc
        self.bytes_out += len(data)
        await anyio.lowlevel.checkpoint()

    async def receive(self) -> dict[str, Any]:
        """The next frame. Raises LinkClosed once the peer is gone and every frame was read."""
        try:
            return await self._frames.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError) as exc:
            raise LinkClosed(self.close_reason or "the link is closed") from exc

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            try:
                yield await self.receive()
            except LinkClosed:
                return

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Close the connection (idempotent); frames already received stay readable."""
        if not self.closed.is_set():
            self.close_reason = reason or self.close_reason or "closed here"
            self.closed.set()
        transport = self._writer.transport
        if not transport.is_closing():
            try:
                transport.close()
            except Exception:  # the QUIC connection is already gone, so is the stream
                transport._closing = True  # type: ignore[attr-defined]
        with contextlib.suppress(Exception):
            self.protocol.close(error_code=code, reason_phrase=reason[:100])
        self._frames_in.close()

    def _dispose(self) -> None:
        """The owner is done: drop frames nobody will read."""
        self.close()
        self._frames.close()

    async def _read_loop(self) -> None:
        """The only reader of the stream: whole frames into the memory stream, in order."""
        try:
            while True:
                header = await self._reader.readexactly(4)
                (size,) = struct.unpack(">I", header)
                if size > MAX_FRAME + RELAY_ALLOWANCE:  # a relay frame's limit: the kind is read later
                    log.warning("%r sent a %d-byte frame (limit %d); closing", self, size, MAX_FRAME + RELAY_ALLOWANCE)
                    self.close(CLOSE_PROTOCOL, "frame too large")
                    return
                body = await self._reader.readexactly(size)
                self.bytes_in += 4 + size
                frame = self._decode(body)
                if frame is _CLOSE:
                    return
                if frame is None:
                    continue
                if size > MAX_FRAME and frame.get("t") != "relay":
                    log.warning("%r sent a %d-byte %.40r frame (limit %d); closing", self, size, frame["t"], MAX_FRAME)
                    self.close(CLOSE_PROTOCOL, "frame too large")
                    return
                await self._frames_in.send(frame)
        except (asyncio.IncompleteReadError, ConnectionError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            self.close_reason = self.close_reason or self.protocol.close_reason or "the peer closed the link"
            self.closed.set()
            self._frames_in.close()

    def _decode(self, body: bytes) -> Any:
        """A frame for the owner, None to skip it, or ``_CLOSE`` once the link was closed for it.

        Text that is not proper Unicode cannot be stored or passed on, but the frame's sender
        is owed an answer (a message it would otherwise resend forever), so the owner gets an
        ``invalid`` frame naming the kind and id of what was refused.
        """
        try:
            frame = wire.decode(body)
        except wire.BadText as exc:
            original = exc.value
            if not isinstance(original, dict) or not isinstance(original.get("t"), str):
                log.warning("%r sent a frame that is not a JSON object with a type; ignored", self)
                return None
            log.warning("%r sent a %.40r frame with improper text; refused", self, _printable(original["t"]))
            inner = original.get("msg")
            ref = inner.get("id") if isinstance(inner, dict) else original.get("id")
            return {
                "t": INVALID,
                "of": _printable(original["t"]),
                "id": ref if isinstance(ref, str) and wire.proper_text(ref) else None,
                "reason": exc.reason,
            }
        except wire.OverLimit as exc:
            log.warning("%r sent a frame over the limits (%s); closing", self, exc.reason)
            self.close(CLOSE_PROTOCOL, "malformed frame")
            return _CLOSE
        except wire.WireError as exc:
            log.warning("%r sent a frame that is not JSON (%s); ignored", self, exc.reason)
            return None
        if not isinstance(frame, dict) or not isinstance(frame.get("t"), str):
            log.warning("%r sent a frame that is not a JSON object with a type; ignored", self)
            return None
        return frame

    async def _keepalive(self) -> None:
        while not self.closed.is_set():
            with anyio.move_on_after(KEEPALIVE):
                await self.closed.wait()
                return
            try:
                with anyio.fail_after(KEEPALIVE):
                    await self.protocol.ping()
            except (TimeoutError, ConnectionError):
                self.close(CLOSE_NORMAL, "keepalive timed out")
                return

    async def _run(self) -> None:
        """Read and keep alive until the link closes, then close the QUIC connection.

        Whatever goes wrong here ends this link only: it is logged once and never reaches the
        listener or the dialer, which serve every other link.
        """
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._keepalive)
                await self._read_loop()
                tg.cancel_scope.cancel()
        except Exception:
            log.exception("%r failed; closing it", self)
            self.close_reason = self.close_reason or "internal error"
        finally:
            self.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self.protocol.wait_closed()


# ---- listening and dialing ---------------------------------------------------------------


class Listener:
    """A QUIC server whose links are handed, one task each, to ``handler``."""

    def __init__(self, server: QuicServer, port: int) -> None:
        self.server = server
        self.port = port


async def listen(
    host: str,
    port: int,
    cert: MachineCert,
    check: PeerCheck,
    handler: Callable[[Link], Any],
    *,
    alpns: tuple[str, ...] = (ALPN_TEAM, ALPN_JOIN),
    task_status: TaskStatus[Listener] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled. ``task_status`` gets the :class:`Listener` (with the bound port).

    Each accepted link runs ``await handler(link)`` in a task of its own; the link is closed
    when the handler returns.
    """
    new_links: MemoryObjectSendStream[tuple[_Protocol, asyncio.StreamReader, asyncio.StreamWriter]]
    new_links_out: MemoryObjectReceiveStream[tuple[_Protocol, asyncio.StreamReader, asyncio.StreamWriter]]
    new_links, new_links_out = anyio.create_memory_object_stream[
        tuple[_Protocol, asyncio.StreamReader, asyncio.StreamWriter]
    ](64)

    def on_stream(protocol: _Protocol, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            new_links.send_nowait((protocol, reader, writer))
        except anyio.WouldBlock:
            protocol.close(error_code=CLOSE_NORMAL, reason_phrase="busy")

    def create_protocol(quic: QuicConnection, stream_handler: Any = None) -> _Protocol:
        return _Protocol(quic, check=check, server=True, on_stream=on_stream)

    server = await serve(
        host, port, configuration=_configuration(cert, list(alpns), is_client=False), create_protocol=create_protocol
    )
    try:
        assert server._transport is not None  # serve() returns once its socket is bound
        sockname = server._transport.get_extra_info("sockname")
        listener = Listener(server, int(sockname[1]))
        async with anyio.create_task_group() as tg:
            task_status.started(listener)
            async with new_links_out:
                async for protocol, reader, writer in new_links_out:
                    link = Link(
                        protocol,
                        reader,
                        writer,
                        local_key=cert.public_key,
                        outbound=False,
                        address=_remote_address(protocol),
                    )
                    tg.start_soon(_serve_link, link, handler)
    finally:
        new_links.close()
        new_links_out.close()
        server.close()


def _remote_address(protocol: _Protocol) -> str:
    paths = protocol._quic._network_paths
    if not paths:
        return "?"
    host, port = paths[0].addr[:2]
    return f"{host.removeprefix('::ffff:')}:{port}"


async def _serve_link(link: Link, handler: Callable[[Link], Any]) -> None:
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(link._run)
            try:
                await handler(link)
            finally:
                link._dispose()
    except Exception:  # one link's failure must not end the listener and every other link
        log.exception("serving %r failed", link)


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` to its parts. Raises ValueError."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"an address is host:port, not {address!r}")
    return host.strip("[]"), int(port)


@contextlib.asynccontextmanager
async def dial(
    address: str, cert: MachineCert, check: PeerCheck, *, alpn: str = ALPN_TEAM, connect_within: float = CONNECT_TIMEOUT
) -> AsyncIterator[Link]:
    """Connect to ``host:port`` and yield the link once the handshake passed both pins.

    Under TLS 1.3 a client the server refuses still completes its side of the handshake; the
    refusal arrives about one round trip later as a closed link. Callers therefore treat a
    link as established only once the server's first frame arrived.

    Raises ConnectionError (refused, unreachable, timed out) or ValueError (bad address).
    """
    host, port = split_address(address)

    def create_protocol(quic: QuicConnection, stream_handler: Any = None) -> _Protocol:
        return _Protocol(quic, check=check, server=False)

    try:
        with anyio.fail_after(connect_within):
            manager = connect(
                host, port, configuration=_configuration(cert, [alpn], is_client=True), create_protocol=create_protocol
            )
            protocol = await manager.__aenter__()
    except TimeoutError as exc:
        raise ConnectionError(f"no answer from {address} within {connect_within:.0f} s") from exc
    except OSError as exc:
        raise ConnectionError(f"cannot reach {address}: {exc}") from exc
    try:
        assert isinstance(protocol, _Protocol)
        reader, writer = await protocol.create_stream()
        link = Link(protocol, reader, writer, local_key=cert.public_key, outbound=True, address=address)
        failure: BaseException | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(link._run)
            try:
                yield link
            except BaseException as exc:  # re-raised below, not wrapped in the task group's group
                failure = exc
            finally:
                link._dispose()
        if failure is not None:
            raise failure
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await manager.__aexit__(None, None, None)


__all__ = [
    "ALPN_JOIN",
    "ALPN_TEAM",
    "CLOSE_DUPLICATE",
    "CLOSE_NORMAL",
    "CLOSE_PROTOCOL",
    "CLOSE_REFUSED",
    "MAX_FRAME",
    "RELAY_ALLOWANCE",
    "FrameError",
    "Link",
    "LinkClosed",
    "Listener",
    "MachineCert",
    "PeerCheck",
    "dial",
    "encode_frame",
    "listen",
    "machine_cert",
    "split_address",
]
