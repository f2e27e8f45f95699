"""A real desktop for pop-up tests: Xvfb, a private session bus and dunst, and ways to click.

dunst cannot be told to invoke a *named* action, so a click goes through its context menu:
``dunstctl context`` pipes lines such as ``#Approve (summary) [7,approve]`` to the program set as
``dmenu``, here a small script that prints the line holding the choice this harness wrote to a
file. That is dunst's own code path for a person choosing an action, and it emits the real
``ActionInvoked`` signal from the server's unique name.

Nothing here is skipped: a machine without the packages in ``.ci/apt-packages`` fails with a
message that names them.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hive.sidecar.person.dialog import DESKTOP_VARIABLES
from tests.conftest import Hive

PROGRAMS = ("Xvfb", "dbus-daemon", "dunst", "dunstctl")
START_TIMEOUT = 10.0

PICKER = """#!/bin/sh
# dunst's context menu: print the first offered line that holds both the pop-up's text the test
# named (empty: any) and the action it chose.
dir=$(dirname "$0")
grep -F -- "$(cat "$dir/which")" | grep -F -- "$(cat "$dir/choice")" | head -n 1
"""

DUNSTRC = """[global]
    dmenu = {picker}
    browser = /bin/true
    mouse_left_click = do_action, close_current
"""


def no_desktop_env(runtime: Path, **extra: str) -> dict[str, str]:
    """This process's environment with no way to a desktop: no bus, no display, an empty runtime dir.

    Tests must never reach the developer's own desktop, and the sidecar falls back to the
    runtime directory's bus, so that directory is replaced too.
    """
    env = {k: v for k, v in os.environ.items() if k not in DESKTOP_VARIABLES}
    env["XDG_RUNTIME_DIR"] = str(runtime)
    env.update(extra)
    return env


@dataclass
class Desktop:
    """A running Xvfb + session bus + dunst."""

    root: Path
    runtime: Path  # the XDG_RUNTIME_DIR whose `bus` is the session bus
    bus: str
    display: str

    @property
    def env(self) -> dict[str, str]:
        """An environment inside this desktop (as a terminal on it would have)."""
        return no_desktop_env(self.runtime, DBUS_SESSION_BUS_ADDRESS=self.bus, DISPLAY=self.display)

    def dunstctl(self, *args: str) -> str:
        result = subprocess.run(["dunstctl", *args], env=self.env, capture_output=True, text=True, timeout=10)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def displayed(self) -> int:
        return int(self.dunstctl("count", "displayed") or 0)

    def wait_displayed(self, count: int = 1, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.displayed() < count:
            assert time.monotonic() < deadline, f"dunst never displayed {count} notification(s)"
            time.sleep(0.02)

    def click(self, action: str, which: str = "") -> None:
        """Choose ``approve`` or ``deny`` as a person would through the menu; ``which`` picks the
        pop-up whose title contains it when several are up."""
        self.wait_displayed()
        (self.root / "which").write_text(which, encoding="utf-8")
        (self.root / "choice").write_text(f",{action}]", encoding="utf-8")
        self.dunstctl("context")

    def close(self) -> None:
        """Dismiss the pop-up on screen (the person closes it)."""
        self.wait_displayed()
        self.dunstctl("close")

    def history(self) -> str:
        return self.dunstctl("history")


def _require_programs() -> None:
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        pytest.fail(
            f"the pop-up tests need {', '.join(missing)}: install the Debian packages listed in "
            ".ci/apt-packages (xvfb, dbus, dunst, …); .ci/run does this",
            pytrace=False,
        )


def _read_fd_line(fd: int, what: str, process: subprocess.Popen[Any]) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(remaining, 0))
        if not ready:
            pytest.fail(f"{what} did not start within {START_TIMEOUT:g} s", pytrace=False)
        chunk = os.read(fd, 4096)
        if not chunk:
            pytest.fail(f"{what} exited at start (code {process.poll()})", pytrace=False)
        data += chunk
    return data.decode().strip()


def _name_has_owner(bus: str, name: str) -> bool:
    from jeepney.bus_messages import message_bus
    from jeepney.io.blocking import open_dbus_connection

    with open_dbus_connection(bus=bus) as conn:
        reply = conn.send_and_get_reply(message_bus.NameHasOwner(name), timeout=5)
    return bool(reply.body[0])


@contextlib.contextmanager
def running_desktop() -> Iterator[Desktop]:
    _require_programs()
    root = Path(tempfile.mkdtemp(prefix="hive-desk-", dir="/tmp"))
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    picker = root / "pick.sh"
    picker.write_text(PICKER, encoding="utf-8")
    picker.chmod(0o755)
    (root / "choice").write_text("", encoding="utf-8")
    (root / "which").write_text("", encoding="utf-8")
    (root / "dunstrc").write_text(DUNSTRC.format(picker=picker), encoding="utf-8")
    processes: list[subprocess.Popen[Any]] = []
    logs = []

    def log(name: str) -> Any:
        handle = open(root / f"{name}.log", "wb")  # closed at teardown
        logs.append(handle)
        return handle

    try:
        # Xvfb picks a free display number itself and writes it to -displayfd.
        read_fd, write_fd = os.pipe()
        xvfb = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
            pass_fds=(write_fd,),
            stdout=log("xvfb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        processes.append(xvfb)
        os.close(write_fd)
        try:
            display = ":" + _read_fd_line(read_fd, "Xvfb", xvfb)
        finally:
            os.close(read_fd)

        read_fd, write_fd = os.pipe()
        bus_daemon = subprocess.Popen(
            [
                "dbus-daemon",
                "--session",
                "--nofork",
                "--nopidfile",
                f"--address=unix:path={runtime / 'bus'}",
                f"--print-address={write_fd}",
            ],
            pass_fds=(write_fd,),
            stdout=log("dbus"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        processes.append(bus_daemon)
        os.close(write_fd)
        try:
            bus = _read_fd_line(read_fd, "dbus-daemon", bus_daemon)
        finally:
            os.close(read_fd)

        desktop = Desktop(root=root, runtime=runtime, bus=bus, display=display)
        dunst = subprocess.Popen(
            ["dunst", "-config", str(root / "dunstrc")],
            env=desktop.env,
            stdout=log("dunst"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        processes.append(dunst)
        deadline = time.monotonic() + START_TIMEOUT
        while not _name_has_owner(bus, "org.freedesktop.Notifications"):
            if dunst.poll() is not None or time.monotonic() > deadline:
                output = (root / "dunst.log").read_text(errors="replace")
                pytest.fail(f"dunst did not take org.freedesktop.Notifications: {output[-2000:]}", pytrace=False)
            time.sleep(0.02)
        yield desktop
    finally:
        for process in reversed(processes):
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        for process in reversed(processes):
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for handle in logs:
            handle.close()
        shutil.rmtree(root, ignore_errors=True)


def start_sidecar(hive: Hive, env: dict[str, str]) -> None:
    """Start ``hive``'s sidecar with exactly ``env`` (as a hook or service would, with or without a desktop)."""
    result = subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", "status", "--json"],
        env={**env, "HIVE_HOME": str(hive.home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
