"""The hook command end to end: real sidecars, the real hook client run as harnesses run it.

Every hook here is a subprocess ``<python> -I -S hive_hook.py <harness> <Event>`` fed a payload
recorded in the shape each harness really sends (../shared/notes/harnesses.md), and its stdout is
compared byte for byte with what that harness expects. Faults (no sidecar, a hung one, one that
dies mid-reply, a hook killed after reading mail) always give the exact no-opinion reply and exit
0, and never lose a message.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hive.integrations import hook_client, hook_command, registry
from hive.sidecar.base import paths as sidecar_paths
from hive.sidecar.base.config import slug
from tests.conftest import Hive, loopback_config

HOOK = hook_command.HOOK_SCRIPT
PYTHON = hook_command.interpreter()
# Anything a harness could have left in this test's own environment would change who "calls".
HARNESS_VARS = {
    *hook_client.ENV_NAMES,
    "CLAUDE_PROJECT_DIR",
    "CLAUDE_ENV_FILE",
    "GEMINI_PROJECT_DIR",
    "GEMINI_CWD",
    "GEMINI_CLI",
    "OPENCODE_PID",
    "AGENT",
    "AI_AGENT",
    *(n for h in registry.harnesses().values() for n in (*h.identity.session_env, *h.identity.caller_env)),
}

PEER_KEY = "peer-session"
PEER = "alice/peer"


# ---- recorded payloads -------------------------------------------------------------------------


def claude_payload(event: str, sid: str, cwd: str) -> tuple[dict[str, Any], dict[str, str]]:
    base = {
        "session_id": sid,
        "transcript_path": f"/home/alice/.claude/projects/-app/{sid}.jsonl",
        "cwd": cwd,
        "hook_event_name": event,
    }
    extra: dict[str, dict[str, Any]] = {
        "SessionStart": {"source": "startup"},
        "UserPromptSubmit": {"prompt_id": "p-1", "permission_mode": "default", "prompt": "call the ping tool"},
        "PostToolUse": {
            "tool_name": "mcp__test__ping",
            "tool_input": {"message": "hi"},
            "tool_use_id": "toolu_01",
            "tool_response": '{"result":"PONG:hi"}',
            "duration_ms": 12,
        },
        "Stop": {
            "stop_hook_active": False,
            "last_assistant_message": "done",
            "background_tasks": [],
            "session_crons": [],
        },
        "SessionEnd": {"reason": "prompt_input_exit"},
    }
    env = {"CLAUDE_PROJECT_DIR": cwd, "CLAUDE_CODE_SESSION_ID": sid, "CLAUDECODE": "1", "CLAUDE_CODE_ENTRYPOINT": "cli"}
    return {**base, **extra[event]}, env


def codex_payload(event: str, sid: str, cwd: str) -> tuple[dict[str, Any], dict[str, str]]:
    base = {
        "session_id": sid,
        "turn_id": "turn-1",
        "transcript_path": f"/home/alice/.codex/sessions/2026/12/02/rollout-2026-12-02T11-00-00-{sid}.jsonl",
        "cwd": cwd,
        "hook_event_name": event,
        "model": "gpt-5.5",
        "permission_mode": "default",
    }
    extra: dict[str, dict[str, Any]] = {
        "SessionStart": {"source": "startup"},
        "UserPromptSubmit": {"prompt": "call the ping tool"},
        "PostToolUse": {
            "tool_name": "mcp__test__ping",
            "tool_input": {"message": "hi"},
            "tool_use_id": "call_1",
            "tool_response": {
                "content": [{"type": "text", "text": "PONG:hi"}],
                "structuredContent": None,
                "isError": False,
            },
        },
        "Stop": {"stop_hook_active": False, "last_assistant_message": "done"},
    }
    env = {"CODEX_MANAGED_BY_NPM": "1", "CODEX_MANAGED_PACKAGE_ROOT": "/usr/lib/node_modules/@openai/codex"}
    return {**base, **extra[event]}, env


def gemini_payload(event: str, sid: str, cwd: str) -> tuple[dict[str, Any], dict[str, str]]:
    base = {
        "session_id": sid,
        "transcript_path": f"/home/alice/.gemini/tmp/app/chats/session-{sid}.jsonl",
        "cwd": cwd,
        "hook_event_name": event,
        "timestamp": "2026-12-02T11:00:00.000Z",
    }
    extra: dict[str, dict[str, Any]] = {
        "SessionStart": {"source": "startup"},
        "BeforeAgent": {"prompt": "call the ping tool"},
        "AfterTool": {
            "tool_name": "mcp_test_ping",
            "tool_input": {"message": "hi"},
            "tool_response": {"llmContent": "PONG:hi", "returnDisplay": "PONG:hi"},
            "mcp_context": {"server_name": "test", "tool_name": "ping", "command": "python", "args": []},
        },
        "AfterAgent": {"prompt": "call the ping tool", "prompt_response": "done", "stop_hook_active": False},
        "SessionEnd": {"reason": "exit"},
    }
    env = {"GEMINI_SESSION_ID": sid, "GEMINI_PROJECT_DIR": cwd, "GEMINI_CWD": cwd, "CLAUDE_PROJECT_DIR": cwd}
    return {**base, **extra[event]}, env


def cursor_payload(event: str, sid: str, cwd: str) -> tuple[dict[str, Any], dict[str, str]]:
    base = {
        "conversation_id": sid,
        "generation_id": "gen-1",
        "hook_event_name": event,
        "workspace_roots": [cwd],
        "model": "claude-4.5-sonnet",
        "cursor_version": "2.0.77",
        "user_email": "alice@example.com",
    }
    extra: dict[str, dict[str, Any]] = {
        "sessionStart": {"session_id": sid, "is_background_agent": False, "composer_mode": "agent"},
        "beforeSubmitPrompt": {"prompt": "call the ping tool", "attachments": []},
        "postToolUse": {"tool_name": "MCP:ping", "tool_input": {"message": "hi"}, "tool_output": "PONG:hi"},
        "stop": {"status": "completed", "loop_count": 0},
        "sessionEnd": {"session_id": sid, "reason": "user_close"},
    }
    return {**base, **extra[event]}, {}


PAYLOADS: dict[str, Callable[[str, str, str], tuple[dict[str, Any], dict[str, str]]]] = {
    "claude-code": claude_payload,
    "codex": codex_payload,
    "gemini": gemini_payload,
    "cursor": cursor_payload,
}
START = {"claude-code": "SessionStart", "codex": "SessionStart", "gemini": "SessionStart", "cursor": "sessionStart"}

# (harness, native event, how mail reaches the model there; None: it does not)
CASES = [
    ("claude-code", "SessionStart", "context"),
    ("claude-code", "UserPromptSubmit", "context"),
    ("claude-code", "PostToolUse", "context"),
    ("claude-code", "Stop", "exit2"),
    ("claude-code", "SessionEnd", None),
    ("codex", "SessionStart", "context"),
    ("codex", "UserPromptSubmit", "context"),
    ("codex", "PostToolUse", "context"),
    ("codex", "Stop", "block"),
    ("gemini", "SessionStart", "context"),
    ("gemini", "BeforeAgent", "context"),
    ("gemini", "AfterTool", "context"),
    ("gemini", "AfterAgent", "block"),
    ("gemini", "SessionEnd", None),
    ("cursor", "sessionStart", None),
    ("cursor", "beforeSubmitPrompt", None),
    ("cursor", "postToolUse", None),
    ("cursor", "stop", "followup"),
    ("cursor", "sessionEnd", None),
]
NO_OPINION = {("cursor", "beforeSubmitPrompt"): '{"continue": true}'}


def expected_reply(shape: str | None, native: str, text: str) -> str:
    if shape == "context":
        return json.dumps({"hookSpecificOutput": {"hookEventName": native, "additionalContext": text}})
    if shape == "block":
        return json.dumps({"decision": "block", "reason": text})
    if shape == "followup":
        return json.dumps({"followup_message": text})
    if shape == "exit2":
        return EXIT_2 + text
    raise AssertionError(shape)


# What fire() returns for a hook that exited 2 (Claude Code's Stop block), before its stderr.
EXIT_2 = "exit 2, stderr: "


def frame(message_id: str, body: str) -> str:
    return (
        f'<hive-message from="{PEER}" agent="codex" id="{message_id}">\n{body}\n</hive-message>\n'
        f'From alice\'s agent {PEER}. Reply with send_message to "{PEER}" if useful.'
    )


# ---- helpers ----------------------------------------------------------------------------------


def clean_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in HARNESS_VARS and not k.startswith("HIVE_")}
    env["HIVE_HOME"] = str(home)
    # What the hooks say is asserted here, not how fast: a loaded machine gets time to answer.
    # The tests of the deadline itself set it back to the default ("").
    env["HIVE_HOOK_DEADLINE_MS"] = "3000"
    env.update(extra or {})
    return env


def hook_argv(harness: str, event: str, *rest: str, python: str = PYTHON) -> list[str]:
    return [python, "-I", "-S", str(HOOK), harness, event, *rest]


def run_hook(
    home: Path,
    harness: str,
    event: str,
    payload: dict[str, Any] | bytes,
    env: dict[str, str] | None = None,
    no_opinion: str | None = None,
    stdout: int = subprocess.PIPE,
) -> tuple[subprocess.CompletedProcess[bytes], float]:
    """Run the hook command as a harness would; returns the process and its wall time."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    argv = hook_argv(harness, event, *([no_opinion] if no_opinion else []))
    start = time.monotonic()
    done = subprocess.run(
        argv, input=data, env=clean_env(home, env), stdout=stdout, stderr=subprocess.PIPE, timeout=20, check=False
    )
    return done, time.monotonic() - start


