"""The client library: connect to this user's sidecar (starting it if needed) and call ops.

    async with Client.open() as client:
        result = await client.call("send", to="bob/api-codex", body="…")

Requests are multiplexed on one connection, so a long ``inbox`` poll and other calls can be in
flight together. Pushed ``deliver`` events arrive on :attr:`Client.events`.

:class:`BlockingClient` makes the same calls one at a time without an event loop: a CLI command
makes a few calls in a row, and starting asyncio would cost it more than the calls themselves.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import sys
import time

from .base.errors import HiveError, Unreachable, from_wire
from .base.paths import StatePaths, ensure_home, socket_path_from_env, state_paths

# anyio is imported where the async client runs: a CLI command's blocking calls never load it, nor
# typing and pathlib (about 10 ms together), which only the type checker needs here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path
    from typing import Any

    import anyio.abc
    from anyio.abc import SocketStream

START_TIMEOUT = 10.0
MAX_LINE = 1 << 22


def start_detached(paths: StatePaths, timeout: float = START_TIMEOUT) -> bool:
    """Start a sidecar for ``paths`` in its own session and wait until it listens.

    Returns False if it exited while another sidecar holds the state folder's lock (it lost the
    race to start); the caller then simply connects to that one. Raises :class:`Unreachable`
    with the sidecar's own last error line when it exited for any other reason, so that a
    sidecar that cannot start is reported at once rather than waited for.
    """
    import select
    import subprocess  # only a start needs them: a command that finds its sidecar running does not load them

    ensure_home(paths.home)
    read_fd, write_fd = os.pipe()
    env = dict(os.environ, HIVE_HOME=str(paths.home))
    stderr_path = paths.home / "sidecar.stderr"
    with open(os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as stderr:
        said_before = os.fstat(stderr.fileno()).st_size  # what this start writes comes after it
        # --detach forks once more and the first child exits at once, so the sidecar is
        # reparented to init and never lingers as this process's child or zombie.
        launcher = subprocess.Popen(
            [sys.executable, "-m", "hive.sidecar", "--detach", "--ready-fd", str(write_fd)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            pass_fds=(write_fd,),
            start_new_session=True,
            close_fds=True,
            env=env,
            cwd="/",
        )
    os.close(write_fd)
    try:
        launcher.wait(timeout=timeout)
        # The pipe ends when the sidecar says "ready" or "busy", or at once when it exits.
        ready, _, _ = select.select([read_fd], [], [], timeout)
        if not ready:
            return False  # still starting after the timeout: the caller's connect says the rest
        said = os.read(read_fd, 16)
    except subprocess.TimeoutExpired:
        launcher.kill()
        launcher.wait()
        return False
    finally:
        os.close(read_fd)
    if said.startswith(b"ready"):
        return True
    if said.startswith(b"busy"):
        return False  # another sidecar has the folder's lock: it is running or about to listen
    raise Unreachable(_why_it_exited(paths, stderr_path, said_before))


def _why_it_exited(paths: StatePaths, stderr_path: Path, offset: int) -> str:
    """The sidecar's own last ``hive: ...`` line, else the last line it wrote (a traceback's)."""
    try:
        with open(stderr_path, "rb") as said:
            said.seek(offset)
            lines = said.read(MAX_LINE).decode(errors="replace").splitlines()
    except OSError:
        lines = []
    ours = [line.strip() for line in lines if line.startswith("hive: ")]
    cause = ours[-1] if ours else next((line.strip() for line in reversed(lines) if line.strip()), "")
    cause = cause.removeprefix("hive: ")
    if not cause:
        return f"the sidecar for {paths.home} exited at once without saying why; see {stderr_path} and {paths.log}"
    return f"the sidecar for {paths.home} could not start: {cause} (its output: {stderr_path})"


def lock_held(path: os.PathLike[str]) -> bool:
    """Whether a live process holds the state folder's lock (a sidecar running or starting)."""
    import fcntl

    try:
        lock = open(path, "rb")  # closed below; a missing lock has no holder
    except FileNotFoundError:
        return False
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def _none_running(paths: StatePaths, exc: OSError) -> Unreachable:
    return Unreachable(f"no sidecar is running for {paths.home} ({exc.strerror})")


def _cannot_start(paths: StatePaths, exc: OSError) -> Unreachable:
    return Unreachable(f"cannot start a sidecar in {paths.home}: {exc.strerror or exc}")


def _not_reached(paths: StatePaths, exc: OSError) -> Unreachable:
    log = paths.home / "sidecar.stderr"
    return Unreachable(
        f"could not start or reach the sidecar for {paths.home} ({exc.strerror}); see {log} and {paths.log}"
    )


async def _connect(socket_path: Path) -> SocketStream:
    import anyio

    return await anyio.connect_unix(socket_path)


async def connect_or_start(paths: StatePaths, autostart: bool = True) -> SocketStream:
    """A stream to the sidecar, starting one detached when none answers: the start and its retries
    are :func:`connect_or_start_blocking`'s, run on a worker thread."""
    import anyio
    from anyio.abc import UNIXSocketStream

    try:
        return await _connect(paths.socket)
    except OSError as exc:
        if not autostart:
            raise _none_running(paths, exc) from exc
    sock = await anyio.to_thread.run_sync(connect_or_start_blocking, paths)
    return await UNIXSocketStream.from_socket(sock)


