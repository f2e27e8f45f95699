"""Observation end to end: recorded hook payloads through real sidecars become events and presence.

Hooks are replayed through the ``hook`` op in the shapes each harness sends
(../shared/notes/harnesses.md, the same shapes tests/integrations/test_hook.py runs through the
hook client); what a teammate sees is read from ``who`` on their own sidecar.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hive.sidecar.presence.activity import read_head, sensitive
from hive.sidecar.presence.events import _stored_detail
from hive.sidecar.presence.normalize import normalize, tool_paths
from hive.sidecar.presence.redaction import clean, detail_json, redact

from ..conftest import Hive
from .test_mesh import form_team, ok, wait_for


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")


def git_repo(folder: Path, origin: str = "git@github.com:acme/api.git") -> tuple[str, str]:
    """A real repository with one commit and an origin; returns its folder and HEAD."""
    folder.mkdir(parents=True, exist_ok=True)
    run = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*run, "init", "-q"], check=True)
    subprocess.run([*run, "remote", "add", "origin", origin], check=True)
    (folder / "README.md").write_text("hi\n", encoding="utf-8")
    subprocess.run([*run, "add", "README.md"], check=True)
    subprocess.run([*run, "commit", "-q", "-m", "one"], check=True)
    head = subprocess.run([*run, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    return str(folder), head


def hook(hive: Hive, harness: str, event: str, payload: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    return ok(hive, "hook", harness=harness, event=event, payload=payload, env=env or {})


def hook_printing(hive: Hive, harness: str, event: str, payload: dict[str, Any]) -> Any:
    """A hook as the hook client runs it: the reply, then, on the same connection, that it was printed."""
    with hive.connect() as conn:
        conn.send_line({"id": 1, "op": "hook", "harness": harness, "event": event, "payload": payload, "env": {}})
        reply = conn.read()
        assert reply["ok"], reply
        result = reply["result"]
        if result["ids"]:
            conn.send_line({"id": 2, "op": "hook_written", "session": result["session"], "ids": result["ids"]})
            assert conn.read()["ok"]
    return result


# Recorded shapes: (harness, start, prompt, tool, stop, sid field, payload of an edit of `path`)
def claude(sid: str, cwd: str, event: str, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": sid,
        "cwd": cwd,
        "hook_event_name": event,
        "transcript_path": f"/home/a/.claude/projects/x/{sid}.jsonl",
        **extra,
    }


def claude_edit(sid: str, cwd: str, path: str, call: str = "toolu_01") -> dict[str, Any]:
    return claude(
        sid,
        cwd,
        "PostToolUse",
        tool_name="Edit",
        tool_use_id=call,
        tool_input={"file_path": path, "old_string": "a", "new_string": "b"},
        tool_response={"filePath": path, "success": True},
    )


def codex(sid: str, cwd: str, event: str, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": sid,
        "turn_id": "turn-1",
        "cwd": cwd,
        "hook_event_name": event,
        "model": "gpt-5.5",
        "transcript_path": f"/home/a/.codex/sessions/rollout-{sid}.jsonl",
        **extra,
    }


def gemini(sid: str, cwd: str, event: str, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": sid,
        "cwd": cwd,
        "hook_event_name": event,
        "timestamp": "2026-12-02T11:00:00.000Z",
        "transcript_path": f"/home/a/.gemini/tmp/app/chats/session-{sid}.jsonl",
        **extra,
    }


def cursor(sid: str, cwd: str, event: str, **extra: Any) -> dict[str, Any]:
    return {
        "conversation_id": sid,
        "generation_id": "gen-1",
        "hook_event_name": event,
        "workspace_roots": [cwd],
        **extra,
    }


PATCH = "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n*** End Patch\n"

HARNESSES: dict[str, dict[str, Any]] = {
    "claude-code": {
        "start": ("SessionStart", lambda s, c: claude(s, c, "SessionStart", source="startup")),
        "prompt": ("UserPromptSubmit", lambda s, c: claude(s, c, "UserPromptSubmit", prompt="go")),
        "edit": ("PostToolUse", lambda s, c: claude_edit(s, c, f"{c}/src/app.py")),
        "stop": ("Stop", lambda s, c: claude(s, c, "Stop", stop_hook_active=False)),
        "env": {"CLAUDECODE": "1"},
    },
    "codex": {
        "start": ("SessionStart", lambda s, c: codex(s, c, "SessionStart", source="startup")),
        "prompt": ("UserPromptSubmit", lambda s, c: codex(s, c, "UserPromptSubmit", prompt="go")),
        "edit": (
            "PostToolUse",
            lambda s, c: codex(
                s,
                c,
                "PostToolUse",
                tool_name="apply_patch",
                tool_use_id="call_1",
                tool_input={"command": ["apply_patch", PATCH]},
            ),
        ),
        "stop": ("Stop", lambda s, c: codex(s, c, "Stop", stop_hook_active=False)),
        "env": {"CODEX_MANAGED_BY_NPM": "1"},
    },
    "gemini": {
        "start": ("SessionStart", lambda s, c: gemini(s, c, "SessionStart", source="startup")),
        "prompt": ("BeforeAgent", lambda s, c: gemini(s, c, "BeforeAgent", prompt="go")),
        "edit": (
            "AfterTool",
            lambda s, c: gemini(
                s,
                c,
                "AfterTool",
                tool_name="replace",
                tool_input={"file_path": f"{c}/src/app.py", "old_string": "a", "new_string": "b"},
                tool_response={"llmContent": "ok"},
            ),
        ),
        "stop": ("AfterAgent", lambda s, c: gemini(s, c, "AfterAgent", prompt="go", stop_hook_active=False)),
        "env": {"GEMINI_CLI": "1"},
    },
    "cursor": {
        "start": ("sessionStart", lambda s, c: cursor(s, c, "sessionStart", session_id=s)),
        "prompt": ("beforeSubmitPrompt", lambda s, c: cursor(s, c, "beforeSubmitPrompt", prompt="go")),
        "edit": (
            "postToolUse",
            lambda s, c: cursor(
                s, c, "postToolUse", tool_name="Write", tool_input={"file_path": f"{c}/src/app.py", "contents": "x"}
            ),
        ),
        "stop": ("stop", lambda s, c: cursor(s, c, "stop", status="completed", loop_count=0)),
        "env": {},
    },
}


def step(hive: Hive, harness: str, what: str, sid: str, cwd: str) -> None:
    spec = HARNESSES[harness]
    native, build = spec[what]
    hook(hive, harness, native, build(sid, cwd), spec["env"])


def events(hive: Hive, session: str | None = None) -> list[dict[str, Any]]:
    return ok(hive, "events", session=session, limit=1000)["events"]


# ---- pure functions ------------------------------------------------------------------------------


def test_redaction_keeps_provider_prefixes_and_removes_every_secret_shape() -> None:
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----"
    text = redact(
        f"curl -H 'Authorization: Bearer abc.def.ghi' https://bob:hunter2@example.com/x "
        f"GITHUB_TOKEN=ghp_0123456789abcdefABCDEF sk-ant-api03-aaaaaaaaaaaa password=swordfish {pem}"
    )
    for secret in ("abc.def.ghi", "hunter2", "0123456789abcdef", "api03-aaaa", "swordfish", "b3BlbnNzaC1rZXk"):
        assert secret not in text
    assert "ghp_[REDACTED]" in text and "sk-ant-[REDACTED]" in text
    assert redact('{"private_key": "abcd1234"}') == '{"private_key": "[REDACTED]"}'
    assert redact("nothing secret here") == "nothing secret here"
    # Case does not hide a secret, nor does a look-alike letter that regular expressions fold.
    assert redact("X-Api-Key: AKIAABCDEFGH12345678") == "X-Api-Key: AKIA[REDACTED]"
    assert redact("ſecret=hunter2") == "ſecret=[REDACTED]" and redact("PASSWORD=x1") == "PASSWORD=[REDACTED]"
    assert "Authorization: Bearer [REDACTED]" in text and "https://[REDACTED]@example.com" in text
    # Redaction comes before the cap: a cut never leaves the start of a secret behind.
    capped = clean("x" * 4090 + " ghp_0123456789abcdefABCDEF", cap=4100)
    assert "0123" not in capped and len(capped.encode()) <= 4103


def test_the_path_filter_keeps_credential_files_out() -> None:
    for path in (
        ".env",
        "app/.env.local",
        "/home/a/.aws/credentials",
        "/home/a/.ssh/config",
        "id_ed25519",
        "/home/a/.git-credentials",
        "/home/a/.config/git/credentials",
    ):
        assert sensitive(path), path
    for path in ("src/app.py", "docs/env.md", "id_utils.py", "id_ed25519.pub"):
        assert not sensitive(path), path


def test_edit_tools_of_each_harness_name_their_paths() -> None:
    assert tool_paths("Edit", {"file_path": "/r/a.py"}) == [("file.modified", "/r/a.py")]
    assert tool_paths("Read", {"file_path": "/r/a.py"}) == [("file.read", "/r/a.py")]
    assert tool_paths("apply_patch", {"command": ["apply_patch", PATCH]}) == [("file.modified", "src/app.py")]
    assert tool_paths("replace", {"file_path": "/r/a.py"}) == [("file.modified", "/r/a.py")]
    assert tool_paths("write_file", {"file_path": "/r/b.py"}) == [("file.modified", "/r/b.py")]
    assert tool_paths("read_file", {"absolute_path": "/r/b.py"}) == [("file.read", "/r/b.py")]
    assert tool_paths("edit", {"filePath": "/r/c.ts"}) == [("file.modified", "/r/c.ts")]  # opencode
    recorded = normalize("claude-code", "tool.after", claude_edit("s", "/r", "/r/a.py"), "s", "/r")
    assert [(e.action, e.fidelity) for e in recorded] == [("tool.completed", "observed"), ("file.modified", "inferred")]


def test_a_failed_call_claude_code_reports_with_only_its_error_implies_no_file_or_command_record() -> None:
    # PostToolUseFailure: an Edit that did not apply changed nothing, so it is no overlap; the
    # command's exit code is unknown, so a failed `git commit` is no commit.
    failed_edit = claude(
        "s",
        "/r",
        "PostToolUseFailure",
        tool_name="Edit",
        tool_use_id="toolu_02",
        tool_input={"file_path": "/r/a.py", "old_string": "a", "new_string": "b"},
        error="String to replace not found in file.",
    )
    failed_commit = claude(
        "s",
        "/r",
        "PostToolUseFailure",
        tool_name="Bash",
        tool_use_id="toolu_03",
        tool_input={"command": "git commit -m x"},
        error="Exit code 1\nnothing to commit",
    )
    for payload in (failed_edit, failed_commit):
        recorded = normalize("claude-code", "tool.after", payload, "s", "/r")
        assert [e.action for e in recorded] == ["tool.completed"]


def test_head_is_read_from_the_repository_files_as_git_would_answer(tmp_path: Path) -> None:
    cwd, head = git_repo(tmp_path / "api")
    assert read_head(cwd) == head
    run = ["git", "-C", cwd, "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*run, "pack-refs", "--all"], check=True)  # the branch now lives in packed-refs
    assert read_head(cwd) == head
    subprocess.run([*run, "worktree", "add", "-q", "-b", "side", str(tmp_path / "side")], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(tmp_path / "side"),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "two",
        ],
        check=True,
    )
    side = subprocess.run(
        ["git", "-C", str(tmp_path / "side"), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert read_head(str(tmp_path / "side")) == side != head
    subprocess.run([*run, "checkout", "-q", "--detach", head], check=True)
    assert read_head(cwd) == head
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    assert read_head(str(empty)) == ""


# ---- one machine ---------------------------------------------------------------------------------


@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_replayed_hooks_give_state_files_and_head(hive: Hive, tmp_path: Path, harness: str) -> None:
    cwd, head = git_repo(tmp_path / "api")
    sid = f"{harness}-1"
    step(hive, harness, "start", sid, cwd)
    step(hive, harness, "prompt", sid, cwd)
    [me] = [s for s in ok(hive, "who")["sessions"] if s["agent"]]
    assert me["state"] == "busy" and me["head"] == head
    step(hive, harness, "edit", sid, cwd)
    [me] = ok(hive, "who")["sessions"]
    assert me["files"] == ["src/app.py"]
    step(hive, harness, "stop", sid, cwd)
    [me] = ok(hive, "who")["sessions"]
    assert me["state"] == "idle"
    actions = [e["action"] for e in events(hive, sid)]
    assert actions[:2] == ["session.started", "prompt.submitted"]
    assert "file.modified" in actions and actions[-1] == "turn.stopped"


def test_the_same_call_reported_twice_is_stored_once_and_secrets_never_reach_the_table(
    hive: Hive, tmp_path: Path
) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    step(hive, "claude-code", "start", "c1", cwd)
    for _ in range(2):
        hook(hive, "claude-code", "PostToolUse", claude_edit("c1", cwd, f"{cwd}/src/app.py", call="toolu_9"))
    bash = claude(
        "c1",
        cwd,
        "PostToolUse",
        tool_name="Bash",
        tool_use_id="toolu_10",
        tool_input={"command": "curl -H 'Authorization: Bearer s3cr3t' https://u:pw@x.io"},
        tool_response={"exit_code": 0},
    )
    hook(hive, "claude-code", "PostToolUse", bash)
    hook(hive, "claude-code", "PostToolUse", bash)
    rows = events(hive, "c1")
    assert [e["action"] for e in rows if e["call_id"] == "toolu_9"] == ["tool.completed", "file.modified"]
    commands = [e for e in rows if e["action"] == "command.executed"]
    assert len(commands) == 1 and commands[0]["exit_code"] == 0
    dump = json.dumps(rows)
    assert "s3cr3t" not in dump and ":pw@" not in dump and "Bearer [REDACTED]" in dump
    shown = hive.cli("events", "--session", "c1", check=True).stdout
    assert "command.executed" in shown and "s3cr3t" not in shown


# A secret in each, passed the ways shell commands pass them: options, assignments, headers,
# program-specific short options, config setters, URLs.
SECRET = "Zq9xW7kP"
SECRET_COMMANDS = [
    f"mysql -u root -p{SECRET} shop",
    f"mysqldump -h db -u app -p'{SECRET}' shop > dump.sql",
    f"mysql --password={SECRET} shop",
    f"psql --password {SECRET}",
    f"curl --token {SECRET} https://x.io",
    f"aws configure set aws_secret_access_key {SECRET}",
    f"aws configure set aws_session_token {SECRET}",
    f"export GITHUB_TOKEN={SECRET}",
    f"DB_PASSWORD={SECRET} ./run.sh",
    f"SECRET_KEY={SECRET} python app.py",
    f"API_KEY='{SECRET}' npm start",
    f"env DB_PASS={SECRET} make",
    f"STRIPE_KEY={SECRET} node serve.js",
    f'curl -H "Authorization: Bearer {SECRET}" https://api.x.io',
    f"curl -H 'authorization: token {SECRET}' x.io",
    f"curl -u admin:{SECRET} https://x.io",
    f"sshpass -p {SECRET} ssh host",
    f"sshpass -p{SECRET} ssh host",
    f"redis-cli -a {SECRET} ping",
    f"docker login -u me -p {SECRET} registry.io",
    f"gh secret set DEPLOY --body {SECRET}",
    f"npm config set //registry.npmjs.org/:_authToken {SECRET}",
    f"git clone https://me:{SECRET}@github.com/a/b",
    f"openssl enc -aes256 -pass pass:{SECRET} -in f",
    f"zip -P {SECRET} out.zip f",
    f"7z a -p{SECRET} out.7z f",
    f"kubectl create secret generic x --from-literal=password={SECRET}",
    f"vault login -method=userpass username=me password={SECRET}",
    f"wget --http-password={SECRET} https://x.io",
    f"""curl -d '{{"client_secret": "{SECRET}"}}' https://x.io""",
    f"heroku config:set AUTH_TOKEN={SECRET}",
    f"mongosh -u admin -p {SECRET}",
    f'curl -H "Cookie: session={SECRET}" https://x.io',
    f'az login -u me --password "{SECRET}"',
    f"PGPASSWORD={SECRET} psql -h db",
    f"yarn config set npmAuthToken {SECRET}",
]
HARMLESS_COMMANDS = [
    "git status",
    "mkdir -p build/out",
    "ssh -p 2222 me@host",
    "docker run -p 8080:80 nginx",
    "export PATH=$PATH:/usr/local/bin",
    "cd $PWD/src && make",
    "pytest -k password_reset -x",
    "grep -rn token src/",
    'git commit -m "rotate token handling"',
    "kubectl get secrets -n prod",
    "mysql -u root -p shop",
    "npm install --save-dev typescript",
]


