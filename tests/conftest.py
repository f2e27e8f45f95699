"""Fixtures that start real sidecars, each in its own state folder, and talk to them for real."""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import json
import os
import pty
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from hive.sidecar.base.paths import StatePaths
from hive.sidecar.base.peer import proc_stat
from hive.sidecar.client import start_detached

REPO = Path(__file__).resolve().parent.parent


def tracked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True, timeout=60
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


def link_dependencies(venv: Path, wheel: Path, *, keep_out: tuple[str, ...] = ()) -> None:
    """Let a fresh ``venv`` import this venv's dependencies (no network, no second install): each
    top-level entry of this venv's site-packages is linked into the new one, except what ``wheel``
    installs there itself, an editable install's finder, and names starting with ``keep_out``.

    What to leave out comes from the wheel, not from hive's installed metadata: under pytest the
    checkout is on sys.path, and the egg-info a build leaves in it lists source folders, not
    ``hive``. A link to this venv's ``hive`` then let the wheel's install write through it into
    the package every other test was running (a sidecar starting meanwhile found modules missing).
    """
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name.split("/", 1)[0] for name in archive.namelist()}
    for entry in ours.iterdir():
        if entry.name in shipped or entry.name == "__pycache__" or entry.name.startswith(("__editable__", *keep_out)):
            continue
        (theirs / entry.name).symlink_to(entry)
    assert not (theirs / "hive").is_symlink()


def copy_tracked(dest: Path) -> list[str]:
    """Copy the checkout's tracked files into ``dest`` and name them. A build runs in the copy: one
    in the checkout writes build/ and an egg-info there while other tests run from it."""
    tracked = tracked_files()
    for name in tracked:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    return tracked


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# ---- the mesh stays on loopback ------------------------------------------------------------------

LOOPBACK_MESH = {"listen": "127.0.0.1:0", "mdns": False}
# Every process this test run starts inherits this (each xdist worker sets its own), so the guard
# below finds this run's sidecars among every other process on the machine.
RUN_MARK = "HIVE_TEST_RUN"
_HOST_NETNS = ""


def loopback_config(text: str) -> str:
    """A sidecar's config.toml with ``[mesh] listen = "127.0.0.1:0"`` and ``mdns = false`` unless it
    sets them itself: test sidecars never listen on, or multicast from, a real interface."""
    document = tomlkit.parse(text)
    mesh = document.get("mesh")
    if mesh is None:
        document["mesh"] = mesh = tomlkit.table()
    for key, value in LOOPBACK_MESH.items():
        if key not in mesh:
            mesh[key] = value
    return tomlkit.dumps(document)


def pytest_configure(config: pytest.Config) -> None:
    global _HOST_NETNS
    os.environ[RUN_MARK] = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _HOST_NETNS = os.readlink("/proc/self/ns/net")
    at_a_terminal()


PROMPTS = (b"[y/N] ", b"to confirm: ")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def terminal_of_this_process() -> int:
    """The device number of this process's controlling terminal (0: none)."""
    found = proc_stat(os.getpid())
    return found.tty if found else 0


def at_a_terminal() -> None:
    """Run the suite as the person at a terminal of their own, as people run hive.

    hive lets only a command typed at a terminal of the person's own change the team without a
    pop-up (``peer.person_at_terminal``); CI runs the suite with no terminal at all. So the run
    gets one: a new session whose controlling terminal is a pseudo-terminal this process opens,
    which every process a test starts inherits (xdist's workers too). A test that plays a script
    with no terminal starts it in a session of its own (``start_new_session=True``).

    Nobody types at it: a thread reads what is written there and declines every question hive asks
    on it (a person who did not ask for the change), so a command that asks never waits.
    """
    if terminal_of_this_process():
        return  # a terminal already (a developer's, or the controller's that xdist workers inherit)
    master, slave = pty.openpty()
    with contextlib.suppress(PermissionError):  # already leads its process group: see the check below
        os.setsid()
        # Out of its starter's process group, a kill of that group (a CI timeout) would miss the run:
        # it ends with its parent instead.
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    os.close(os.open(os.ttyname(slave), os.O_RDWR))  # a session leader's first terminal becomes its own
    if not terminal_of_this_process():
        raise pytest.UsageError("the suite runs at a terminal and could not get one: run it with `setsid`")

    def decline() -> None:
        said = b""
        while True:
            try:
                said = (said + os.read(master, 4096))[-256:]
            except OSError:
                return
            if said.endswith(PROMPTS):
                os.write(master, b"n\n")
                said = b""

    threading.Thread(target=decline, name="the person's terminal", daemon=True).start()


