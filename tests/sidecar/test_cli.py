"""The ``hive`` command line as a person meets it: conventions, help, tables and mail for people."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from hive.sidecar import __version__
from hive.sidecar.cli.main import PLUMBING, build_parser
from tests.conftest import Hive, run_in_terminal

MESH = '[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n'


def _hive(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hive.sidecar.cli", *args], capture_output=True, text=True, timeout=60)


def _commands() -> dict[str, Any]:
    parser = build_parser()
    [commands] = [a for a in parser._actions if a.dest == "command"]
    return dict(commands.choices)


def test_version_and_V_print_the_version() -> None:
    for flag in ("--version", "-V"):
        done = _hive(flag)
        assert done.returncode == 0 and done.stdout.strip() == f"hive {__version__}"


def test_bare_hive_prints_the_help_on_stdout_with_plumbing_apart_and_exits_0() -> None:
    done = _hive()
    assert done.returncode == 0 and done.stderr == ""
    everyday, plumbing = done.stdout.split("\nplumbing", 1)
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ") and line.split()}
    for name in _commands():
        assert name in listed, name
        line = next(line for line in done.stdout.splitlines() if line.split()[:1] == [name])
        assert len(line.split()) > 2, f"{name} has no one-line purpose"
        assert (f"\n  {name} " in plumbing) == (name in PLUMBING), name
    assert "\n  who " in everyday and "\n  sidecar " not in everyday
    assert max(len(line) for line in done.stdout.splitlines()) <= 100


def test_a_usage_error_exits_1_and_says_how_to_get_help() -> None:
    for args in (("bogus",), ("send",), ("who", "--no-such-flag")):
        done = _hive(*args)
        assert done.returncode == 1, args
        assert done.stderr.startswith("usage: hive") and "--help" in done.stderr


def test_every_option_metavar_reads_as_a_word() -> None:
    seen: list[str] = []

    def walk(parser: Any) -> None:
        text = parser.format_help()
        seen.append(text)
        for action in parser._actions:
            if isinstance(action.choices, dict):
                for sub in action.choices.values():
                    walk(sub)

    walk(build_parser())
    helps = "\n".join(seen)
    assert not re.findall(r"--[a-z-]+ [A-Z-]*_", helps)
    assert "--as NAME" in helps and "--reply-to ID" in helps and "--wait SECONDS" in helps


def test_who_clips_long_cells_to_fit_100_columns(make_hive: Any) -> None:
    hive: Hive = make_hive(MESH)
    hive.start()
    deep = hive.home / ("a-very-long-folder-name-for-a-repository-" * 2)
    deep.mkdir()
    reply = hive.request(
        {
            "id": 1,
            "op": "register",
            "session": {
                "key": "k1",
                "agent": "claude-code",
                "cwd": str(deep),
                "name": "refactoring-the-billing-service-" * 2,
            },
        }
    )
    assert reply["ok"], reply
    hive.request({"id": 2, "op": "set_status", "session": "k1", "doing": "migrating every invoice table " * 5})
    lines = hive.cli("who", check=True).stdout.splitlines()
    assert len(lines) == 2 and all(len(line) <= 100 for line in lines), lines
    assert "…" in lines[1] and lines[1].split()[0].startswith("alice/refactoring-the-bill")


def test_sent_says_when_nothing_was_sent_and_its_rows_fit_100_columns(make_hive: Any) -> None:
    hive: Hive = make_hive(MESH)
    hive.start()
    empty = hive.cli("sent", check=True)
    assert "no messages sent" in empty.stdout
    reply = hive.request(
        {"id": 1, "op": "register", "session": {"key": "k1", "agent": "codex", "cwd": str(hive.home), "name": "x" * 90}}
    )
    address = reply["result"]["address"]
    assert len(address) > 60
    sent = hive.cli_json("send", address, "hello")
    [row] = hive.cli("sent", check=True).stdout.splitlines()
    assert len(row) <= 100 and row.startswith(sent["results"][0]["id"])


def test_inbox_at_a_terminal_shows_mail_for_a_person_and_raw_shows_the_frames(make_hive: Any, tmp_path: Path) -> None:
    hive: Hive = make_hive(MESH)
    hive.start()
    attached = tmp_path / "trace.log"
    attached.write_text("401 at refresh\n")
    sent = subprocess.run(
        [
            sys.executable,
            "-m",
            "hive.sidecar.cli",
            "send",
            "--file",
            "trace.log",
            "alice/terminal",
            "the refresh token expires early",
        ],
        env=hive.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sent.returncode == 0, sent.stderr
    code, shown = run_in_terminal(hive, "inbox", "--peek")
    assert code == 0
    assert "from alice/terminal" in shown and "the refresh token expires early" in shown
    assert "trace.log" in shown and "hive send alice/terminal --reply-to" in shown
    assert "<hive-message" not in shown and "send_message" not in shown
    code, raw = run_in_terminal(hive, "inbox", "--raw")
    assert code == 0 and "<hive-message" in raw and "the refresh token expires early" in raw


def test_inbox_piped_still_gives_the_frames_agents_read(make_hive: Any) -> None:
    hive: Hive = make_hive(MESH)
    hive.start()
    hive.cli("send", "alice/terminal", "ping", check=True)
    out = hive.cli("inbox", check=True).stdout
    assert "<hive-message" in out and "ping" in out


def test_inbox_wait_at_a_terminal_says_it_is_waiting(make_hive: Any) -> None:
    hive: Hive = make_hive(MESH)
    hive.start()
    code, shown = run_in_terminal(hive, "inbox", "--wait", "0.5")
    assert code == 0
    assert "waiting up to 0.5 s for mail to alice/terminal" in shown and "no unread messages" in shown
    piped = hive.cli("inbox", "--wait", "0.5", check=True)
    assert "waiting" not in piped.stderr


def test_an_error_shown_to_a_person_names_the_command_while_agents_still_get_the_tool(make_hive: Any) -> None:
    hive: Hive = make_hive(MESH)
    hive.start()
    done = hive.cli("send", "alice/nobody", "hi")
    assert done.returncode == 1 and "[not_found]" in done.stderr
    assert "`hive who`" in done.stderr and "list_team" not in done.stderr
    reply = hive.request({"id": 1, "op": "send", "to": "alice/nobody", "body": "hi"})
    assert reply["error"]["code"] == "not_found" and "list_team" in reply["error"]["message"]