def _bash(sid: str, cwd: str, call: str, command: str) -> dict[str, Any]:
    return claude(
        sid,
        cwd,
        "PostToolUse",
        tool_name="Bash",
        tool_use_id=call,
        tool_input={"command": command},
        tool_response={"exit_code": 0},
    )


def test_secrets_passed_as_options_assignments_and_headers_never_show_in_hive_events(
    hive: Hive, tmp_path: Path
) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    step(hive, "claude-code", "start", "c1", cwd)
    commands = SECRET_COMMANDS + HARMLESS_COMMANDS
    for n, command in enumerate(commands):
        hook(hive, "claude-code", "PostToolUse", _bash("c1", cwd, f"toolu_{n}", command))
    rows = events(hive, "c1")
    executed = [e["command"] for e in rows if e["action"] == "command.executed"]
    assert len(executed) == len(commands)
    assert SECRET not in json.dumps(rows)
    # The table clips long cells to fit the terminal, so the full form proves every one was redacted.
    shown = hive.cli("events", "--session", "c1", "--limit", "1000", check=True).stdout
    assert SECRET not in shown
    full = hive.cli_json("events", "--session", "c1", "--limit", "1000")["events"]
    assert SECRET not in json.dumps(full)
    commands_shown = [e["command"] for e in full if e["action"] == "command.executed"]
    assert all("[REDACTED]" in c for c in commands_shown[: len(SECRET_COMMANDS)])
    assert executed[len(SECRET_COMMANDS) :] == HARMLESS_COMMANDS  # the harmless ones are recorded as run
    assert all(command in shown for command in HARMLESS_COMMANDS)


