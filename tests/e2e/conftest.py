"""Fixtures for the end-to-end tests: a loopback-only network, a harness machine wired by the
real ``hive setup``, a teammate's machine in the same team, and the scripted model.

Each test runs in its own network namespace that holds only loopback (the test process's main
thread enters it, so the model server, both sidecars and the harness all live there and nothing
can leave the machine). Without the privilege to make one, the test runs on the host's loopback
and says so in its report line.

The harness machine is alice's: its own HOME and XDG folders, the harness's telemetry and update
checks off, hive wired by ``hive setup --only <harness>``, and its hive state folder at the
platform default inside that HOME (``$XDG_DATA_HOME/hive``), also named by ``HIVE_HOME``: Codex
starts MCP servers with a filtered environment, and the default location keeps ``hive mcp`` on
the same sidecar as the hooks anyway. The teammate is bob, on a second sidecar in the same team
(``hive init`` / ``hive invite`` / ``hive join``, QUIC on 127.0.0.1), with one registered
session that sends and receives mail.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import REPO, Hive, loopback_config, on_failure, sidecar_logs
from tests.installer.conftest import CLIS, LATEST, NPM_BIN, Machine, preinstall_opencode_plugin, require_cli

from .model_server import ModelServer, Script

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
MESH = '[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n'
# Shown but unconfirmed mail comes back after this long (90 s by default): the kill tests wait it out.
INFLIGHT = 3.0
TEAMMATE_KEY = "bob-web-session"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here is an end-to-end test: ``-m "not e2e"`` is the quick local loop without them."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.e2e)


def wait_for(check: Callable[[], T], timeout: float = 30, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


# ---- the network -----------------------------------------------------------------------------------


def _loopback_up() -> None:
    """``ip link set lo up``, without needing iproute2: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, 0x8913, request)[:18])[1]
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH", b"lo", flags | 0x1))


@contextlib.contextmanager
def loopback_only() -> Iterator[str]:
    """Move this thread (and every process and thread it starts) into a new network namespace
    holding only loopback; move it back afterwards. Yields where the test runs, for its report."""
    libc = ctypes.CDLL(None, use_errno=True)
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            yield f"host loopback (no network namespace: {os.strerror(ctypes.get_errno())})"
            return
        try:
            _loopback_up()
            yield "own network namespace, loopback only"
        finally:
            if libc.setns(original, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "cannot return to the original network namespace")
    finally:
        os.close(original)


@pytest.fixture
def network() -> Iterator[str]:
    with loopback_only() as where:
        yield where


# ---- versions and contracts ---------------------------------------------------------------------------


# Claude Code changes fastest, so its tests run on the pinned version and on the current release
# (.ci/npm-packages-current, installed into .cache/npm-current by .ci/run). With HIVE_E2E_LATEST=1
# .cache/npm holds the latest release of every harness (see tests/installer/conftest.py) and
# there is one version to test.
CURRENT_NPM_BIN = REPO / ".cache" / "npm-current" / "node_modules" / ".bin"
CLAUDE_VERSIONS = ("latest",) if LATEST else ("pinned", "current")
SELECTED: dict[str, Path] = {}  # harness -> the binary this test runs, set by the claude_cli fixture


def cli(harness: str) -> Path:
    """The binary of ``harness`` this test runs: the one its version fixture chose, else the pinned one."""
    return SELECTED.get(harness) or require_cli(harness)


def current_pin(package: str) -> str:
    specs = (REPO / ".ci" / "npm-packages-current").read_text(encoding="utf-8").split()
    return next((s.rpartition("@")[2] for s in specs if s.rpartition("@")[0] == package), "?")


@pytest.fixture(params=CLAUDE_VERSIONS)
def claude_cli(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The Claude Code binary of this test's version; fails (never skips) when it is not installed."""
    if request.param != "current":
        binary = require_cli("claude-code")
    else:
        binary = CURRENT_NPM_BIN / "claude"
        if not binary.exists():
            package = CLIS["claude-code"][1]
            pytest.fail(
                f"claude-code: {package}@{current_pin(package)} is not installed ({binary} missing); "
                "run `bash .ci/run`, or `grep -v '^#' .ci/npm-packages-current | xargs npm install "
                "--prefix .cache/npm-current`"
            )
    monkeypatch.setitem(SELECTED, "claude-code", binary)
    return binary


@cache
def _version_of(binary: Path) -> str:
    try:
        done = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "NO_COLOR": "1"},
            start_new_session=True,
        )
        printed = (done.stdout or done.stderr).strip().splitlines()
        return printed[0] if printed else f"(exit {done.returncode}, nothing printed)"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(version probe failed: {exc})"