def _connect_blocking(socket_path: Path | str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(socket_path))
    except BaseException:
        sock.close()
        raise
    return sock


def connect_or_start_blocking(paths: StatePaths, autostart: bool = True) -> socket.socket:
    """:func:`connect_or_start` without an event loop: a connected socket to the sidecar."""
    try:
        return _connect_blocking(paths.socket)
    except OSError as exc:
        if not autostart:
            raise _none_running(paths, exc) from exc
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            started = start_detached(paths, max(deadline - time.monotonic(), 0.1))
        except OSError as exc:
            raise _cannot_start(paths, exc) from exc
        try:
            return _connect_blocking(paths.socket)
        except OSError as exc:
            if started or time.monotonic() > deadline:
                raise _not_reached(paths, exc) from exc
        time.sleep(0.05)  # lost the start race to another client: its sidecar is coming up


class Client:
    def __init__(self, stream: SocketStream) -> None:
        from typing import Any

        import anyio
        from anyio.streams.buffered import BufferedByteReceiveStream

        self._stream = stream
        self._reader = BufferedByteReceiveStream(stream)
        self._ids = itertools.count(1)
        self._pending: dict[int, anyio.abc.ObjectSendStream[dict[str, Any]]] = {}
        self._write_lock = anyio.Lock()
        self.events_in, self.events = anyio.create_memory_object_stream[dict[str, Any]](100)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, paths: StatePaths | None = None, *, autostart: bool = True) -> AsyncIterator[Client]:
        import anyio

        stream = await connect_or_start(paths or state_paths(), autostart)
        client = cls(stream)
        failure: BaseException | None = None
        async with stream, anyio.create_task_group() as tg:
            tg.start_soon(client._read_loop)
            try:
                yield client
            except BaseException as exc:  # re-raised below, outside the task group's exception group
                failure = exc
            tg.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _read_loop(self) -> None:
        import anyio

        try:
            while True:
                line = await self._reader.receive_until(b"\n", MAX_LINE)
                message = json.loads(line)
                if "event" in message:
                    with contextlib.suppress(anyio.WouldBlock):
                        self.events_in.send_nowait(message)
                    continue
                waiter = self._pending.pop(message.get("id"), None)
                if waiter is not None:
                    await waiter.send(message)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            for waiter in self._pending.values():
                await waiter.aclose()
            self._pending.clear()
            self.events_in.close()

    async def send_raw(self, payload: dict[str, Any]) -> None:
        data = (json.dumps(payload, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        async with self._write_lock:
            await self._stream.send(data)

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Send one request and wait for its reply. Raises the HiveError the sidecar reported."""
        from typing import Any

        import anyio

        request_id = next(self._ids)
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](1)
        self._pending[request_id] = send
        try:
            await self.send_raw({"id": request_id, "op": op, **args})
            async with receive:
                try:
                    reply = await receive.receive()
                except anyio.EndOfStream as exc:
                    raise Unreachable("the sidecar closed the connection before answering") from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise Unreachable(f"the connection to the sidecar broke ({exc!r})") from exc
        finally:
            self._pending.pop(request_id, None)
            send.close()
        if reply.get("ok"):
            return reply.get("result") or {}
        raise from_wire(reply.get("error") or {})


class BlockingClient:
    """Calls one at a time on one connection, each waiting for its reply; pushed events are skipped."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._reader = sock.makefile("rb")
        self._ids = itertools.count(1)

    @classmethod
    @contextlib.contextmanager
    def open(cls, paths: StatePaths | None = None, *, autostart: bool = True) -> Iterator[BlockingClient]:
        sock = None
        quick = socket_path_from_env() if paths is None else None
        if quick is not None:  # HIVE_HOME names the folder: try its socket before pathlib is loaded
            with contextlib.suppress(OSError):
                sock = _connect_blocking(quick)
        if sock is None:
            sock = connect_or_start_blocking(paths or state_paths(), autostart)
        client = cls(sock)
        try:
            yield client
        finally:
            client._reader.close()
            sock.close()

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Send one request and wait for its reply. Raises the HiveError the sidecar reported."""
        request_id = next(self._ids)
        data = (
            json.dumps({"id": request_id, "op": op, **args}, separators=(",", ":"), ensure_ascii=False) + "\n"
        ).encode()
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise Unreachable(f"the connection to the sidecar broke ({exc!r})") from exc
        while True:
            try:
                line = self._reader.readline()
            except OSError:
                line = b""  # a reset connection ends like a closed one, as in Client's read loop
            if not line.endswith(b"\n"):
                raise Unreachable("the sidecar closed the connection before answering")
            reply = json.loads(line)
            if "event" not in reply and reply.get("id") == request_id:
                break
        if reply.get("ok"):
            return reply.get("result") or {}
        raise from_wire(reply.get("error") or {})


async def call(op: str, paths: StatePaths | None = None, *, autostart: bool = True, **args: Any) -> dict[str, Any]:
    """One request on a fresh connection."""
    async with Client.open(paths, autostart=autostart) as client:
        return await client.call(op, **args)


__all__ = [
    "BlockingClient",
    "Client",
    "HiveError",
    "call",
    "connect_or_start",
    "connect_or_start_blocking",
    "start_detached",
]
