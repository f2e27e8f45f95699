"""A client of the Codex TUI's own app-server, to put a message into a running Codex thread.

The interactive ``codex`` runs on a local app-server daemon (``codex app-server --listen unix://
--managed-daemon``) whose control socket is ``$CODEX_HOME/app-server-control/app-server-control.sock``
(../shared/notes/push.md §2). Its transport is WebSocket over that unix socket: an HTTP Upgrade,
then one JSON-RPC message per text frame. No WebSocket library is a dependency of hive, so this
module speaks the small client subset of RFC 6455 it needs with the stdlib (masked text frames
out; text, continuation, ping and close frames in).

:func:`deliver` is the whole use: ``thread/read`` tells whether the thread is loaded and idle or
running a turn; idle gets ``turn/start`` (the text becomes a new user turn and the TUI shows it),
running gets ``turn/steer`` with the running turn's id (the text joins that turn, after the
current tool result). A turn that starts or ends between the read and the call makes that call
fail; it is read again and retried. Only an answer from Codex that accepted the input counts.
When the socket cannot be used at all (missing, broken, or no answer in time), ``codex queue
--thread`` (the CLI's own path into the same daemon) is tried.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteReceiveStream

from ..push import Delivery, NotRunning, PushFailed

SOCKET = Path("app-server-control") / "app-server-control.sock"
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3
MAX_FRAME = 16 << 20  # a thread/read answer carries the thread's metadata; far below this
MAX_HEADERS = 16 << 10
ATTEMPTS = 3  # a turn may start or end between reading the thread and steering it
DEADLINE = 10.0  # one whole delivery, connect to accepted answer
QUEUE_DEADLINE = 20.0  # `codex queue` is a process start of a large binary, slow on a loaded machine


class Refusal(PushFailed):
    """The app-server answered a request with an error."""

    code = "push_refused"

    def __init__(self, method: str, message: str) -> None:
        super().__init__(f"{method}: {message}")
        self.method = method


def codex_home(transcript: str) -> Path:
    """The CODEX_HOME a session runs under: its rollout file is ``<home>/sessions/Y/M/D/rollout-*.jsonl``;
    without one, the sidecar's own CODEX_HOME or ``~/.codex``."""
    path = Path(transcript) if transcript else None
    if (
        path is not None
        and path.name.startswith("rollout-")
        and len(path.parents) > 4
        and path.parents[3].name == "sessions"
    ):
        return path.parents[4]
    env = os.environ.get("CODEX_HOME")
    return Path(env) if env else Path.home() / ".codex"


# ---- WebSocket (RFC 6455, client side) -------------------------------------------------------------


class WebSocket:
    """One client connection over a byte stream: text frames only, masked as a client must."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self.reader = BufferedByteReceiveStream(stream)

    async def handshake(self, host: str = "localhost", path: str = "/") -> None:
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        await self.stream.send(request.encode())
        try:
            head = await self.reader.receive_until(b"\r\n\r\n", MAX_HEADERS)
        except anyio.DelimiterNotFound as exc:
            raise PushFailed("the app-server's handshake answer is too long") from exc
        status, *lines = head.decode("latin-1").split("\r\n")
        if status.split(" ")[1:2] != ["101"]:
            raise PushFailed(f"the app-server refused the WebSocket upgrade: {status[:100]!r}")
        headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        expected = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        if headers.get("sec-websocket-accept") != expected:
            raise PushFailed("the app-server's WebSocket accept key does not match")

    async def send_text(self, text: str) -> None:
        await self._send_frame(0x1, text.encode())

    async def _send_frame(self, opcode: int, payload: bytes) -> None:
        size = len(payload)
        if size < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
        elif size < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
        mask = os.urandom(4)
        # XOR with the repeated 4-byte mask, done on whole integers rather than byte by byte.
        repeated = (mask * (size // 4 + 1))[:size]
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(size, "big")
        await self.stream.send(head + mask + masked)

    async def receive_text(self) -> str:
        """The next whole text message; answers pings on the way."""
        parts: list[bytes] = []
        while True:
            fin, opcode, payload = await self._receive_frame()
            if opcode == 0x8:
                raise PushFailed("the app-server closed the connection")
            if opcode == 0x9:
                await self._send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            if opcode in (0x1, 0x2) or (opcode == 0x0 and parts):
                parts.append(payload)
                if sum(map(len, parts)) > MAX_FRAME:
                    raise PushFailed("an app-server message is over the size limit")
                if fin:
                    return b"".join(parts).decode("utf-8", "replace")
                continue
            raise PushFailed(f"an unexpected WebSocket frame (opcode {opcode})")

    async def _receive_frame(self) -> tuple[bool, int, bytes]:
        first, second = await self.reader.receive_exactly(2)
        size = second & 0x7F
        if size == 126:
            size = struct.unpack("!H", await self.reader.receive_exactly(2))[0]
        elif size == 127:
            size = struct.unpack("!Q", await self.reader.receive_exactly(8))[0]
        if size > MAX_FRAME:
            raise PushFailed("an app-server frame is over the size limit")
        mask = await self.reader.receive_exactly(4) if second & 0x80 else b""
        payload = await self.reader.receive_exactly(size) if size else b""
        if mask:
            repeated = (mask * (size // 4 + 1))[:size]
            payload = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(size, "big")
        return bool(first & 0x80), first & 0x0F, payload

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._send_frame(0x8, struct.pack("!H", 1000))
        await self.stream.aclose()


# ---- JSON-RPC on the app-server --------------------------------------------------------------------


class Rpc:
    """Requests and answers on one app-server connection; notifications in between are skipped."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self._next = 0

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        request_id = self._next
        await self.ws.send_text(json.dumps({"id": request_id, "method": method, "params": params}))
        while True:
            try:
                message = json.loads(await self.ws.receive_text())
            except json.JSONDecodeError as exc:
                raise PushFailed(f"the app-server sent something that is not JSON ({exc.msg})") from exc
            if not isinstance(message, dict) or message.get("id") != request_id or "method" in message:
                continue  # a notification, or a request of the server's own meant for the TUI
            if "error" in message:
                error = message["error"] if isinstance(message["error"], dict) else {}
                raise Refusal(method, str(error.get("message") or error)[:300])
            result = message.get("result")
            return result if isinstance(result, dict) else {}

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self.ws.send_text(json.dumps({"method": method, **({"params": params} if params else {})}))