def fire(hive: Hive, harness: str, event: str, sid: str, cwd: str, **changes: Any) -> str:
    """Run the hook for a recorded payload; assert it exits 0 silently on stderr and return stdout,
    or, for a hook that exits 2 with nothing on stdout, return :data:`EXIT_2` and its stderr."""
    payload, env = PAYLOADS[harness](event, sid, cwd)
    payload.update(changes)
    done, _ = run_hook(hive.home, harness, event, payload, env, NO_OPINION.get((harness, event)))
    if done.returncode == 2 and done.stdout == b"":
        return EXIT_2 + done.stderr.decode()
    assert done.returncode == 0, done
    assert done.stderr == b"", done.stderr
    return done.stdout.decode()


def ok(hive: Hive, request: dict[str, Any]) -> dict[str, Any]:
    reply = hive.request(request)
    assert reply["ok"], reply
    return reply["result"]


def address_of(hive: Hive, key: str) -> str:
    return ok(hive, {"op": "who", "session": key, "all": True})["me"]


def add_peer(hive: Hive) -> None:
    ok(hive, {"op": "register", "session": {"key": PEER_KEY, "agent": "codex", "cwd": "/tmp/peer", "name": "peer"}})


def send(hive: Hive, key: str, body: str, fyi: bool = False) -> str:
    result = ok(hive, {"op": "send", "from": PEER_KEY, "to": address_of(hive, key), "body": body, "fyi": fyi})
    return result["results"][0]["id"]


def unread(hive: Hive, key: str) -> int:
    return ok(hive, {"op": "unread", "session": key})["count"]


def session_entry(hive: Hive, key: str) -> dict[str, Any]:
    address = address_of(hive, key)
    return next(s for s in ok(hive, {"op": "who", "all": True})["sessions"] if s["address"] == address)


@pytest.fixture
def peer_hive(hive: Hive) -> Hive:
    add_peer(hive)
    return hive


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="hive-app-", dir="/tmp") as folder:
        yield Path(folder)


# ---- the command line -------------------------------------------------------------------------