def cli_version(harness: str) -> str:
    """What ``<cli> --version`` prints, for every assertion message about that harness."""
    return _version_of(cli(harness))


def contract(harness: str) -> str:
    """``"claude-code (`claude --version`: 2.1.197 (Claude Code); pinned 2.1.197)"``."""
    binary, _, pinned = CLIS[harness]
    return f"{harness} (`{binary} --version`: {cli_version(harness)}; pinned {pinned})"


# ---- alice's machine, where the harness runs --------------------------------------------------------------


class HarnessMachine(Machine):
    """A machine from the installer tests' fixture, with hive's state at its platform default."""

    @property
    def state(self) -> Path:
        return self.home / ".local" / "share" / "hive"

    def env(self, **extra: str) -> dict[str, str]:
        # These tests assert what reached the model, not how fast: with two workers on two cores a
        # hook can miss the 150 ms budget (then it answers no-opinion and the mail waits for the
        # next hook), which would fail a delivery check for a timing reason. The budget itself is
        # bench_hook's figure and test_hook's deadline tests; a hung sidecar still costs a turn
        # nothing (hung_sidecar).
        return super().env(HIVE_KEYRING="off", HIVE_HOOK_DEADLINE_MS=self.hook_deadline_ms, **extra)

    hook_deadline_ms = "2000"  # "" is the shipped default (hung_sidecar measures with that)

    @property
    def hive_raw(self) -> Hive:
        """The same state folder, for raw protocol requests."""
        return Hive(self.state)

    def ok(self, op: str, **args: Any) -> dict[str, Any]:
        reply = self.hive_raw.request({"id": 1, "op": op, **args}, timeout=30)
        assert reply["ok"], reply
        return reply["result"]

    def session_of(self, agent: str) -> dict[str, Any] | None:
        """The live session of ``agent`` on this machine, as ``who`` shows it."""
        return next(
            (
                s
                for s in self.ok("who", all=True)["sessions"]
                if s["agent"] == agent and s["machine"] == "m1" and s["live"]
            ),
            None,
        )


@dataclass
class Team:
    """alice's harness machine and bob's machine, linked in one team."""

    machine: HarnessMachine
    bob: Hive

    def bob_ok(self, op: str, **args: Any) -> dict[str, Any]:
        reply = self.bob.request({"id": 1, "op": op, **args}, timeout=30)
        assert reply["ok"], reply
        return reply["result"]

    @property
    def bob_address(self) -> str:
        return "bob/web-codex"

    def send_from_bob(self, to: str, body: str, fyi: bool = False) -> dict[str, Any]:
        """bob's session sends ``body`` to ``to`` (an address bob's sidecar sees)."""
        wait_for(
            lambda: any(s["address"] == to for s in self.bob_ok("who")["sessions"]),
            timeout=30,
            what=f"bob's sidecar to see {to}",
        )
        result = self.bob_ok("send", to=to, body=body, fyi=fyi, **{"from": TEAMMATE_KEY})["results"][0]
        # Across the mesh: the message is in alice's mailbox once her sidecar acked it.
        wait_for(
            lambda: not self.bob_ok("sent", ids=[result["id"]])["messages"][0].get("in_outbox"),
            timeout=30,
            what="alice's sidecar to take the message",
        )
        return result

    def bob_state(self, message_id: str) -> str:
        """``queued`` until alice's side confirmed the message (the read receipt), then ``read``."""
        return self.bob_ok("sent", ids=[message_id])["messages"][0]["state"]

    def bob_inbox(self) -> list[dict[str, Any]]:
        return self.bob_ok("inbox", session=TEAMMATE_KEY, peek=True)["messages"]

    def alice_unread(self, address: str) -> list[str]:
        """Ids of unread mail for one of alice's sessions, in flight or not."""
        return [m["id"] for m in self.machine.ok("inbox", session=address, peek=True)["messages"]]