def test_a_quoted_authorization_header_leaves_the_stored_detail_valid_json(hive: Hive, tmp_path: Path) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    step(hive, "claude-code", "start", "c1", cwd)
    command = 'curl -s -H "Authorization: Bearer s3cr3t" -H "Content-Type: application/json" https://api.x.io'
    hook(hive, "claude-code", "PostToolUse", _bash("c1", cwd, "toolu_1", command))
    long = {"command": "echo " + "x" * 5000, "description": "a long one"}
    hook(
        hive,
        "claude-code",
        "PostToolUse",
        claude(
            "c1",
            cwd,
            "PostToolUse",
            tool_name="Bash",
            tool_use_id="toolu_2",
            tool_input=long,
            tool_response={"exit_code": 0},
        ),
    )
    details = [e["detail"] for e in events(hive, "c1") if e["action"] == "tool.completed"]
    assert len(details) == 2
    first, second = (json.loads(d) for d in details)  # valid JSON, however long the input was
    assert first["command"] == (
        'curl -s -H "Authorization: Bearer [REDACTED]" -H "Content-Type: application/json" https://api.x.io'
    )
    assert second["description"] == "a long one" and second["command"].startswith("echo xxx")


# ---- two machines --------------------------------------------------------------------------------


def test_two_sessions_on_two_machines_editing_one_file_each_get_exactly_one_notice(
    make_hive: Any, tmp_path: Path
) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    try:
        a_cwd, _ = git_repo(tmp_path / "a" / "api")
        b_cwd, _ = git_repo(tmp_path / "b" / "api", origin="https://github.com/acme/api")
        step(alice, "claude-code", "start", "a1", a_cwd)
        step(bob, "codex", "start", "b1", b_cwd)
        # alice reads her .env: recorded on her machine, never in what bob sees.
        hook(
            alice,
            "claude-code",
            "PostToolUse",
            claude(
                "a1",
                a_cwd,
                "PostToolUse",
                tool_name="Read",
                tool_use_id="toolu_e",
                tool_input={"file_path": f"{a_cwd}/.env"},
            ),
        )
        step(alice, "claude-code", "edit", "a1", a_cwd)
        wait_for(
            lambda: any(s["files"] == ["src/app.py"] for s in ok(bob, "who")["sessions"] if s["person"] == "alice"),
            what="alice's files at bob",
        )
        step(bob, "codex", "edit", "b1", b_cwd)

        def offers(hive: Hive, sid: str) -> list[dict[str, Any]]:
            return [e for e in events(hive, sid) if e["action"] == "overlap.offered"]

        a_offers = wait_for(lambda: offers(alice, "a1"), what="alice's notice")
        b_offers = wait_for(lambda: offers(bob, "b1"), what="bob's notice")
        # More edits and presence rounds on both sides change nothing: once per pair and file.
        step(alice, "claude-code", "edit", "a1", a_cwd)
        hook(
            bob,
            "codex",
            "PostToolUse",
            codex(
                "b1",
                b_cwd,
                "PostToolUse",
                tool_name="apply_patch",
                tool_use_id="call_2",
                tool_input={"command": ["apply_patch", PATCH]},
            ),
        )
        wait_for(lambda: len(events(alice, "a1")) > 4, what="more events")
        assert len(offers(alice, "a1")) == 1 and len(offers(bob, "b1")) == 1
        assert json.loads(a_offers[0]["detail"])["other"].startswith("bob/")
        assert json.loads(b_offers[0]["detail"])["other"].startswith("alice/")
        # The gate rates an overlap hive observed as attention: it waits for the session's next
        # breakpoint, and the turn ending is one, so the Stop reply itself carries the notice.
        for offered in (a_offers[0], b_offers[0]):
            assert json.loads(offered["detail"])["outcome"] == "wait"
        stops = {
            "a1": hook_printing(alice, "claude-code", "Stop", claude("a1", a_cwd, "Stop", stop_hook_active=False)),
            "b1": hook_printing(bob, "codex", "Stop", codex("b1", b_cwd, "Stop", stop_hook_active=False)),
        }
        # Claude Code's Stop blocks by exiting 2 with the text on stderr; Codex's by a decision:block reply.
        assert stops["a1"]["exit"] == 2
        reasons = {"a1": stops["a1"]["stderr"], "b1": json.loads(stops["b1"]["stdout"])["reason"]}
        for hive, sid, other in ((alice, "a1", "bob/"), (bob, "b1", "alice/")):
            reason = reasons[sid]
            assert reason.count('<hive-message from="hive/overlap"') == 1
            # hive's own notice says so, and invites no reply to an address nobody reads.
            assert "A notice from hive on this machine." in reason and 'send_message to "hive/' not in reason
            assert "src/app.py" in reason and other in reason
            injected = [json.loads(e["detail"]) for e in events(hive, sid) if e["action"] == "team.message.injected"]
            assert [(i["channel"], i["point"]) for i in injected] == [("hook", "Stop")], injected
        seen_by_bob = json.dumps(ok(bob, "who")["sessions"]) + json.dumps(ok(bob, "mesh"))
        assert ".env" not in seen_by_bob
        assert any(e["path"].endswith(".env") for e in events(alice, "a1"))
    finally:
        alice.stop()
        bob.stop()