def _sidecars_of_this_run(nodeid: str, phase: str = "") -> dict[int, Path]:
    """pid -> HIVE_HOME of every live sidecar this test (its setup, body or what they started)
    started: pytest names the running test in PYTEST_CURRENT_TEST, which child processes inherit,
    so a sidecar another test leaked is not blamed on this one."""
    mark = f"{RUN_MARK}={os.environ[RUN_MARK]}".encode()
    started_by = f"PYTEST_CURRENT_TEST={nodeid} ({phase}".encode()
    found: dict[int, Path] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            args = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            if b"hive.sidecar" not in args and not (b"sidecar" in args[-2:] and any(b"hive" in a for a in args)):
                continue
            environ = Path(entry.path, "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in environ and any(v.startswith(started_by) for v in environ):
            home = next((v[len(b"HIVE_HOME=") :] for v in environ if v.startswith(b"HIVE_HOME=")), b"")
            found[int(entry.name)] = Path(home.decode(errors="replace")) if home else Path()
    return found


def _socket_addresses(pid: int) -> dict[int, list[tuple[str, str, int]]]:
    """Local port -> (protocol, address) of each inet socket ``pid`` holds (TCP only when listening)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    out: dict[int, list[tuple[str, str, int]]] = {}
    for proto in ("udp", "udp6", "tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[9] not in inodes or (proto.startswith("tcp") and fields[3] != "0A"):
                continue
            raw, port = fields[1].split(":")
            packed = b"".join(bytes.fromhex(raw[i : i + 8])[::-1] for i in range(0, len(raw), 8))
            address = socket.inet_ntop(socket.AF_INET if len(packed) == 4 else socket.AF_INET6, packed)
            out.setdefault(int(port, 16), []).append((proto, address, int(port, 16)))
    return out


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def _off_loopback(pid: int, home: Path) -> list[str]:
    """What ``pid`` (a sidecar outside any namespace a test made) listens on beyond loopback:
    its mesh listener (the port its ``mesh`` op names) or mDNS (5353)."""
    try:
        if os.readlink(f"/proc/{pid}/ns/net") != _HOST_NETNS:
            return []  # inside a namespace the test made: nothing there reaches a real network
    except OSError:
        return []
    listening = None
    with contextlib.suppress(Exception), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)  # closed whatever happens (a sidecar gone since the scan refuses the connect)
        sock.connect(str(StatePaths(home).socket))
        sock.sendall(b'{"id":1,"op":"mesh"}\n')
        with sock.makefile("rb") as reply:
            listening = json.loads(reply.readline())["result"]["listening"]
    sockets = _socket_addresses(pid)
    bad = [
        f"{proto} {address}:{port}"
        for port in (listening, 5353)
        if port
        for proto, address, _ in sockets.get(port, [])
        if not _is_loopback(address)
    ]
    return bad


# ---- what a failing test shows -------------------------------------------------------------------

_DIAGNOSTICS: dict[str, Callable[[], str]] = {}
TAIL_LINES = 60


def on_failure(title: str, produce: Callable[[], str]) -> None:
    """If this test fails, its report gets a section ``title`` with what ``produce`` returns then
    (a log's tail, a harness's screen, the scripted model's requests); nothing when that is empty."""
    _DIAGNOSTICS.setdefault(title, produce)


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"({path}: {exc.strerror})"
    return "\n".join(text.splitlines()[-lines:]) or f"({path} is empty)"


def sidecar_logs(home: Path) -> None:
    """Show ``home``'s sidecar.log (and sidecar.stderr when it has anything) if the test fails."""
    on_failure(f"sidecar.log {home}", lambda: tail(home / "sidecar.log"))
    on_failure(
        f"sidecar.stderr {home}",
        lambda: (
            (
                (home / "sidecar.stderr").exists()
                and (home / "sidecar.stderr").stat().st_size > 0
                and tail(home / "sidecar.stderr")
            )
            or ""
        ),
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    _DIAGNOSTICS.clear()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """After the test body, while its sidecars still run: each one's log goes into the report if the
    test fails, and one listening beyond loopback fails it."""

    def look() -> list[str]:
        stray = []
        for pid, home in _sidecars_of_this_run(item.nodeid).items():
            if home.parts:
                sidecar_logs(home)
            stray += [f"sidecar {pid} ({home}): {where}" for where in _off_loopback(pid, home)]
        return stray

    try:
        result = yield
    except BaseException:
        look()  # for the logs; the test's own failure is the one to report
        raise
    stray = look()
    if stray:
        pytest.fail(
            "a test sidecar listens beyond loopback (give it loopback_config(), or run it in a "
            "network namespace):\n" + "\n".join(stray),
            pytrace=False,
        )
    return result


@pytest.fixture(autouse=True)
def _no_sidecar_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Torn down after every other fixture of the test: a sidecar its body started (a plugin that
    started one again after its fixture stopped it) is stopped, so none runs on, unwatched."""
    yield
    for pid in _sidecars_of_this_run(request.node.nodeid, phase="call"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        for title, produce in _DIAGNOSTICS.items():
            try:
                text = produce()
            except Exception as exc:  # a diagnostic must never hide the failure it explains
                text = f"(could not be read: {exc!r})"
            if text:
                report.sections.append((title, text))
    return report


ONE_REQUEST = """import socket, sys
with socket.socket(socket.AF_UNIX) as sock:
    sock.connect(sys.argv[1])
    sock.sendall(sys.argv[2].encode() + b"\\n")
    sys.stdout.write(sock.makefile("rb").readline().decode())
"""


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

    def cli(
        self, *args: str, input: str | None = None, check: bool = False, timeout: float = 60, script: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``hive ARGS`` typed at the person's terminal (the suite's: see :func:`at_a_terminal`), or
        with ``script`` run by a script of theirs with no terminal (a session of its own)."""
        result = subprocess.run(
            [sys.executable, "-m", "hive.sidecar.cli", *args],
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=script,
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

    def request_from_script(self, payload: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        """One raw request from a process with no terminal (a script, an agent's MCP server): it runs
        in a session of its own, out of the suite's terminal (see :func:`at_a_terminal`)."""
        done = subprocess.run(
            [sys.executable, "-I", "-c", ONE_REQUEST, str(self.paths.socket), json.dumps({"id": 1, **payload})],
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
            check=True,
        )
        return json.loads(done.stdout)

    @contextlib.contextmanager
    def connect(self, timeout: float = 10) -> Iterator[RawConnection]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(self.paths.socket))
        except BaseException:
            sock.close()  # else it leaks, and warns as unraisable in whichever test runs next
            raise
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
        (home / "config.toml").write_text(
            loopback_config(f'person = "{person}"\nmachine = "m{len(created) + 1}"\n{config}')
        )
        hive = Hive(home)
        created.append(hive)
        sidecar_logs(home)
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
        [sys.executable, "-m", "hive.sidecar.cli", *args],
        env=hive.env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        preexec_fn=lambda: os.login_tty(slave),
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


# ---- where the suite's time goes -----------------------------------------------------------------

# Test seconds (setup, call and teardown) per test folder, summed on the controller from every
# worker's reports, so each CI log carries the per-directory table the suite's speed is judged by.
_SECONDS_BY_FOLDER: dict[str, float] = {}
_TESTS_BY_FOLDER: dict[str, set[str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    folder = str(Path(report.location[0]).parent)
    _SECONDS_BY_FOLDER[folder] = _SECONDS_BY_FOLDER.get(folder, 0.0) + report.duration
    _TESTS_BY_FOLDER.setdefault(folder, set()).add(report.nodeid)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _SECONDS_BY_FOLDER:
        return
    terminalreporter.section("test seconds by folder (summed over workers)")
    for folder, seconds in sorted(_SECONDS_BY_FOLDER.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{folder:<24} {len(_TESTS_BY_FOLDER[folder]):>5} tests {seconds:>9.1f} s")
    terminalreporter.write_line(
        f"{'total':<24} {sum(map(len, _TESTS_BY_FOLDER.values())):>5} tests {sum(_SECONDS_BY_FOLDER.values()):>9.1f} s"
    )
