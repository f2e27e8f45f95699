"""A harness's interactive TUI in tmux, the way a person runs it: typed into, read off the screen.

Each TUI gets a private tmux server (its own socket under the test's folder), started with the
machine's environment, so nothing leaks into or out of a person's own tmux. ``stop`` kills the
server, which ends the TUI with a hangup.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import on_failure

from .conftest import wait_for


class Tui:
    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.last = ""  # the screen as it was when the TUI was stopped
        on_failure(f"TUI screen ({socket})", lambda: self.last or self.screen())

    def tmux(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args], env=env, capture_output=True, text=True, timeout=30
        )

    def start(self, argv: list[str], cwd: Path, env: dict[str, str], width: int = 160, height: int = 50) -> None:
        if shutil.which("tmux") is None:
            pytest.fail("tmux is not installed; .ci/apt-packages lists it (run `bash .ci/run`)")
        # The shell line keeps the pane open after the TUI exits, so a failure stays readable.
        line = f"{shlex.join(argv)}; echo TUI-EXITED $?; sleep 600"
        env = {**env, "PWD": str(cwd)}  # as a shell sets it; opencode goes by $PWD, not its cwd
        done = self.tmux(
            "new-session", "-d", "-s", "main", "-x", str(width), "-y", str(height), "-c", str(cwd), line, env=env
        )
        assert done.returncode == 0, f"tmux new-session failed: {done.stderr}"

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "main").stdout

    def type(self, text: str, timeout: float = 30) -> None:
        """Type ``text`` literally, then Enter once the TUI shows it, as a person would.

        Enter goes only after the text is on the screen: a TUI may take text and Enter arriving
        together as a paste, and one still starting drops keys sent before it reads input, so
        text that does not show within a few seconds is typed again."""
        deadline = time.monotonic() + timeout
        while True:
            self.tmux("send-keys", "-t", "main", "-l", text)
            try:
                self.wait_screen(text, timeout=min(5.0, max(deadline - time.monotonic(), 0.1)))
                break
            except AssertionError:
                if time.monotonic() >= deadline:
                    raise
                if text in self.screen():
                    break
        self.tmux("send-keys", "-t", "main", "Enter")

    def wait_screen(self, needle: str, timeout: float = 30) -> str:
        try:
            return wait_for(lambda: needle in (s := self.screen()) and s, timeout=timeout, what=f"{needle!r}")
        except AssertionError as exc:
            raise AssertionError(f"{exc} on the screen, which shows:\n{self.screen()}") from None

    def stop(self) -> None:
        self.last = self.screen() or self.last
        self.tmux("kill-server")