def test_a_hook_whose_tool_input_nests_thousands_deep_is_answered_and_the_session_goes_on(
    hive: Hive, tmp_path: Path
) -> None:
    # The model writes the tool input: the harness passes it on as hook stdin, nested as deep as it was.
    cwd = str(tmp_path)
    hook(hive, "claude-code", "SessionStart", claude("deep", cwd, "SessionStart", source="startup"))
    deep = json.dumps(claude("deep", cwd, "PostToolUse", tool_name="Edit", tool_input={"x": 0}))
    deep = deep.replace('{"x": 0}', "[" * 5000 + "]" * 5000)
    with hive.connect() as conn:
        conn.send_line({"id": 1, "op": "hook", "harness": "claude-code", "event": "PostToolUse", "stdin": deep})
        reply = conn.read()
    assert reply["ok"], reply  # it was an internal error: the stdlib parser's RecursionError
    hook(hive, "claude-code", "PostToolUse", claude_edit("deep", cwd, f"{cwd}/src/app.py"))
    assert any(e["path"] == f"{cwd}/src/app.py" for e in events(hive, "deep"))


# ---- doing -----------------------------------------------------------------------------------------


def test_a_codex_approval_asked_shows_as_waiting_approval_until_the_call_runs(hive: Hive, tmp_path: Path) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    env = HARNESSES["codex"]["env"]
    step(hive, "codex", "start", "cx-1", cwd)
    step(hive, "codex", "prompt", "cx-1", cwd)
    # Codex 0.171.0's PermissionRequest stdin, as it ran just before asking its person.
    asked = codex(
        "cx-1",
        cwd,
        "PermissionRequest",
        permission_mode="default",
        tool_name="Bash",
        tool_input={"command": "touch made", "description": "need it"},
    )
    reply = hook(hive, "codex", "PermissionRequest", asked, env)
    assert reply["stdout"] == "", "hive must not answer the approval: the person is asked"
    [me] = ok(hive, "who")["sessions"]
    assert me["state"] == "waiting_approval"
    assert "approval.requested" in [e["action"] for e in events(hive, "cx-1")]
    hook(
        hive,
        "codex",
        "PostToolUse",
        codex(
            "cx-1",
            cwd,
            "PostToolUse",
            tool_name="Bash",
            tool_use_id="call_1",
            tool_input={"command": "touch made"},
            tool_response="",
        ),
        env,
    )
    [me] = ok(hive, "who")["sessions"]
    assert me["state"] == "busy"