@contextlib.asynccontextmanager
async def connect(socket: Path, client: str = "hive", version: str = "0") -> Any:
    """An initialized JSON-RPC session on the app-server behind ``socket``."""
    try:
        stream = await anyio.connect_unix(socket)
    except OSError as exc:
        raise PushFailed(f"no Codex app-server answers at {socket} ({exc.strerror or exc})") from exc
    ws = WebSocket(stream)
    try:
        await ws.handshake()
        rpc = Rpc(ws)
        await rpc.call("initialize", {"clientInfo": {"name": client, "title": "hive", "version": version}})
        await rpc.notify("initialized")
        yield rpc
    except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError) as exc:
        raise PushFailed(f"the Codex app-server connection broke ({type(exc).__name__})") from exc
    finally:
        with anyio.CancelScope(shield=True):
            await ws.close()


async def _running_turn(rpc: Rpc, thread: str) -> str | None:
    """The id of the turn the thread is running, None when it is idle. Raises NotRunning."""
    try:
        read = await rpc.call("thread/read", {"threadId": thread})
    except Refusal as exc:  # "thread not loaded: <id>" for a thread this daemon never ran
        raise NotRunning(f"thread {thread} is not loaded in the Codex app-server ({exc.message})") from exc
    status = ((read.get("thread") or {}).get("status") or {}).get("type")
    if status in (None, "notLoaded"):
        raise NotRunning(f"thread {thread} is not loaded in the Codex app-server (no TUI runs it)")
    if status != "active":
        return None
    turns = await rpc.call("thread/turns/list", {"threadId": thread, "limit": 1})
    for turn in turns.get("data") or []:
        if isinstance(turn, dict) and turn.get("status") == "inProgress" and isinstance(turn.get("id"), str):
            return turn["id"]
    return None  # active but between turns (an approval being answered): a new turn waits its place


async def send(socket: Path, thread: str, text: str) -> Delivery:
    """Steer the thread's running turn with ``text``, or start a turn with it when idle."""
    data = [{"type": "text", "text": text, "text_elements": []}]
    async with connect(socket) as rpc:
        last: PushFailed | None = None
        for _ in range(ATTEMPTS):
            turn = await _running_turn(rpc, thread)
            try:
                if turn is not None:
                    answer = await rpc.call("turn/steer", {"threadId": thread, "expectedTurnId": turn, "input": data})
                    return Delivery("steer", str(answer.get("turnId") or turn))
                answer = await rpc.call("turn/start", {"threadId": thread, "input": data})
                return Delivery("start", str((answer.get("turn") or {}).get("id") or ""))
            except Refusal as exc:
                last = exc  # the turn moved on between the read and the call: read again
        assert last is not None
        raise last


async def queue(codex: Path, home: Path, thread: str, text: str) -> Delivery:
    """``codex queue --thread``: the CLI's own way to hand a thread a message."""
    env = {**os.environ, "CODEX_HOME": str(home)}
    with anyio.fail_after(QUEUE_DEADLINE):
        # A session of its own, as every harness process hive starts: one in its caller's session
        # makes the sidecar take that session's other hive commands for an agent's (sidecar/base/peer.py).
        done = await anyio.run_process(
            [str(codex), "queue", "--thread", thread, "--message", text], env=env, check=False, start_new_session=True
        )
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
        raise PushFailed(f"codex queue exited {done.returncode}: {(reason or [''])[-1][:200]}")
    return Delivery("queue")


async def deliver(home: Path, thread: str, text: str, codex: Path | None, deadline: float = DEADLINE) -> Delivery:
    """Put ``text`` into Codex thread ``thread`` running under ``home``; raises PushFailed if Codex did not take it.

    A thread the app-server does not have loaded is not running in any TUI, so nothing is queued
    for it (it would wait unseen); a socket that cannot be used falls back to ``codex queue``.
    """
    try:
        with anyio.fail_after(deadline):
            return await send(home / SOCKET, thread, text)
    except (NotRunning, Refusal):
        raise
    except (PushFailed, TimeoutError) as exc:  # no socket, a broken one, or a daemon that never answers
        first = str(exc) or f"no answer within {deadline:g} s"
        if codex is None:
            raise PushFailed(
                f"the app-server push failed ({first}) and no codex binary is known for the fallback"
            ) from exc
        try:
            return await queue(codex, home, thread, text)
        except (PushFailed, OSError, TimeoutError) as fallback:
            raise PushFailed(f"the app-server push failed ({first}); codex queue too ({fallback})") from fallback
