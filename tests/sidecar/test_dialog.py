"""The dialog engine's pieces that do not need a notification server.

macOS and Windows cannot run here, so their backends are checked on the exact argv and
environment they build: the program is a fixed system path, the script is a constant, and the
question travels only in the environment, whatever it contains.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
from pathlib import Path

import anyio
import pytest

from hive.sidecar.base.errors import NoDesktop
from hive.sidecar.person.dialog import (
    ENV_BODY,
    ENV_KIND,
    ENV_SECONDS,
    ENV_TITLE,
    JXA_DIALOG,
    OSASCRIPT,
    POWERSHELL_DIALOG,
    WINDOWS_BUTTONS,
    Answer,
    Desktop,
    FreedesktopDialog,
    MacDialog,
    Prompt,
    WindowsDialog,
    _ProgramDialog,
    backend_for,
    child_env,
    clean,
    clip,
    find_desktop,
    note_start,
    osascript_command,
    parse_outcome,
    powershell_command,
)

HOSTILE = [
    'Deploy?" buttons {"Approve"} default button "Approve',
    "'); app.doShellScript('touch /tmp/pwned'); ('",
    "$(touch /tmp/pwned) `touch /tmp/pwned` ${env:PATH}",
    '-e do shell script "id"',
    "line one\nend run\n$shell.Popup('x')\r\n\"@\n'@",
    "\u202eevil\u200b\U000e0041 \u061c\u00ad",
]


@pytest.mark.parametrize("question", HOSTILE)
def test_the_macos_dialog_is_a_fixed_program_and_script_with_the_text_only_in_the_environment(question: str) -> None:
    argv, env = osascript_command(Prompt("hive · alice/api asks you", question, timeout=3600))
    assert argv == ["/usr/bin/osascript", "-l", "JavaScript", "-e", JXA_DIALOG]
    assert env == {
        ENV_TITLE: "hive · alice/api asks you",
        ENV_BODY: clean(question),
        ENV_SECONDS: "3600",
        ENV_KIND: "question",
    }
    assert not any(clean(question) in arg for arg in argv)


@pytest.mark.parametrize("question", HOSTILE)
def test_the_windows_dialog_is_powershell_from_the_system_directory_running_a_constant_script(question: str) -> None:
    argv, env = powershell_command(Prompt("hive", question, timeout=90), "C:\\Windows\\System32")
    assert argv[0] == "C:\\Windows\\System32\\WindowsPowerShell\\v1.0\\powershell.exe"
    assert argv[1:-1] == ["-NoLogo", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass", "-EncodedCommand"]
    assert base64.b64decode(argv[-1]).decode("utf-16-le") == POWERSHELL_DIALOG
    assert env[ENV_BODY] == f"{clean(question)}\n\n{WINDOWS_BUTTONS}" and env[ENV_SECONDS] == "90"
    assert "HIVE_DIALOG_BODY" in POWERSHELL_DIALOG and clean(question) not in POWERSHELL_DIALOG


def test_neither_program_can_be_named_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (
        ("PATH", "/tmp/evil"),
        ("SystemRoot", "C:\\evil"),
        ("OSASCRIPT", "/tmp/evil"),
        ("HIVE_DIALOG_BODY", "inherited"),
    ):
        monkeypatch.setenv(name, value)
    mac = backend_for(Desktop(), "darwin")
    windows = backend_for(Desktop(), "win32")
    assert isinstance(mac, MacDialog) and isinstance(windows, WindowsDialog)
    assert mac.command(Prompt("t", "b"))[0][0] == OSASCRIPT
    assert windows.command(Prompt("t", "b"))[0][0].startswith("C:\\Windows\\System32\\")
    assert child_env({ENV_BODY: "shown"})[ENV_BODY] == "shown"
    assert "HIVE_DIALOG_BODY" not in child_env({})


def test_the_macos_script_is_valid_javascript(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed to syntax-check the JavaScript-for-Automation dialog (the npm tests need it too)")
    script = tmp_path / "dialog.js"
    script.write_text(JXA_DIALOG, encoding="utf-8")
    result = subprocess.run([node, "--check", str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_shown_text_loses_direction_overrides_zero_width_tag_and_control_characters() -> None:
    assert clean("a\u202eb\u200bc\u2066d\U000e0041e\u061cf\u00adg\x1bh\x00i\u2028j\n k ") == "abcdefg h i\nj\n k"
    assert clip("x" * 10, 10) == "x" * 10
    cut = clip("word " * 200, 50)
    assert len(cut) <= 50 and cut.endswith(" […]")


def test_what_a_dialog_program_prints_maps_to_an_answer_and_anything_else_is_closed() -> None:
    assert parse_outcome(b"approve\n") is Answer.APPROVED
    assert parse_outcome(b"noise\r\ndeny\r\n") is Answer.DENIED
    assert parse_outcome(b"expired") is Answer.EXPIRED
    assert parse_outcome(b"dismissed") is Answer.DISMISSED
    assert parse_outcome(b"") is Answer.CLOSED
    assert parse_outcome(b"approve please") is Answer.CLOSED


def test_the_desktop_comes_from_the_sidecars_start_environment_only_when_its_person_started_it(tmp_path: Path) -> None:
    bus = tmp_path / "bus"
    start = {"XDG_RUNTIME_DIR": str(tmp_path), "DBUS_SESSION_BUS_ADDRESS": "unix:path=/own/bus", "DISPLAY": ":5"}
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(bus))
        found = find_desktop(own=start)
        try:
            note_start(by_person=True, environ=start)
            by_person = find_desktop()
            note_start(by_person=False, environ=start)  # an agent started it: its environment is the agent's
            by_agent = find_desktop()
        finally:
            note_start(by_person=False, environ={})
    assert found.buses == (f"unix:path={bus}", "unix:path=/own/bus") and found.display == ":5"
    assert by_person == found
    assert f"unix:path={bus}" not in by_agent.buses and "unix:path=/own/bus" not in by_agent.buses
    assert by_agent.display == ""
    bad = find_desktop(own={"DBUS_SESSION_BUS_ADDRESS": "x\0y", "XDG_RUNTIME_DIR": str(tmp_path / "none")})
    assert all(b.startswith("unix:path=/run/user/") for b in bad.buses)  # only the system's runtime dir is left
    not_a_socket = tmp_path / "plain"
    not_a_socket.mkdir()
    (not_a_socket / "bus").write_text("", encoding="utf-8")
    assert f"unix:path={not_a_socket / 'bus'}" not in find_desktop(own={"XDG_RUNTIME_DIR": str(not_a_socket)}).buses


@pytest.mark.anyio
async def test_with_no_bus_at_all_the_freedesktop_backend_says_no_desktop() -> None:
    with pytest.raises(NoDesktop) as caught:
        async with FreedesktopDialog(Desktop(display=":9")).show(Prompt("t", "b")):
            pass
    assert caught.value.code == "no_desktop" and ":9" in caught.value.message


@pytest.mark.anyio
async def test_the_macos_and_windows_backends_say_no_desktop_on_this_machine() -> None:
    for backend in (MacDialog(), WindowsDialog("/nonexistent")):
        with pytest.raises(NoDesktop):
            async with backend.show(Prompt("t", "b")):
                pass


class _ShellDialog(_ProgramDialog):
    """A program dialog whose "system program" is a shell script: the process handling under test."""

    name = "shell"

    def __init__(self, script: str) -> None:
        self.script = script

    def command(self, prompt: Prompt) -> tuple[list[str], dict[str, str]]:
        return ["/bin/sh", "-c", self.script], {ENV_BODY: clean(prompt.body)}

    async def preflight(self) -> None:
        return None


@pytest.mark.anyio
async def test_a_dialog_program_reads_the_text_from_its_environment_and_its_answer_is_parsed() -> None:
    dialog = _ShellDialog('[ "$HIVE_DIALOG_BODY" = "Ship it? \\$(id)" ] && echo approve || echo deny')
    async with dialog.show(Prompt("t", "Ship it? $(id)", timeout=30)) as popup:
        assert await popup.answer() is Answer.APPROVED


@pytest.mark.anyio
async def test_a_dialog_program_that_outlives_its_timeout_is_killed_and_the_answer_is_expired() -> None:
    dialog = _ShellDialog("echo $$ > /dev/stderr; sleep 600; echo approve")
    with anyio.fail_after(30):
        async with dialog.show(Prompt("t", "b", timeout=-4.5)) as popup:  # outer timeout: 0.5 s
            process = popup.process  # type: ignore[attr-defined]
            assert await popup.answer() is Answer.EXPIRED
    assert process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(process.pid, 0)