def test_doing_comes_from_the_transcript_title_and_todo_calls_and_follows_appends(hive: Hive, tmp_path: Path) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    transcript = tmp_path / "t.jsonl"
    filler = json.dumps({"type": "user", "message": {"content": "x" * 1000}}) + "\n"
    todos = {
        "todos": [
            {"content": "Write tests", "status": "completed", "activeForm": "Writing tests"},
            {"content": "Add kid", "status": "in_progress", "activeForm": "add kid to verifier"},
        ]
    }
    transcript.write_text(
        filler * 3000
        + json.dumps({"type": "ai-title", "aiTitle": "JWT middleware"})
        + "\n"
        + json.dumps(
            {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "TodoWrite", "input": todos}]}}
        )
        + "\n",
        encoding="utf-8",
    )
    hook(
        hive,
        "claude-code",
        "SessionStart",
        claude("d1", cwd, "SessionStart", source="startup", transcript_path=str(transcript)),
    )

    def doing() -> str:
        return str(ok(hive, "who")["sessions"][0]["doing"])

    wait_for(lambda: doing() == "JWT middleware · add kid to verifier", timeout=10, what="doing from the transcript")
    # Appended bytes are read as they land (watchfiles), half a line waits for its end.
    entry = json.dumps({"type": "ai-title", "aiTitle": "JWT rotation"})
    with transcript.open("a", encoding="utf-8") as out:
        out.write(entry[:10])
        out.flush()
        out.write(entry[10:] + "\n")
    wait_for(lambda: doing() == "JWT rotation · add kid to verifier", timeout=10, what="the appended title")
    # A plan tool call seen by a hook names the task at once.
    hook(
        hive,
        "claude-code",
        "PostToolUse",
        claude(
            "d1",
            cwd,
            "PostToolUse",
            tool_name="TodoWrite",
            tool_use_id="toolu_t",
            transcript_path=str(transcript),
            tool_input={"todos": [{"content": "Ship it", "status": "in_progress"}]},
        ),
    )
    assert doing() == "JWT rotation · Ship it"