def test_hook_command_is_an_absolute_isolated_interpreter_and_the_packaged_script(hive: Hive) -> None:
    line = hook_command.hook_command("claude", "PostToolUse")
    argv = shlex.split(line)
    assert argv == [PYTHON, "-I", "-S", str(HOOK), "claude-code", "PostToolUse"]
    assert os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK)
    with open(argv[0], "rb") as binary:
        assert binary.read(2) != b"#!", "a script (a shim) in front of python costs its own start-up"
    assert HOOK.is_file() and HOOK.parent == Path(hook_client.__file__).parent
    # Cursor's prompt gate has a non-empty no-opinion reply; the command carries it.
    assert shlex.split(hook_command.hook_command("cursor", "beforeSubmitPrompt"))[-1] == '{"continue": true}'
    printed = hive.cli("hook", "--command", "claude-code", "PostToolUse", check=True).stdout
    assert printed == line + "\n"
    unknown = hive.cli("hook", "--command", "nosuch", "Stop")
    assert unknown.returncode == 1 and "unknown harness" in unknown.stderr


def test_the_interpreter_stays_inside_a_virtual_environment() -> None:
    if sys.prefix == sys.base_prefix:
        pytest.skip("not running in a virtual environment")
    assert Path(PYTHON).parent == Path(sys.executable).absolute().parent
    probe = subprocess.run([PYTHON, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == sys.prefix


# ---- recorded payloads, exact replies ----------------------------------------------------------


@pytest.mark.parametrize(("harness", "event", "shape"), CASES, ids=[f"{h}-{e}" for h, e, _ in CASES])
def test_without_mail_every_hook_answers_the_exact_no_opinion(
    peer_hive: Hive, workdir: Path, harness: str, event: str, shape: str | None
) -> None:
    sid = f"{harness}-{event}-quiet"
    ending = event.lower() == "sessionend"
    if ending:  # an end alone (a health check's) registers nothing: the session must have been seen
        assert fire(peer_hive, harness, event, sid, str(workdir)) == NO_OPINION.get((harness, event), "")
        assert [s["address"] for s in ok(peer_hive, {"op": "who", "all": True})["sessions"]] == ["alice/peer"]
        fire(peer_hive, harness, START[harness], sid, str(workdir))
    assert fire(peer_hive, harness, event, sid, str(workdir)) == NO_OPINION.get((harness, event), "")
    entry = session_entry(peer_hive, sid)
    assert entry["agent"] == harness
    assert entry["folder"] == workdir.name
    assert entry["live"] is not ending


@pytest.mark.parametrize(("harness", "event", "shape"), CASES, ids=[f"{h}-{e}" for h, e, _ in CASES])
def test_waiting_mail_is_injected_in_the_harness_shape(
    peer_hive: Hive, workdir: Path, harness: str, event: str, shape: str | None
) -> None:
    sid = f"{harness}-{event}-mail"
    fire(peer_hive, harness, START[harness], sid, str(workdir))
    message_id = send(peer_hive, sid, "why does refresh return 401?")
    out = fire(peer_hive, harness, event, sid, str(workdir))
    if shape is None:
        assert out == NO_OPINION.get((harness, event), "")
        assert unread(peer_hive, sid) == 1, "mail a hook cannot show stays unread"
    else:
        assert out == expected_reply(shape, event, frame(message_id, "why does refresh return 401?"))
        assert unread(peer_hive, sid) == 0, "held for the harness once the reply was written"


def test_a_tool_hook_injects_only_waking_mail_and_stop_brings_the_rest(peer_hive: Hive, workdir: Path) -> None:
    sid = "claude-mid-turn"
    cwd = str(workdir)
    fire(peer_hive, "claude-code", "SessionStart", sid, cwd)
    fyi = send(peer_hive, sid, "fyi: staging is down", fyi=True)
    assert fire(peer_hive, "claude-code", "PostToolUse", sid, cwd) == ""
    waking = send(peer_hive, sid, "please review PR 12")
    assert fire(peer_hive, "claude-code", "PostToolUse", sid, cwd) == expected_reply(
        "context", "PostToolUse", frame(waking, "please review PR 12")
    )
    assert unread(peer_hive, sid) == 1
    assert fire(peer_hive, "claude-code", "Stop", sid, cwd) == expected_reply(
        "exit2", "Stop", frame(fyi, "fyi: staging is down")
    )
    assert unread(peer_hive, sid) == 0


def test_a_stop_hook_never_blocks_twice_in_a_row(peer_hive: Hive, workdir: Path) -> None:
    sid = "claude-stop"
    cwd = str(workdir)
    fire(peer_hive, "claude-code", "SessionStart", sid, cwd)
    first = send(peer_hive, sid, "one")
    assert fire(peer_hive, "claude-code", "Stop", sid, cwd) == expected_reply("exit2", "Stop", frame(first, "one"))
    second = send(peer_hive, sid, "two")
    assert fire(peer_hive, "claude-code", "Stop", sid, cwd, stop_hook_active=True) == ""
    assert unread(peer_hive, sid) == 1
    assert fire(peer_hive, "claude-code", "Stop", sid, cwd) == expected_reply("exit2", "Stop", frame(second, "two"))
    # Gemini says the same with the same field; Cursor counts its follow-ups instead.
    fire(peer_hive, "gemini", "SessionStart", "gemini-stop", cwd)
    send(peer_hive, "gemini-stop", "three")
    assert fire(peer_hive, "gemini", "AfterAgent", "gemini-stop", cwd, stop_hook_active=True) == ""
    fire(peer_hive, "cursor", "sessionStart", "cursor-stop", cwd)
    send(peer_hive, "cursor-stop", "four")
    assert fire(peer_hive, "cursor", "stop", "cursor-stop", cwd, loop_count=1) == ""
    assert unread(peer_hive, "gemini-stop") == 1 and unread(peer_hive, "cursor-stop") == 1


def test_cursor_running_claude_code_hooks_answers_in_cursor_shape(peer_hive: Hive, workdir: Path) -> None:
    sid = "cursor-via-claude"
    cwd = str(workdir)
    # Cursor loads ~/.claude/settings.json: Claude's command line, Cursor's stdin.
    payload, env = cursor_payload("sessionStart", sid, cwd)
    done, _ = run_hook(peer_hive.home, "claude-code", "SessionStart", payload, env)
    assert done.stdout == b""
    assert session_entry(peer_hive, sid)["agent"] == "cursor"
    message_id = send(peer_hive, sid, "ping from claude's hook")
    payload, env = cursor_payload("beforeSubmitPrompt", sid, cwd)
    done, _ = run_hook(peer_hive.home, "claude-code", "UserPromptSubmit", payload, env)
    assert done.stdout.decode() == '{"continue": true}', "Cursor's prompt gate, never an empty answer"
    payload, env = cursor_payload("stop", sid, cwd)
    done, _ = run_hook(peer_hive.home, "claude-code", "Stop", payload, env)
    assert done.stdout.decode() == expected_reply("followup", "stop", frame(message_id, "ping from claude's hook"))
    assert unread(peer_hive, sid) == 0


@pytest.mark.parametrize(
    ("harness", "start", "tool", "payload", "env"),
    [
        ("opencode", "session.created", "tool.execute.after", {"sessionID": "ses_opencode1"}, {"OPENCODE": "1"}),
        ("pi", "session_start", "tool_result", {"sessionId": "019a7c1e-pi"}, {"PI_CODING_AGENT": "true"}),
    ],
)
def test_plugin_points_leave_mail_for_the_plugin(
    peer_hive: Hive, workdir: Path, harness: str, start: str, tool: str, payload: dict[str, str], env: dict[str, str]
) -> None:
    # opencode and pi deliver through their own plugins; a hook call there only registers.
    key = next(iter(payload.values()))
    payload = {**payload, "directory": str(workdir), "cwd": str(workdir)}
    done, _ = run_hook(peer_hive.home, harness, start, payload, env)
    assert done.stdout == b""
    assert session_entry(peer_hive, key)["agent"] == harness
    send(peer_hive, key, "for the plugin")
    done, _ = run_hook(peer_hive.home, harness, tool, payload, env)
    assert done.stdout == b"" and unread(peer_hive, key) == 1


def test_the_session_is_registered_under_the_harness_process_behind_the_shell(hive: Hive, workdir: Path) -> None:
    payload, env = claude_payload("SessionStart", "claude-pid", str(workdir))
    # A fake harness runs the hook as Claude Code does, through `sh -c`; "; true" stops the
    # shell from replacing itself with the command. It keeps running (until its stdin closes), as
    # a harness does: the session ends when its harness process exits.
    script = (
        "import os, subprocess, sys; print(os.getpid(), flush=True); "
        "subprocess.run(['sh', '-c', sys.argv[1] + '; true'], input=sys.argv[2].encode(), check=True); "
        "print('ran', flush=True); sys.stdin.read()"
    )
    command = shlex.join(hook_argv("claude-code", "SessionStart"))
    harness = subprocess.Popen(
        [sys.executable, "-c", script, command, json.dumps(payload)],
        env=clean_env(hive.home, env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert harness.stdout is not None
        harness_pid = int(harness.stdout.readline())
        assert harness.stdout.readline().strip() == "ran"
        found = ok(hive, {"op": "attach", "pids": [harness_pid], "cwd": str(workdir)})
        assert (found["key"], found["via"]) == ("claude-pid", "ancestry")
        entry = session_entry(hive, "claude-pid")
        assert (entry["agent"], entry["tier"], entry["folder"]) == ("claude-code", "push", workdir.name)
    finally:
        harness.communicate(timeout=20)


def test_a_codex_session_is_keyed_by_its_thread_id(hive: Hive, workdir: Path) -> None:
    thread = "019a7c1e-5a60-7d52-8a4e-2a1f3c9b0d11"
    fire(hive, "codex", "SessionStart", thread, str(workdir))
    entry = session_entry(hive, thread)
    assert (entry["agent"], entry["tier"]) == ("codex", "push")


def test_a_session_in_a_git_checkout_is_listed_with_its_project_and_branch(hive: Hive, workdir: Path) -> None:
    subprocess.run(["git", "init", "-q", "-b", "feature-x", str(workdir)], check=True)
    subprocess.run(["git", "-C", str(workdir), "remote", "add", "origin", "git@github.com:acme/api.git"], check=True)
    (workdir / "src").mkdir()
    fire(hive, "claude-code", "SessionStart", "claude-git", str(workdir / "src"))
    entry = session_entry(hive, "claude-git")
    assert (entry["repo"], entry["branch"], entry["name"]) == (
        "github.com/acme/api",
        "feature-x",
        slug(f"{workdir.name}-claude-code"),
    )


def test_people_get_the_same_answer_from_hive_hook(peer_hive: Hive, workdir: Path) -> None:
    sid = "claude-cli"
    fire(peer_hive, "claude-code", "SessionStart", sid, str(workdir))
    message_id = send(peer_hive, sid, "via the CLI")
    payload, _ = claude_payload("PostToolUse", sid, str(workdir))
    done = peer_hive.cli("hook", "claude-code", "PostToolUse", input=json.dumps(payload))
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected_reply("context", "PostToolUse", frame(message_id, "via the CLI"))
    assert unread(peer_hive, sid) == 0
    gate = peer_hive.cli(
        "hook",
        "cursor",
        "beforeSubmitPrompt",
        input=json.dumps(cursor_payload("beforeSubmitPrompt", "cursor-cli", str(workdir))[0]),
    )
    assert gate.stdout == '{"continue": true}'


def test_a_huge_tool_output_still_lets_mail_through(peer_hive: Hive, workdir: Path) -> None:
    sid = "claude-big"
    fire(peer_hive, "claude-code", "SessionStart", sid, str(workdir))
    message_id = send(peer_hive, sid, "big output, small mail")
    payload, env = claude_payload("PostToolUse", sid, str(workdir))
    payload["tool_response"] = "x" * (3 << 20)  # over the sidecar's 1 MiB line limit
    done, _ = run_hook(peer_hive.home, "claude-code", "PostToolUse", payload, env)
    assert done.stdout.decode() == expected_reply("context", "PostToolUse", frame(message_id, "big output, small mail"))


# ---- faults: always the no-opinion reply, exit 0, nothing lost --------------------------------


@pytest.mark.parametrize("no_opinion", ["", '{"continue": true}'])
def test_with_no_sidecar_it_answers_no_opinion_and_starts_one_detached(
    make_hive: Callable[..., Hive], no_opinion: str
) -> None:
    machine = make_hive()
    payload, env = claude_payload("PostToolUse", "claude-cold", "/tmp")
    done, _ = run_hook(machine.home, "claude-code", "PostToolUse", payload, env, no_opinion or None)
    # It answered without waiting for the sidecar it started: how fast is bench_hook's business.
    assert (done.returncode, done.stdout.decode(), done.stderr) == (0, no_opinion, b"")
    deadline = time.monotonic() + 20
    while not machine.paths.socket.exists():
        assert time.monotonic() < deadline, (machine.home / "sidecar.stderr").read_text()
        time.sleep(0.05)
    assert ok(machine, {"op": "ping"})["pong"]
    # The next hook finds it and registers the session.
    deadline = time.monotonic() + 10
    while True:
        done, _ = run_hook(machine.home, "claude-code", "PostToolUse", payload, env)
        with contextlib.suppress(AssertionError, KeyError, StopIteration):
            assert session_entry(machine, "claude-cold")["agent"] == "claude-code"
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_with_its_state_folders_parent_gone_it_answers_no_opinion_and_starts_nothing(tmp_path: Path) -> None:
    home = tmp_path / "removed" / "home" / ".local" / "share" / "hive"  # a test root deleted under a harness
    payload, env = claude_payload("PostToolUse", "claude-orphan", "/tmp")
    done, _ = run_hook(home, "claude-code", "PostToolUse", payload, env)
    assert (done.returncode, done.stdout.decode(), done.stderr) == (0, "", b"")
    assert not (tmp_path / "removed").exists()


@contextlib.contextmanager
def fake_sidecar(home: Path, behaviour: Callable[[socket.socket], None]) -> Iterator[list[socket.socket]]:
    """A socket where the sidecar's would be, answering each connection with ``behaviour``."""
    home.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(hook_client.socket_path(str(home)))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)
            threading.Thread(target=behaviour, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield accepted
    finally:
        stop.set()
        thread.join()
        listener.close()
        for conn in accepted:
            conn.close()


def never_answers(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.recv(1 << 20)


def dies_mid_reply(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.makefile("rb").readline()
        conn.sendall(b'{"id":1,"ok":true,"result":{"stdout":"{\\"decision\\": \\"bl')
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()


def dies_mid_block(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.makefile("rb").readline()
        conn.sendall(b'{"id":1,"ok":true,"result":{"stdout":"","stderr":"<hive-message>mail","exit":2')
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()


def refuses_with_exit_2(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.makefile("rb").readline()
        conn.sendall(b'{"id":1,"ok":false,"error":{"code":"internal","message":"boom"},"exit":2}\n')


@pytest.mark.parametrize(
    "behaviour",
    [never_answers, dies_mid_reply, dies_mid_block, refuses_with_exit_2],
    ids=["hung", "crashed-mid-reply", "crashed-mid-block", "refused"],
)
@pytest.mark.parametrize("no_opinion", ["", '{"continue": true}'])
def test_a_broken_sidecar_gets_no_opinion_within_the_deadline(
    behaviour: Callable[[socket.socket], None], no_opinion: str
) -> None:
    with tempfile.TemporaryDirectory(prefix="hive-", dir="/tmp") as folder:
        home = Path(folder)
        with fake_sidecar(home, behaviour) as accepted:
            payload, env = claude_payload("Stop", "claude-broken", "/tmp")
            done, _ = run_hook(
                home, "claude-code", "Stop", payload, {**env, "HIVE_HOOK_DEADLINE_MS": ""}, no_opinion or None
            )
            assert (done.returncode, done.stdout.decode(), done.stderr) == (0, no_opinion, b"")
            # Answered while the hung sidecar still holds the request: the hook gave up by its own
            # deadline (how soon is bench_hook's figure, not an assert on a loaded machine).
            assert len(accepted) == 1
        assert not (home / "sidecar.starting").exists(), "a sidecar that answers the socket is not restarted"


def test_errors_and_garbage_get_no_opinion(peer_hive: Hive) -> None:
    done, _ = run_hook(peer_hive.home, "no-such-harness", "Stop", {"session_id": "x"})
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    done, _ = run_hook(peer_hive.home, "claude-code", "Stop", b"\xff\xfe not json {{{")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    done, _ = run_hook(peer_hive.home, "cursor", "beforeSubmitPrompt", b"", no_opinion='{"continue": true}')
    assert (done.returncode, done.stdout) == (0, b'{"continue": true}')
    done = subprocess.run(
        [PYTHON, "-I", "-S", str(HOOK)],
        input=b"{}",
        capture_output=True,
        check=False,
        env=clean_env(peer_hive.home),
        timeout=10,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


# The real hook client, killed (SIGKILL, as a harness's timeout would) the moment it has read the
# sidecar's reply: it holds the shown mail and has printed nothing.
KILLED_AFTER_REPLY = f"""
import posix, sys
sys.path.insert(0, {str(HOOK.parent)!r})
import hook_client

read_line = hook_client._read_line

def killed_after(sock):
    line = read_line(sock)
    posix.kill(posix.getpid(), 9)
    return line

hook_client._read_line = killed_after
posix._exit(hook_client.run(sys.argv))
"""


def test_a_hook_killed_after_reading_mail_leaves_it_unread(
    make_hive: Callable[..., Hive], workdir: Path, tmp_path: Path
) -> None:
    machine = make_hive()  # the default in-flight timeout (90 s): closing the connection is what releases it
    machine.start()
    add_peer(machine)
    sid = "claude-killed"
    fire(machine, "claude-code", "SessionStart", sid, str(workdir))
    message_id = send(machine, sid, "do not lose me")
    payload, env = claude_payload("PostToolUse", sid, str(workdir))
    killed = tmp_path / "killed_hook.py"
    killed.write_text(KILLED_AFTER_REPLY, encoding="utf-8")
    done = subprocess.run(
        [PYTHON, "-I", "-S", str(killed), "claude-code", "PostToolUse"],
        input=json.dumps(payload).encode(),
        env=clean_env(machine.home, env),
        capture_output=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL and done.stdout == b""
    assert unread(machine, sid) == 1
    deadline = time.monotonic() + 30  # the sidecar sees the dead hook's connection close
    while message_id not in ok(machine, {"op": "inbox", "session": sid, "peek": True})["ids"]:
        assert time.monotonic() < deadline, "the mail of a hook that died before printing stayed hidden"
        time.sleep(0.05)
    assert fire(machine, "claude-code", "PostToolUse", sid, str(workdir)) == expected_reply(
        "context", "PostToolUse", frame(message_id, "do not lose me")
    )
    assert unread(machine, sid) == 0


def injections(hive: Hive, key: str) -> list[dict[str, Any]]:
    events = ok(hive, {"op": "events", "session": key, "action": "team.message.injected"})["events"]
    return [json.loads(e["detail"]) for e in events]


def test_each_message_a_hook_or_the_watcher_printed_is_recorded_injected_with_its_channel(
    peer_hive: Hive, workdir: Path
) -> None:
    sid = "claude-recorded"
    cwd = str(workdir)
    fire(peer_hive, "claude-code", "SessionStart", sid, cwd)
    first = send(peer_hive, sid, "one")
    fire(peer_hive, "claude-code", "PostToolUse", sid, cwd)
    watcher = start_watcher(peer_hive.home, sid, cwd)
    try:
        wait_parked(peer_hive, sid)
        second = send(peer_hive, sid, "two")
    finally:
        code, _, _ = finish(watcher, 10)
    assert code == 2
    tier = session_entry(peer_hive, sid)["tier"]
    assert injections(peer_hive, sid) == [
        {"id": first, "tier": tier, "channel": "hook", "point": "PostToolUse"},
        {"id": second, "tier": tier, "channel": "push", "point": "watcher"},
    ]


def test_mail_a_hook_could_not_print_is_not_recorded_injected(peer_hive: Hive, workdir: Path) -> None:
    sid = "claude-unprinted"
    fire(peer_hive, "claude-code", "SessionStart", sid, str(workdir))
    send(peer_hive, sid, "lost pipe")
    payload, env = claude_payload("PostToolUse", sid, str(workdir))
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run_hook(peer_hive.home, "claude-code", "PostToolUse", payload, env, stdout=write_end)
    finally:
        os.close(write_end)
    shown = fire(peer_hive, "claude-code", "Stop", sid, str(workdir))  # printed: the one record
    assert "lost pipe" in shown
    assert [i["point"] for i in injections(peer_hive, sid)] == ["Stop"]


def test_a_hook_that_cannot_write_its_reply_releases_the_mail_at_once(peer_hive: Hive, workdir: Path) -> None:
    sid = "claude-epipe"
    fire(peer_hive, "claude-code", "SessionStart", sid, str(workdir))
    message_id = send(peer_hive, sid, "still here")
    payload, env = claude_payload("PostToolUse", sid, str(workdir))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the harness went away: writing stdout fails with EPIPE
    try:
        done, _ = run_hook(peer_hive.home, "claude-code", "PostToolUse", payload, env, stdout=write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 0
    assert unread(peer_hive, sid) == 1
    # Released, not held for the in-flight timeout: the very next hook shows it.
    assert fire(peer_hive, "claude-code", "PostToolUse", sid, str(workdir)) == expected_reply(
        "context", "PostToolUse", frame(message_id, "still here")
    )


def test_a_claude_stop_hook_that_cannot_write_its_block_exits_0_and_releases_the_mail(
    peer_hive: Hive, workdir: Path
) -> None:
    sid = "claude-stop-epipe"
    fire(peer_hive, "claude-code", "SessionStart", sid, str(workdir))
    message_id = send(peer_hive, sid, "still here at stop")
    payload, env = claude_payload("Stop", sid, str(workdir))
    read_end, write_end = os.pipe()
    os.close(read_end)  # stderr is gone: the block cannot be shown, so it must not block
    try:
        done = subprocess.run(
            hook_argv("claude-code", "Stop"),
            input=json.dumps(payload).encode(),
            env=clean_env(peer_hive.home, env),
            stdout=subprocess.PIPE,
            stderr=write_end,
            timeout=20,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stdout) == (0, b"")
    assert fire(peer_hive, "claude-code", "Stop", sid, str(workdir)) == expected_reply(
        "exit2", "Stop", frame(message_id, "still here at stop")
    )


# ---- what the hook client is made of ------------------------------------------------------------


def test_the_hook_imports_only_standard_c_modules(peer_hive: Hive, workdir: Path) -> None:
    sid = "claude-imports"
    fire(peer_hive, "claude-code", "SessionStart", sid, str(workdir))
    send(peer_hive, sid, "mail makes it take the longest path")
    payload, env = claude_payload("PostToolUse", sid, str(workdir))
    done = subprocess.run(
        [PYTHON, "-X", "importtime", "-I", "-S", str(HOOK), "claude-code", "PostToolUse"],
        input=json.dumps(payload).encode(),
        env=clean_env(peer_hive.home, env),
        capture_output=True,
        timeout=10,
        check=True,
    )
    assert done.stdout.startswith(b'{"hookSpecificOutput"')
    imported = {
        m.group(1).strip()
        for m in re.finditer(r"^import time:\s*\d+ \|\s*\d+ \|(.*)$", done.stderr.decode(), re.MULTILINE)
    }
    assert "hook_client" in imported
    foreign = {m for m in imported - {"hook_client"} if m.split(".")[0] not in sys.stdlib_module_names}
    assert not foreign, f"third-party modules imported: {foreign}"
    # Cheap start-up is the point: the pure-Python json, socket and os packages stay out.
    assert not imported & {"json", "socket", "os", "subprocess", "hive"}, imported


def test_the_environment_names_cover_every_builtin_descriptor() -> None:
    named = {n for h in registry.harnesses().values() for n in (*h.identity.session_env, *h.identity.caller_env)}
    assert named <= set(hook_client.ENV_NAMES)


def test_env_names_of_third_party_harnesses_are_published_for_the_hook(peer_hive: Hive, workdir: Path) -> None:
    fire(peer_hive, "claude-code", "SessionStart", "claude-env", str(workdir))
    assert not (peer_hive.home / hook_client.ENV_FILE).exists(), "the built-in names need no file"


# ---- the socket rules agree with the sidecar's ------------------------------------------------


PATH_CASES: list[dict[str, str | None]] = [
    {"HIVE_HOME": "/tmp/hive-a"},
    {"HIVE_HOME": "/tmp//hive-b/./x/"},
    {"HIVE_HOME": "/tmp/hive-c/../hive-d"},
    {"HIVE_HOME": "//tmp/hive-e"},
    {"HIVE_HOME": "~/hive-f", "HOME": "/home/someone/"},
    {"HIVE_HOME": "~", "HOME": "/home/someone"},
    {"HIVE_HOME": "relative/hive-g"},
    {"HIVE_HOME": "/tmp/" + "long-" * 30 + "hive"},
    {"HIVE_HOME": "/tmp/" + "é" * 60},
    {"HIVE_HOME": "", "HOME": "/home/someone", "XDG_DATA_HOME": None},
    {"HIVE_HOME": None, "HOME": "/home/someone/", "XDG_DATA_HOME": None},
    {"HIVE_HOME": None, "HOME": "/home/someone", "XDG_DATA_HOME": "/xdg/data/"},
    {"HIVE_HOME": None, "HOME": "/home/someone", "XDG_DATA_HOME": "relative/xdg"},
    {"HIVE_HOME": None, "HOME": "relative-home", "XDG_DATA_HOME": None},
    {"HIVE_HOME": None, "HOME": None, "XDG_DATA_HOME": None},
    {"HIVE_HOME": None, "HOME": "/" + "deep/" * 30, "XDG_DATA_HOME": None},
]


@pytest.mark.parametrize("case", PATH_CASES, ids=range(len(PATH_CASES)))
def test_the_hook_finds_the_socket_where_the_sidecar_listens(
    case: dict[str, str | None], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, value in case.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    environ = {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}
    home = hook_client.state_home(environ)
    assert home == str(sidecar_paths.state_home())
    assert hook_client.socket_path(home) == str(sidecar_paths.socket_path(Path(home)))


def test_a_long_state_folder_uses_the_same_hashed_socket(make_hive: Callable[..., Hive], workdir: Path) -> None:
    base = make_hive()
    deep = base.home / ("nested-" * 14)
    deep.mkdir()
    (deep / "config.toml").write_text(loopback_config('person = "alice"\nmachine = "deep"\n'))
    machine = Hive(deep)
    machine.start()
    try:
        assert not str(machine.paths.socket).startswith(str(deep)), "the socket moved to the short path"
        add_peer(machine)
        fire(machine, "claude-code", "SessionStart", "claude-deep", str(workdir))
        message_id = send(machine, "claude-deep", "found you")
        assert fire(machine, "claude-code", "Stop", "claude-deep", str(workdir)) == expected_reply(
            "exit2", "Stop", frame(message_id, "found you")
        )
    finally:
        machine.stop()


# ---- the Claude Code push watcher ---------------------------------------------------------------


def start_watcher(home: Path, sid: str, cwd: str, **popen: Any) -> subprocess.Popen[bytes]:
    payload, env = claude_payload("SessionStart", sid, cwd)
    process = subprocess.Popen(
        hook_argv("claude-code", "watch"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(home, env),
        **popen,
    )
    assert process.stdin is not None
    process.stdin.write(json.dumps(payload).encode())
    process.stdin.close()
    return process


def finish(process: subprocess.Popen[bytes], timeout: float) -> tuple[int, bytes, bytes]:
    """Wait for a watcher to exit; its exit code, stdout and stderr (kept small: they fit the pipes)."""
    try:
        code = process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.stdout is not None and process.stderr is not None
    with process.stdout, process.stderr:
        return code, process.stdout.read(), process.stderr.read()


def wait_parked(hive: Hive, key: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(AssertionError, KeyError, TypeError):
            if address_of(hive, key) in ok(hive, {"op": "status"})["waiting"]:
                return
        assert time.monotonic() < deadline, "the watcher never started waiting"
        time.sleep(0.02)


def test_the_watcher_wakes_its_session_with_the_framed_message(peer_hive: Hive, workdir: Path) -> None:
    sid = "claude-watched"
    watcher = start_watcher(peer_hive.home, sid, str(workdir))
    try:
        wait_parked(peer_hive, sid)
        send(peer_hive, sid, "just so you know", fyi=True)
        # No sleep to see that the fyi did not wake it: the sidecar decides at the send, so the next
        # message is the marker. Had the fyi woken the watcher, "wake up" would find none parked
        # (not "delivered") and the watcher's output would be the fyi's frame.
        result = ok(peer_hive, {"op": "send", "from": PEER_KEY, "to": address_of(peer_hive, sid), "body": "wake up"})
        assert result["results"][0]["state"] == "delivered"
    finally:
        code, stdout, stderr = finish(watcher, 10)
    assert code == 2
    assert stdout == b""
    assert stderr.decode() == frame(result["results"][0]["id"], "wake up")
    assert unread(peer_hive, sid) == 1, "confirmed; only the fyi one waits"


def test_the_watcher_waits_for_a_sidecar_without_starting_one(make_hive: Callable[..., Hive], workdir: Path) -> None:
    machine = make_hive()
    # Where the sidecar would listen, a socket that only counts the watcher's tries: two tries (a
    # retry after the first failed) prove it had its chance to start a sidecar, with no fixed sleep.
    machine.paths.socket.parent.mkdir(parents=True, exist_ok=True)
    door = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    door.bind(str(machine.paths.socket))
    door.listen(8)
    door.settimeout(30)
    watcher = start_watcher(machine.home, "claude-early", str(workdir))
    try:
        for _ in range(2):
            knock, _ = door.accept()
            knock.close()  # no sidecar here: the watcher waits and tries again
        door.close()
        machine.paths.socket.unlink()
        assert watcher.poll() is None
        assert not machine.paths.lock.exists(), "`hive stop` must stay stopped while sessions are open"
        machine.start()
        add_peer(machine)
        wait_parked(machine, "claude-early")
        message_id = send(machine, "claude-early", "there you are")
    finally:
        code, _, stderr = finish(watcher, 10)
    assert (code, stderr.decode()) == (2, frame(message_id, "there you are"))


def test_one_watcher_per_session(hive: Hive, workdir: Path) -> None:
    first = start_watcher(hive.home, "claude-single", str(workdir))
    try:
        wait_parked(hive, "claude-single")
        assert finish(start_watcher(hive.home, "claude-single", str(workdir)), 10) == (0, b"", b"")
        assert first.poll() is None
    finally:
        first.kill()
        finish(first, 10)


def test_no_watcher_in_a_headless_claude_run(hive: Hive, workdir: Path) -> None:
    # `claude -p` would wait for a pending background hook instead of exiting.
    payload, env = claude_payload("SessionStart", "claude-headless", str(workdir))
    # A watcher that waited would outlive this call: its session never ends here.
    done, _ = run_hook(hive.home, "claude-code", "watch", payload, {**env, "CLAUDE_CODE_ENTRYPOINT": "sdk-cli"})
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert not (hive.home / "watchers").exists()


def test_cursor_running_the_claude_watcher_lets_it_go_at_once(hive: Hive, workdir: Path) -> None:
    payload, env = cursor_payload("sessionStart", "cursor-watch", str(workdir))
    done, _ = run_hook(hive.home, "claude-code", "watch", payload, env)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert not (hive.home / "watchers").exists(), "no watcher took a lock for a Cursor session"


def test_a_watcher_with_nothing_to_watch_exits_at_once(hive: Hive) -> None:
    for payload in (b"", b"not json", json.dumps({"cwd": "/tmp"}).encode()):
        done, _ = run_hook(hive.home, "claude-code", "watch", payload)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
        assert not (hive.home / "watchers").exists(), f"a watcher took a lock for {payload!r}"


def test_the_watcher_exits_when_its_session_ends(hive: Hive, workdir: Path) -> None:
    watcher = start_watcher(hive.home, "claude-ending", str(workdir))
    try:
        wait_parked(hive, "claude-ending")
        fire(hive, "claude-code", "SessionEnd", "claude-ending", str(workdir))
    finally:
        code, _, stderr = finish(watcher, hook_client.WATCH_POLL + 10)
    assert (code, stderr) == (0, b"")


SUPERVISOR = r"""
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us
command, payload, watchers = sys.argv[1], sys.argv[2], sys.argv[3]
fake_claude = ("import subprocess, sys, time; "
               "hook = subprocess.Popen(['sh', '-c', sys.argv[1] + '; true'], stdin=subprocess.PIPE); "
               "hook.stdin.write(sys.argv[2].encode()); hook.stdin.close(); time.sleep(600)")
claude = subprocess.Popen([sys.executable, "-c", fake_claude, command, payload])
deadline = time.monotonic() + 20
while not (os.path.isdir(watchers) and any(os.path.getsize(os.path.join(watchers, f)) for f in os.listdir(watchers))):
    assert time.monotonic() < deadline, "no watcher took its lock"
    time.sleep(0.02)
time.sleep(0.2)
os.kill(claude.pid, signal.SIGKILL)
killed = time.monotonic()
statuses = {}
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        break
    statuses[pid] = os.waitstatus_to_exitcode(status)
print(json.dumps({"claude": claude.pid, "statuses": statuses, "seconds": time.monotonic() - killed}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs PR_SET_CHILD_SUBREAPER")
def test_the_watcher_exits_when_its_claude_process_dies(hive: Hive, workdir: Path) -> None:
    payload, env = claude_payload("SessionStart", "claude-orphan", str(workdir))
    command = shlex.join(hook_argv("claude-code", "watch"))
    done = subprocess.run(
        [sys.executable, "-c", SUPERVISOR, command, json.dumps(payload), str(hive.home / "watchers")],
        env=clean_env(hive.home, env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    statuses = {int(pid): code for pid, code in report["statuses"].items()}
    assert statuses.pop(report["claude"]) == -signal.SIGKILL
    # A watcher that missed the death would never exit, and the supervisor would wait for it forever.
    assert statuses and set(statuses.values()) == {0}, "the shell and the watcher exit cleanly"


def test_the_benchmark_runs() -> None:
    bench = Path(__file__).resolve().parents[1] / "bench" / "bench_hook.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--quick"], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for figure in (
        "python -I -S -c pass (floor)",
        "python -c pass",
        "hook, no mail",
        "hook, mail waiting",
        "hook, no sidecar (start under way)",
        "hook, hung sidecar (own deadline)",
    ):
        assert re.search(rf"^{re.escape(figure)}\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+x$", done.stdout, re.MULTILINE), (
            done.stdout
        )
    assert "removed" in done.stdout.splitlines()[-1]
