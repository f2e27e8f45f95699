"""Passive discovery and the disk sources of ``doing``, end to end against real sidecars.

Each test gives the sidecar a home folder of its own (``HOME``) and writes there what the
harnesses write (../shared/notes/push.md §1c for Claude Code's running-session files, the
seed's Part 1 §14 for Codex's thread index and Claude Code's task folders); what a person or a
teammate sees is read from ``who`` and from the MCP server's ``list_team``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hive.sidecar.presence.discover import places, read_transcript

from ..conftest import Hive, process_gone
from .test_mcp_server import call, data, hive_mcp, text
from .test_mesh import form_team, ok, wait_for
from .test_observe import claude, claude_edit, git_repo, hook

UUID = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The harnesses' home folder: sidecars started in this test inherit it."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    return folder


@pytest.fixture
def harness_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing in for a running harness: its pid is what the session file names."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(value), encoding="utf-8")
    os.replace(temporary, path)  # as the harnesses do: a reader never sees half a file


def running_file(home: Path, pid: int, sid: str, cwd: str, status: str, name: str = "", **extra: Any) -> Path:
    path = home / ".claude" / "sessions" / f"{pid}.json"
    write_json(
        path,
        {
            "pid": pid,
            "sessionId": sid,
            "cwd": cwd,
            "startedAt": 1764670000000,
            "version": "2.1.197",
            "peerProtocol": 1,
            "kind": "interactive",
            "entrypoint": "cli",
            "name": name,
            "status": status,
            "updatedAt": 1764670000000,
            **extra,
        },
    )
    return path


def session_at(hive: Hive, **match: Any) -> dict[str, Any] | None:
    for s in ok(hive, "who", all=True)["sessions"]:
        if all(s.get(k) == v for k, v in match.items()):
            return s
    return None


def test_each_harness_transcript_head_names_its_session_and_folder(tmp_path: Path) -> None:
    heads = {
        "codex": {"timestamp": "t", "type": "session_meta", "payload": {"id": "thread-1", "cwd": "/w/api"}},
        "pi": {"type": "session", "version": 3, "id": "pi-1", "timestamp": "t", "cwd": "/w/api"},
        "claude-code": {"type": "user", "sessionId": "c-1", "cwd": "/w/api", "message": {"content": "hi"}},
    }
    for harness, head in heads.items():
        path = tmp_path / f"{harness}.jsonl"
        path.write_text(json.dumps({"type": "noise"}) + "\n" + json.dumps(head) + "\n", encoding="utf-8")
        found = read_transcript(path, harness, time.time())
        assert found is not None and (found.key, found.cwd) == (
            head.get("id") or head.get("sessionId") or head["payload"]["id"],
            "/w/api",
        )
        os.utime(path, (time.time() - 3600, time.time() - 3600))
        assert read_transcript(path, harness, time.time()) is None  # quiet for an hour: not running
    # A Codex sub-agent's thread is part of the session that spawned it, not a session of its own.
    child = tmp_path / "child.jsonl"
    child.write_text(
        json.dumps(
            {
                "type": "session_meta",
                "payload": {
                    "id": "thread-2",
                    "cwd": "/w/api",
                    "source": {"subagent": {"thread_spawn": {"parent_thread_id": "t1"}}},
                },
            }
        )
        + "\n",
        encoding="utf-8",
    )
    assert read_transcript(child, "codex", time.time()) is None
    # The places come from the descriptors: Claude Code by its running-session files, the others by
    # their transcripts.
    kinds = {(p.harness, p.kind) for p in places(tmp_path)}
    assert {("claude-code", "running"), ("codex", "transcript"), ("pi", "transcript")} <= kinds
    assert ("claude-code", "transcript") not in kinds


def test_a_claude_code_session_hive_never_hooked_is_listed_unmanaged_with_its_state_title_and_end(
    make_hive: Any, home: Path, tmp_path: Path, harness_process: subprocess.Popen[bytes]
) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    # It was running before the sidecar started: found by the first scan.
    transcript = home / ".claude" / "projects" / "-tmp-api" / "c-old.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text(json.dumps({"type": "ai-title", "aiTitle": "JWT middleware"}) + "\n", encoding="utf-8")
    running_file(home, harness_process.pid, "c-old", cwd, "idle")
    hive = make_hive()
    hive.start()
    found = wait_for(
        lambda: session_at(hive, agent="claude-code", live=True, unmanaged=True, doing="JWT middleware"),
        what="discovery, with the title from the transcript",
    )
    assert found["state"] == "idle" and found["repo"] == "github.com/acme/api"
    assert "idle, unmanaged" in hive.cli("who", check=True).stdout
    # It gets busy: the file changes, presence follows without any hook.
    running_file(home, harness_process.pid, "c-old", cwd, "busy")
    wait_for(lambda: session_at(hive, agent="claude-code", state="busy"), what="busy from the running file")
    # /clear: the same process, a new session id in its file. The old session ends and the new one
    # (no transcript yet, so no title) takes its place and its name.
    running_file(home, harness_process.pid, "c-cleared", cwd, "idle")
    wait_for(
        lambda: (
            [(s["address"], s["doing"], s["state"]) for s in ok(hive, "who", all=True)["sessions"]]
            == [(found["address"], "", "idle")]
        ),
        what="the cleared session replacing the old one",
    )
    # Its process ends: so does the session.
    harness_process.kill()
    harness_process.wait()
    wait_for(lambda: session_at(hive, agent="claude-code", live=False), what="the session ended with its pid")
    assert ok(hive, "who")["sessions"] == []


def test_a_session_found_on_disk_becomes_managed_at_its_first_hook_and_its_file_going_ends_only_unmanaged_ones(
    make_hive: Any, home: Path, tmp_path: Path, harness_process: subprocess.Popen[bytes]
) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    hive = make_hive()
    hive.start()
    # Started after the sidecar: found through the watched folder.
    first = running_file(home, harness_process.pid, "c-new", cwd, "idle", name="billing fix")
    found = wait_for(lambda: session_at(hive, unmanaged=True, doing="billing fix"), what="a session appearing on disk")
    # Mail to it waits, and the sender is told the session cannot read it yet.
    [sent] = ok(hive, "send", to=found["address"], body="hi")["results"]
    assert sent["state"] == "queued" and "found it on disk" in sent["note"]
    hook(
        hive,
        "claude-code",
        "UserPromptSubmit",
        claude("c-new", cwd, "UserPromptSubmit", prompt="go"),
        {"CLAUDECODE": "1"},
    )
    [me] = ok(hive, "who")["sessions"]
    assert me["unmanaged"] is False and me["state"] == "busy" and me["tier"] == "push"
    # No hook tells that it waits on a permission prompt; its running-session file does.
    running_file(home, harness_process.pid, "c-new", cwd, "waiting", name="billing fix", waitingFor="permission prompt")
    wait_for(lambda: session_at(hive, state="waiting_approval"), what="waiting from the running file")
    [asked] = [e for e in ok(hive, "events", session="c-new")["events"] if e["action"] == "approval.requested"]
    assert asked["method"] == "poll" and json.loads(asked["detail"]) == {"waiting_for": "permission prompt"}
    hook(hive, "claude-code", "PostToolUse", claude_edit("c-new", cwd, f"{cwd}/src/app.py"), {"CLAUDECODE": "1"})
    assert ok(hive, "who")["sessions"][0]["state"] == "busy"  # the person answered; the tool ran
    first.unlink()  # a managed session's end is its hooks' business
    # A file written after the removal, in the same folder, shows once the removal was looked at.
    running_file(home, os.getpid(), "c-marker", cwd, "idle")
    wait_for(lambda: session_at(hive, unmanaged=True, live=True), what="the session written after the removal")
    assert session_at(hive, address=me["address"], live=True), "the managed session ended with its file"


def test_sessions_found_in_a_folder_turned_off_are_never_listed(
    make_hive: Any, home: Path, tmp_path: Path, harness_process: subprocess.Popen[bytes]
) -> None:
    private, _ = git_repo(tmp_path / "private")
    public, _ = git_repo(tmp_path / "public")
    hive = make_hive()
    hive.start()
    hive.cli("folder", private, "off", check=True)
    running_file(home, harness_process.pid, "c-private", private, "busy")
    other = subprocess.Popen(["sleep", "600"])
    try:
        running_file(home, other.pid, "c-public", public, "busy")
        wait_for(lambda: session_at(hive, unmanaged=True), what="the session in the folder that is on")
        # A file written after both, in the same folder, shows once those before it were looked at.
        running_file(home, os.getpid(), "c-marker", public, "busy")
        wait_for(lambda: len(ok(hive, "who", all=True)["sessions"]) == 2, what="the session written after both")
        assert [s["folder"] for s in ok(hive, "who", all=True)["sessions"]] == ["public", "public"]
        # Turned off later: the session already listed leaves.
        hive.cli("folder", public, "off", check=True)
        wait_for(lambda: ok(hive, "who")["sessions"] == [], what="the listed session leaving")
    finally:
        other.kill()
        other.wait()


def codex_rollout(home: Path, cwd: str) -> tuple[Path, Path]:
    """A Codex session's rollout, written to just now, and Codex's thread index naming someone else."""
    day = home / ".codex" / "sessions" / "2026" / "12" / "02"
    day.mkdir(parents=True)
    meta = {
        "timestamp": "2026-12-02T10:00:00.000Z",
        "type": "session_meta",
        "payload": {
            "id": UUID,
            "timestamp": "2026-12-02T10:00:00.000Z",
            "cwd": cwd,
            "originator": "codex_cli_rs",
            "cli_version": "0.171.0",
        },
    }
    rollout = day / f"rollout-2026-12-02T10-00-00-{UUID}.jsonl"
    rollout.write_text(json.dumps(meta) + "\n", encoding="utf-8")
    # A rollout nobody wrote to for hours is not a running session.
    old = day / "rollout-2026-12-02T01-00-00-0199a1b2-0000-7000-8000-000000000000.jsonl"
    old.write_text(json.dumps({**meta, "payload": {**meta["payload"], "id": "old-thread"}}) + "\n", encoding="utf-8")
    os.utime(old, (time.time() - 4 * 3600, time.time() - 4 * 3600))
    index = home / ".codex" / "session_index.jsonl"
    index.write_text(
        json.dumps({"id": "someone-else", "thread_name": "Other", "updated_at": "x"}) + "\n", encoding="utf-8"
    )
    return rollout, index


def append(path: Path, *lines: str) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.write("".join(line + "\n" for line in lines))


def name_and_plan(rollout: Path, index: Path) -> None:
    """Codex names the thread in its index, and its update_plan call lands in the rollout."""
    append(index, json.dumps({"id": UUID, "thread_name": "Login flow", "updated_at": "2026-12-02T10:01:00Z"}))
    plan = {
        "plan": [
            {"step": "read the handler", "status": "completed"},
            {"step": "add the refresh token", "status": "in_progress"},
        ]
    }
    call = {"type": "function_call", "name": "update_plan", "arguments": json.dumps(plan), "call_id": "call_1"}
    append(rollout, json.dumps({"timestamp": "2026-12-02T10:01:00.000Z", "type": "response_item", "payload": call}))


@pytest.mark.parametrize("after", ["", "lines nested thousands deep or with a lone surrogate"])
def test_a_codex_session_is_found_from_its_recent_rollout_and_named_by_its_thread_name_and_plan(
    make_hive: Any, home: Path, tmp_path: Path, after: str
) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    rollout, index = codex_rollout(home, cwd)
    hive = make_hive()
    hive.start()
    wait_for(lambda: session_at(hive, agent="codex", unmanaged=True), what="the codex session from its rollout")
    assert [s["agent"] for s in ok(hive, "who", all=True)["sessions"]] == ["codex"]
    if after:
        # What the harness wrote is passed over: a tool's output kept as structure 5,000 deep (the
        # stdlib parser's RecursionError stopped every transcript's reader), a thread name with a lone
        # UTF-16 surrogate (a JSON escape: no text the database or a teammate could take).
        append(rollout, '{"type": "response_item", "payload": ' + "[" * 5000 + "]" * 5000 + "}")
        append(index, json.dumps({"id": UUID, "thread_name": "?"}).replace("?", "\\ud800 half a character"))
    name_and_plan(rollout, index)
    wait_for(
        lambda: session_at(hive, agent="codex", doing="Login flow · add the refresh token"),
        what="doing from the thread index and the plan",
    )


def test_claude_code_task_files_name_the_task_even_when_the_folder_appears_later(
    make_hive: Any, home: Path, tmp_path: Path
) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    (home / ".claude").mkdir()
    hive = make_hive()
    hive.start()
    hook(hive, "claude-code", "SessionStart", claude("t1", cwd, "SessionStart", source="startup"), {"CLAUDECODE": "1"})
    tasks = home / ".claude" / "tasks" / "t1"
    write_json(
        tasks / "1.json",
        {
            "id": "1",
            "subject": "Write tests",
            "activeForm": "Writing tests",
            "status": "completed",
            "blocks": [],
            "blockedBy": [],
        },
    )
    write_json(
        tasks / "2.json",
        {
            "id": "2",
            "subject": "Rotate keys",
            "activeForm": "Rotating the signing keys",
            "status": "in_progress",
            "blocks": [],
            "blockedBy": [],
        },
    )
    wait_for(lambda: session_at(hive, doing="Rotating the signing keys"), what="the task from the task folder")
    write_json(
        tasks / "2.json",
        {
            "id": "2",
            "subject": "Rotate keys",
            "activeForm": "Rotating the signing keys",
            "status": "completed",
            "blocks": [],
            "blockedBy": [],
        },
    )
    write_json(tasks / "3.json", {"id": "3", "subject": "Ship", "status": "in_progress"})
    wait_for(lambda: session_at(hive, doing="Ship"), what="the next task")


def test_unmanaged_sessions_reach_teammates_only_when_share_unmanaged_is_on(
    make_hive: Any, home: Path, tmp_path: Path, harness_process: subprocess.Popen[bytes]
) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"], {"alice": "\n[sidecar]\nshare_unmanaged = true\n"})
    cwd, _ = git_repo(tmp_path / "api")
    # Both machines see the same home here, so both find the one session; only alice shares hers.
    hook(
        bob,
        "codex",
        "SessionStart",
        {"session_id": "b1", "cwd": cwd, "hook_event_name": "SessionStart", "source": "startup"},
    )
    running_file(home, harness_process.pid, "c-shared", cwd, "busy")
    for hive, person in ((alice, "alice"), (bob, "bob")):
        wait_for(lambda h=hive, p=person: session_at(h, unmanaged=True, person=p), what=f"{person}'s own copy")
    seen_by_bob = wait_for(lambda: session_at(bob, person="alice", unmanaged=True), what="alice's unmanaged at bob")
    assert seen_by_bob["state"] == "busy"
    wait_for(lambda: session_at(alice, person="bob", agent="codex"), what="bob's managed session at alice")
    assert session_at(alice, person="bob", unmanaged=True) is None


@pytest.mark.anyio
async def test_list_team_text_shows_state_head_files_and_unmanaged(
    make_hive: Any, home: Path, tmp_path: Path, harness_process: subprocess.Popen[bytes]
) -> None:
    cwd, head = git_repo(tmp_path / "api")
    hive = make_hive()
    hive.start()
    hook(hive, "claude-code", "SessionStart", claude("m1", cwd, "SessionStart", source="startup"), {"CLAUDECODE": "1"})
    hook(hive, "claude-code", "PostToolUse", claude_edit("m1", cwd, f"{cwd}/src/app.py"), {"CLAUDECODE": "1"})
    running_file(home, harness_process.pid, "c-side", cwd, "idle")
    wait_for(lambda: session_at(hive, unmanaged=True), what="the unmanaged session")
    async with hive_mcp(hive) as session:
        result = await call(session, "list_team", as_="m1")
    shown = text(result)
    mine = next(line for line in shown.splitlines() if "this is you" in line)
    assert ", busy" in mine and f"HEAD {head[:12]}" in mine
    assert "files touched in the last 30 min: src/app.py" in shown
    other = next(line for line in shown.splitlines() if line.startswith("- ") and "this is you" not in line)
    assert "unmanaged" in other and ", idle" in other
    assert {s["unmanaged"] for s in data(result)["sessions"]} == {True, False}


def test_hive_stop_ends_both_file_watchers_by_the_stopping_event_rather_than_their_next_wake_up(
    make_hive: Any, home: Path, tmp_path: Path, harness_process: subprocess.Popen[bytes]
) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    transcript = home / ".claude" / "projects" / "-tmp-api" / "c-stop.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text(json.dumps({"type": "ai-title", "aiTitle": "JWT middleware"}) + "\n", encoding="utf-8")
    running_file(home, harness_process.pid, "c-stop", cwd, "idle")
    hive = make_hive()
    pid = hive.start()
    wait_for(lambda: session_at(hive, unmanaged=True, doing="JWT middleware"), what="the session, found on disk")
    # Each watcher has delivered a change since it started, so each is back waiting in its thread.
    with transcript.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"type": "ai-title", "aiTitle": "JWT refresh"}) + "\n")
    wait_for(lambda: session_at(hive, doing="JWT refresh"), what="the new title, from the transcript watcher")
    running_file(home, harness_process.pid, "c-stop", cwd, "busy")
    wait_for(lambda: session_at(hive, state="busy"), what="busy, from the harness-folder watcher")
    stopped = hive.cli("stop", timeout=30)
    assert stopped.returncode == 0 and f"stopped the sidecar (pid {pid})" in stopped.stdout, stopped
    assert process_gone(pid)
    # The watchers returned because the stopping event was set, not because a wake-up came and
    # the cancellation followed it: only the former logs these lines.
    log = (hive.home / "sidecar.log").read_text()
    assert "stopped watching harnesses' folders: the sidecar is stopping" in log, log
    assert "stopped following what harnesses write: the sidecar is stopping" in log, log


def test_a_managed_session_that_ended_never_comes_back_from_a_file_written_after_its_end(
    make_hive: Any, home: Path, tmp_path: Path, harness_process: subprocess.Popen[bytes]
) -> None:
    cwd, _ = git_repo(tmp_path / "api")
    hive = make_hive()
    hive.start()
    hook(
        hive,
        "claude-code",
        "SessionStart",
        claude("c-done", cwd, "SessionStart", source="startup"),
        {"CLAUDECODE": "1"},
    )
    [me] = ok(hive, "who")["sessions"]
    hook(hive, "claude-code", "SessionEnd", claude("c-done", cwd, "SessionEnd", reason="exit"), {"CLAUDECODE": "1"})
    assert ok(hive, "who")["sessions"] == []
    # The harness writes its running-session file once more after the end hook ran.
    later = time.time() + 5  # seconds after the end, as a harness that keeps writing it would
    path = running_file(home, harness_process.pid, "c-done", cwd, "idle", updatedAt=int(later * 1000))
    os.utime(path, (later, later))
    other, _ = git_repo(tmp_path / "web")  # looked at after it: once this one shows, that file was too
    running_file(home, os.getpid(), "c-marker", other, "idle")
    marker = wait_for(lambda: session_at(hive, unmanaged=True, live=True), what="the file written after the end")
    assert [s["address"] for s in ok(hive, "who")["sessions"]] == [marker["address"]] != [me["address"]]