def test_a_folder_turned_off_registers_nothing_and_its_hooks_print_nothing(hive: Hive, tmp_path: Path) -> None:
    cwd, _ = git_repo(tmp_path / "private")
    hive.cli("folder", str(tmp_path), "off", check=True)
    reply = hook(hive, "claude-code", "SessionStart", claude("f1", cwd, "SessionStart", source="startup"))
    step(hive, "claude-code", "edit", "f1", cwd)
    assert reply["stdout"] == "" and reply["session"] is None
    assert ok(hive, "who", all=True)["sessions"] == [] and events(hive, "f1") == []
    assert str(tmp_path) in hive.cli("folder", check=True).stdout
    # An MCP server registering from there is told why.
    refused = hive.request({"id": 1, "op": "register", "session": {"key": "m1", "agent": "codex", "cwd": cwd}})
    assert not refused["ok"] and "turned hive off" in refused["error"]["message"]
    hive.cli("folder", str(tmp_path), "on", check=True)
    step(hive, "claude-code", "start", "f1", cwd)
    assert [s["agent"] for s in ok(hive, "who")["sessions"]] == ["claude-code"]


def test_two_sessions_on_one_machine_editing_one_file_are_each_told_once(hive: Hive, tmp_path: Path) -> None:
    one, _ = git_repo(tmp_path / "one")
    two, _ = git_repo(tmp_path / "two")  # another clone of the same origin: the same normalized repo
    step(hive, "claude-code", "start", "l1", one)
    step(hive, "gemini", "start", "l2", two)
    step(hive, "claude-code", "edit", "l1", one)
    step(hive, "gemini", "edit", "l2", two)
    step(hive, "claude-code", "edit", "l1", one)

    def offered(sid: str) -> list[str]:
        return [json.loads(e["detail"])["other"] for e in events(hive, sid) if e["action"] == "overlap.offered"]

    address = {s["agent"]: s["address"] for s in ok(hive, "who")["sessions"]}
    assert offered("l1") == [address["gemini"]] and offered("l2") == [address["claude-code"]]


