"""When mail a hook showed counts as seen: only once the model got it.

A hook prints its reply before the harness calls the model, so printing proves nothing. These
tests run the real hook client under a stand-in harness process (the hook's parent, as a real
harness is) against a real sidecar, and check that shown mail is held for that process, confirmed
by the session's next hook after a model call or its ``check_inbox``, and shown again when the
process dies first. The real harnesses are killed the same way in tests/e2e.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Hive
from tests.integrations.test_hook import (
    add_peer,
    claude_payload,
    clean_env,
    expected_reply,
    fire,
    frame,
    hook_argv,
    ok,
    send,
    unread,
)

# A stand-in harness: runs one hook as a harness does (stdin in, stdout captured), passes the
# hook's reply on, then stays alive the way a harness waiting for its model does.
HARNESS = (
    "import subprocess, sys, time\n"
    "done = subprocess.run(sys.argv[1:], input=sys.stdin.buffer.read(), stdout=subprocess.PIPE)\n"
    "sys.stdout.buffer.write(done.stdout + b'\\n')\n"
    "sys.stdout.flush()\n"
    "time.sleep(600)\n"
)


def wait_for(check: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)
    return value


@pytest.fixture
def peer_hive(hive: Hive) -> Hive:
    add_peer(hive)
    return hive


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="hive-app-", dir="/tmp") as folder:
        yield Path(folder)


def receipt(hive: Hive, message_id: str) -> str:
    """What the sender is told: ``queued`` until the recipient's side confirmed, then ``read``."""
    return str(ok(hive, {"op": "sent", "ids": [message_id]})["messages"][0]["state"])


class Harness:
    """A harness process that ran one hook and is still alive, waiting for its model."""

    def __init__(self, hive: Hive, event: str, sid: str, cwd: str) -> None:
        payload, env = claude_payload(event, sid, cwd)
        self.process = subprocess.Popen(
            [sys.executable, "-c", HARNESS, *hook_argv("claude-code", event)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=clean_env(hive.home, env),
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(payload).encode())
        self.process.stdin.close()
        self.reply = self.process.stdout.readline().decode().rstrip("\n")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)
        assert self.process.stdout is not None
        self.process.stdout.close()


def test_mail_a_hook_showed_is_read_only_after_the_sessions_next_hook_that_follows_a_model_call(
    peer_hive: Hive, workdir: Path
) -> None:
    sid, cwd = "claude-proof", str(workdir)
    fire(peer_hive, "claude-code", "SessionStart", sid, cwd)
    message_id = send(peer_hive, sid, "is the api on 8443?")
    assert fire(peer_hive, "claude-code", "PostToolUse", sid, cwd) == expected_reply(
        "context", "PostToolUse", frame(message_id, "is the api on 8443?")
    )
    # Printed, on its way to the model: held, so no other reader shows it and no notice counts it,
    # but the sender is not told it was read.
    assert unread(peer_hive, sid) == 0 and receipt(peer_hive, message_id) == "queued"
    # A new prompt comes before any model call: it proves nothing and shows nothing twice.
    assert fire(peer_hive, "claude-code", "UserPromptSubmit", sid, cwd) == ""
    assert receipt(peer_hive, message_id) == "queued"
    # The turn ending needs a model answer, so that model call had the mail.
    assert fire(peer_hive, "claude-code", "Stop", sid, cwd) == ""
    assert receipt(peer_hive, message_id) == "read"


def test_mail_shown_to_a_harness_that_dies_before_its_next_model_call_is_shown_to_the_next_turn(
    peer_hive: Hive, workdir: Path
) -> None:
    sid, cwd = "claude-dies", str(workdir)
    fire(peer_hive, "claude-code", "SessionStart", sid, cwd)
    message_id = send(peer_hive, sid, "do not lose me")
    harness = Harness(peer_hive, "PostToolUse", sid, cwd)
    try:
        assert harness.reply == expected_reply("context", "PostToolUse", frame(message_id, "do not lose me"))
        assert unread(peer_hive, sid) == 0
    finally:
        harness.kill()
    assert receipt(peer_hive, message_id) == "queued"
    assert unread(peer_hive, sid) == 1
    # The session resumed in a new process: its first hook shows the mail again, framed.
    assert fire(peer_hive, "claude-code", "SessionStart", sid, cwd) == expected_reply(
        "context", "SessionStart", frame(message_id, "do not lose me")
    )
    assert fire(peer_hive, "claude-code", "Stop", sid, cwd) == ""
    assert receipt(peer_hive, message_id) == "read"


def test_a_long_poll_on_the_address_wakes_when_the_harness_holding_its_mail_dies(
    peer_hive: Hive, workdir: Path
) -> None:
    sid, cwd = "claude-poll", str(workdir)
    fire(peer_hive, "claude-code", "SessionStart", sid, cwd)
    message_id = send(peer_hive, sid, "wake the poller")
    harness = Harness(peer_hive, "PostToolUse", sid, cwd)
    try:
        assert message_id in harness.reply
        with peer_hive.connect(timeout=120) as conn:
            conn.send_line({"id": "poll", "op": "inbox", "session": sid, "wait": 120, "peek": True})
            wait_for(lambda: ok(peer_hive, {"op": "status"})["waiting"], timeout=30, what="the poll to park")
            harness.kill()
            reply: dict[str, Any] = conn.read()
    finally:
        if harness.process.poll() is None:
            harness.kill()
    assert reply["id"] == "poll" and reply["result"]["ids"] == [message_id]


def test_check_inbox_confirms_what_the_hooks_showed_without_showing_it_twice(peer_hive: Hive, workdir: Path) -> None:
    sid, cwd = "claude-check", str(workdir)
    fire(peer_hive, "claude-code", "SessionStart", sid, cwd)
    message_id = send(peer_hive, sid, "seen via the hook")
    assert message_id in fire(peer_hive, "claude-code", "PostToolUse", sid, cwd)
    assert ok(peer_hive, {"op": "inbox", "session": sid})["ids"] == []
    assert receipt(peer_hive, message_id) == "read"


def test_a_session_that_ends_before_its_model_saw_the_mail_leaves_it_unread(peer_hive: Hive, workdir: Path) -> None:
    sid, cwd = "claude-ends", str(workdir)
    fire(peer_hive, "claude-code", "SessionStart", sid, cwd)
    message_id = send(peer_hive, sid, "after the end")
    assert message_id in fire(peer_hive, "claude-code", "UserPromptSubmit", sid, cwd)
    assert fire(peer_hive, "claude-code", "SessionEnd", sid, cwd) == ""
    assert receipt(peer_hive, message_id) == "queued" and unread(peer_hive, sid) == 1
    assert ok(peer_hive, {"op": "inbox", "session": sid, "peek": True})["ids"] == [message_id]