def _new_machine() -> HarnessMachine:
    # Under /tmp with a short name: the sidecar's socket lives in the state folder.
    root = Path(tempfile.mkdtemp(prefix="hive-e2e-", dir="/tmp"))
    machine = HarnessMachine(root, with_clis=True)
    machine.project.mkdir(parents=True)
    machine.state.mkdir(parents=True, mode=0o700)
    (machine.state / "config.toml").write_text(
        loopback_config(f'person = "alice"\nmachine = "m1"\n{MESH}\n[sidecar]\ninflight_timeout = {INFLIGHT}\n'),
        encoding="utf-8",
    )
    sidecar_logs(machine.state)
    return machine


def _stop(hive: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    with contextlib.suppress(Exception):
        hive("stop", timeout=60)


@pytest.fixture(scope="session")
def opencode_plugin() -> Iterator[Path]:
    """opencode's own plugin package, installed once from the npm cache (offline, opencode would
    hang its start-up installing it), for each test to copy into its machine's config folder."""
    root = Path(tempfile.mkdtemp(prefix="hive-e2e-ocp-", dir="/tmp"))
    try:
        template = HarnessMachine(root, with_clis=True)
        (template.home / ".config" / "opencode").mkdir(parents=True)
        preinstall_opencode_plugin(template)
        yield template.home / ".config" / "opencode"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def harness_team(
    harness: str, before_setup: Callable[[HarnessMachine], None] | None = None, opencode_plugin: Path | None = None
) -> Iterator[Team]:
    """alice's machine wired for ``harness`` by ``hive setup``, and bob's machine, in one team.

    ``before_setup`` writes the person's own harness configuration, which setup must keep;
    ``opencode_plugin`` is the folder the ``opencode_plugin`` fixture prepared."""
    require_cli(harness)
    machine = _new_machine()
    bob = Hive(Path(tempfile.mkdtemp(prefix="hive-e2e-bob-", dir="/tmp")))
    (bob.home / "config.toml").write_text(loopback_config(f'person = "bob"\nmachine = "m2"\n{MESH}'), encoding="utf-8")
    sidecar_logs(bob.home)
    try:
        if before_setup is not None:
            before_setup(machine)
        if opencode_plugin is not None:
            shutil.copytree(opencode_plugin, machine.home / ".config" / "opencode", symlinks=True, dirs_exist_ok=True)
        out = machine.setup("--only", harness)
        assert "wire" in out or "wired" in out, f"{contract(harness)}: hive setup said:\n{out}"
        machine.hive("init", "acme", "--as", "alice")
        invite = machine.hive("invite", "--json")
        assert invite.returncode == 0, invite.stderr
        link = json.loads(invite.stdout)["link"]
        joined = bob.cli("join", link, "--as", "bob")
        assert joined.returncode == 0, joined.stderr
        team = Team(machine, bob)
        for side in (team.machine.ok, team.bob_ok):
            wait_for(lambda side=side: len(side("mesh")["links"]) == 1, timeout=30, what="the two sidecars to link")
        team.bob_ok(
            "register",
            session={"key": TEAMMATE_KEY, "agent": "codex", "cwd": "/src/web", "repo": "acme/web", "branch": "main"},
            hold=False,
        )
        yield team
    finally:
        _stop(machine.hive)
        _stop(bob.cli)
        shutil.rmtree(machine.root, ignore_errors=True)
        shutil.rmtree(bob.home, ignore_errors=True)


@pytest.fixture
def keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two machines on one host: each keeps its key in its own state folder (bob's CLI reads os.environ).
    monkeypatch.setenv("HIVE_KEYRING", "off")


@pytest.fixture
def model(network: str) -> Iterator[ModelServer]:
    """The scripted model, listening inside the test's network."""
    with ModelServer(Script()) as server:
        on_failure("the scripted model's requests", server.transcript)
        yield server


__all__ = ["NPM_BIN", "HarnessMachine", "Team", "cli", "contract", "harness_team", "loopback_only", "wait_for"]