# ---- redaction as a property ----------------------------------------------------------------------

_SECRET = st.text(alphabet="abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=12, max_size=24)
_FILLER = st.sampled_from(["curl -s", "echo ok &&", "psql", "git push", "deploy", "x=1;", "|", "--verbose", "-v"])


@st.composite
def commands_with_secrets(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A shell command holding secrets in the shapes people pass them, and the secrets."""
    secrets: list[str] = []
    parts: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        secret = draw(_SECRET)
        quote = draw(st.sampled_from(["", '"', "'"]))
        shape = draw(
            st.sampled_from(
                [
                    "-H {q}Authorization: Bearer {s}{q}",
                    "--password={q}{s}{q}",
                    "--api-key {q}{s}{q}",
                    "DB_PASSWORD={q}{s}{q}",
                    "GH_TOKEN={q}{s}{q}",
                    "ghp_{s}",
                    "https://deploy:{s}@example.com/x",
                    "mysql -p{s}",
                    "-H {q}Cookie: session={s}{q}",
                    "aws configure set aws_secret_access_key {s}",
                    '{{"token": "{s}"}}',
                    "sshpass -p {s} ssh host",
                ]
            )
        )
        parts.append(draw(_FILLER))
        parts.append(shape.format(q=quote, s=secret))
        secrets.append(secret)
    return " ".join(parts), secrets


@given(commands_with_secrets())
@settings(max_examples=300)
# found by this test: a second password program on the line after the first (mysql, then sshpass)
@example(("curl -s mysql -p222222222222 curl -s sshpass -p 222222222222 ssh host", ["222222222222"]))
def test_redaction_removes_every_secret_is_idempotent_and_stored_details_stay_valid_json(
    case: tuple[str, list[str]],
) -> None:
    command, secrets = case
    once = redact(command)
    assert redact(once) == once
    assert not any(secret in once for secret in secrets), once
    stored = _stored_detail(detail_json({"command": command, "description": f'quoted "{command}"'}))
    value = json.loads(stored)  # valid JSON, escapes and all
    assert not any(secret in stored for secret in secrets), stored
    assert _stored_detail(stored) == stored  # stored twice, redacted twice: the same
    assert value["command"] == once
