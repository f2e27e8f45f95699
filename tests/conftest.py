"""Fixtures that start real sidecars, each in its own state folder, and talk to them for real."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hive.sidecar.client import start_detached
from hive.sidecar.paths import StatePaths

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Hive:
    """One machine's hive: a state folder, and helpers to run the CLI and raw requests against it."""

    home: Path

    @property
    def paths(self) -> StatePaths:
        return StatePaths(self.home)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "HIVE_HOME": str(self.home)}

    def cli(self, *args: str, input: str | None = None, check: bool = False,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "hive.sidecar.cli", *args], env=self.env, input=input,
            capture_output=True, text=True, timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"hive {' '.join(args)} exited {result.returncode}: {result.stderr}")
        return result

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "--json", check=True).stdout)

    def start(self) -> int:
        assert start_detached(self.paths), (self.home / "sidecar.stderr").read_text()
        return self.pid()

    def pid(self) -> int:
        return int(self.paths.lock.read_text().strip())

    def request(self, payload: dict[str, Any] | bytes, timeout: float = 10) -> dict[str, Any]:
        """One raw request on a fresh connection; returns the reply object."""
        with self.connect(timeout) as conn:
            conn.send_line(payload)
            return conn.read()

    @contextlib.contextmanager
    def connect(self, timeout: float = 10) -> Iterator[RawConnection]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(str(self.paths.socket))
        conn = RawConnection(sock)
        try:
            yield conn
        finally:
            conn.file.close()  # the makefile() reader keeps the socket open otherwise
            sock.close()

    def kill9(self) -> None:
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.01)
        raise AssertionError(f"sidecar {pid} survived SIGKILL")

    def stop(self) -> None:
        self.cli("stop", timeout=30)


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has finished: no such process, or a zombie (a detached sidecar's parent is
    init, which in a container may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


class RawConnection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.file = sock.makefile("rb")

    def send_line(self, payload: dict[str, Any] | bytes) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.sock.sendall(data.rstrip(b"\n") + b"\n")

    def read(self) -> dict[str, Any]:
        line = self.file.readline()
        if not line:
            raise EOFError("the sidecar closed the connection")
        return json.loads(line)


def _short_tempdir(prefix: str) -> Path:
    # Short paths keep the socket inside the state folder (unix socket paths are limited).
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture
def make_hive() -> Iterator[Any]:
    """Factory for fresh machines; every sidecar started is stopped at teardown."""
    created: list[Hive] = []

    def make(config: str = "", person: str = "alice") -> Hive:
        home = _short_tempdir("hive-")
        (home / "config.toml").write_text(f'person = "{person}"\nmachine = "m{len(created) + 1}"\n{config}')
        hive = Hive(home)
        created.append(hive)
        return hive

    yield make
    for hive in created:
        with contextlib.suppress(Exception):
            if hive.paths.socket.exists():
                hive.stop()
        shutil.rmtree(hive.home, ignore_errors=True)


@pytest.fixture
def hive(make_hive: Any) -> Hive:
    """A running sidecar for person alice on machine m1."""
    machine = make_hive()
    machine.start()
    return machine


def run_in_terminal(hive: Hive, *args: str, timeout: float = 30) -> tuple[int, str]:
    """Run the hive CLI as a person would: in a new session whose controlling terminal is a pty."""
    import pty

    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "hive.sidecar.cli", *args], env=hive.env,
        stdin=slave, stdout=slave, stderr=slave, preexec_fn=lambda: os.login_tty(slave),
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    return process.wait(timeout=timeout), output.decode(errors="replace").replace("\r\n", "\n")
