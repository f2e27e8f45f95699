"""mDNS discovery between two "machines" in two network namespaces joined by a veth pair.

Each sidecar runs inside its own namespace (``ip netns exec``) and advertises ``_hive._udp``
on every interface it has there (loopback and its end of the veth: nothing leaves the host).
The test talks to both over their unix sockets, which namespaces do not separate. After the
team forms through the invite link, both forget every address they knew and the first one
moves to a new port: only mDNS can bring them back together.

Needs root and ``ip``; skipped otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import Hive

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="network namespaces need root and iproute2"
)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str]]:
    tag = uuid.uuid4().hex[:6]
    a, b = f"hive-a-{tag}", f"hive-b-{tag}"
    _ip("netns", "add", a)
    _ip("netns", "add", b)
    try:
        _ip("link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}")
        _ip("link", "set", f"va{tag}", "netns", a)
        _ip("link", "set", f"vb{tag}", "netns", b)
        for ns, dev, address in ((a, f"va{tag}", "198.18.0.1/24"), (b, f"vb{tag}", "198.18.0.2/24")):
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", address, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up", "multicast", "on")
        yield a, b
    finally:
        for ns in (a, b):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", ns)


class NamespacedHive(Hive):
    """A sidecar run in the foreground inside a network namespace."""

    namespace: str = ""
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        env = {**self.env, "HIVE_KEYRING": "off"}
        stderr = os.open(self.home / "sidecar.stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", self.namespace, sys.executable, "-m", "hive.sidecar"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        finally:
            os.close(stderr)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._listening():
                return self.pid()
            time.sleep(0.1)
        raise AssertionError((self.home / "sidecar.stderr").read_text())

    def _listening(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(self.paths.socket))
            except OSError:
                return False
        return True

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None


def _ok(hive: Hive, op: str, **args: Any) -> dict[str, Any]:
    reply = hive.request({"id": 1, "op": op, **args}, timeout=30)
    assert reply["ok"], reply
    return reply["result"]


def _wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _forget_addresses(hive: Hive) -> None:
    with sqlite3.connect(hive.paths.database) as db:
        db.execute("DELETE FROM kv WHERE key = 'mesh.addresses' OR key = 'mesh.port' OR key LIKE 'mesh.presence.%'")


def test_two_machines_in_separate_namespaces_find_each_other_over_mdns(namespaces: tuple[str, str]) -> None:
    machines: list[NamespacedHive] = []
    try:
        for index, (ns, person) in enumerate(zip(namespaces, ("alice", "bob"), strict=True)):
            home = Path(tempfile.mkdtemp(prefix="hive-ns-", dir="/tmp"))
            (home / "config.toml").write_text(
                f'person = "{person}"\nmachine = "m{index + 1}"\n[mesh]\nlisten = "0.0.0.0:0"\nmdns = true\n',
                encoding="utf-8",
            )
            machine = NamespacedHive(home)
            machine.namespace = ns
            machine.start()
            machines.append(machine)
        alice, bob = machines
        _ok(alice, "team_init", team="acme", person="alice")
        link = _ok(alice, "team_invite")["link"]
        assert _ok(alice, "mesh")["addresses"] == [f"198.18.0.1:{_ok(alice, 'mesh')['listening']}"]
        _ok(bob, "team_join", link=link, person="bob")
        _wait(lambda: len(_ok(alice, "mesh")["links"]) == 1, 30, "the link through the invite")
        old_port = _ok(alice, "mesh")["listening"]

        for machine in machines:
            machine.stop()
            _forget_addresses(machine)
        for machine in machines:
            machine.start()
        assert _ok(alice, "mesh")["listening"] != old_port
        assert _ok(bob, "mesh")["links"] == {}
        _wait(lambda: len(_ok(bob, "mesh")["links"]) == 1, 60, "discovery over mDNS")
        assert len(_ok(alice, "mesh")["links"]) == 1
        logs = "".join((m.home / "sidecar.log").read_text() for m in machines)
        assert "found over mDNS" in logs
    finally:
        for machine in machines:
            machine.stop()
            shutil.rmtree(machine.home, ignore_errors=True)
