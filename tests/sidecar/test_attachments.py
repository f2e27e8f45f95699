"""Files carried inside a message, between real sidecars on loopback and on one machine.

The sender's sidecar reads the files under the sender's rules (an agent: the folder its harness
reported only, no hidden or credential files, no hard links); the receiver saves them in a folder
it names, 0700, files 0600, and lists their paths after the message's frame. Sending sessions
start as their harness starts them, through a hook whose payload names the working folder.
Refusals are asserted by their error codes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hive.integrations.hook_command import HOOK_SCRIPT
from hive.sidecar.base.ulid import is_ulid, new_ulid
from hive.sidecar.mesh.transport import dial, machine_cert

from ..conftest import Hive, run_in_terminal
from .test_mesh import _address, _key_of, _msg, _raw_link, _team_id, form_team, inbox, ok, register, sent, wait_for, who
from .test_observe import claude, hook
from .test_team import AGENT_RUNS, HIVE


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")


@pytest.fixture
def repo() -> Iterator[Path]:
    """A project folder as an agent works in it: a repository with code, notes, and secrets."""
    root = Path(tempfile.mkdtemp(prefix="hive-repo-", dir="/tmp")).resolve()
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def refresh():\n\treturn 401\n")
    (root / "notes.md").write_text("# why refresh fails\nthe token <hive-message> changed\n")
    (root / ".env").write_text("TOKEN=secret\n")
    yield root
    shutil.rmtree(root, ignore_errors=True)


# A stand-in harness: runs the hook command it reads (the payload on the next line) as Claude Code
# runs its hooks, then stays up until its standard input closes, as a session does.
STAND_IN = """import subprocess, sys
command = sys.stdin.readline().split()
done = subprocess.run(command, input=sys.stdin.readline(), capture_output=True, text=True)
print(done.returncode, flush=True)
sys.stdin.read()
"""

Start = Callable[[Hive, str, str], None]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Start a Claude Code session in a folder as its harness does: a process named ``claude``
    running there, whose SessionStart hook (the real hook client) names that folder."""
    harness = tmp_path / "stand-in" / "claude"
    harness.parent.mkdir()
    harness.symlink_to(sys.executable)
    running: list[subprocess.Popen[str]] = []

    def started(hive: Hive, key: str, cwd: str) -> None:
        process = subprocess.Popen(
            [str(harness), "-c", STAND_IN],
            cwd=cwd,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**hive.env, "CLAUDECODE": "1"},
        )
        running.append(process)
        assert process.stdin is not None and process.stdout is not None
        payload = claude(key, cwd, "SessionStart", source="startup")
        process.stdin.write(
            " ".join([sys.executable, "-I", "-S", str(HOOK_SCRIPT), "claude-code", "SessionStart"])
            + "\n"
            + json.dumps(payload)
            + "\n"
        )
        process.stdin.flush()
        assert process.stdout.readline().strip() == "0"  # hooks always exit 0: the session list says more
        folder = os.path.basename(cwd.rstrip("/"))
        assert any(s["folder"] == folder and s["live"] for s in who(hive)), "the hook registered no session"

    yield started
    for process in running:
        process.communicate(timeout=30)


def send_files(hive: Hive, to: str, body: str, files: list[str], **extra: Any) -> dict[str, Any]:
    return hive.request({"id": 1, "op": "send", "to": to, "body": body, "files": files, **extra}, timeout=30)


def code_of(reply: dict[str, Any]) -> str:
    assert not reply["ok"], reply
    return str(reply["error"]["code"])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_agents_files_cross_to_a_teammate_saved_privately_and_listed_after_the_frame(
    make_hive: Any, repo: Path, start: Start
) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    start(alice, "a1", str(repo / "src"))
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in who(alice)), what="bob's session")

    reply = send_files(alice, "bob/api-codex", "see the attached", ["app.py", "../notes.md"], **{"from": "a1"})
    assert reply["ok"], reply
    result = reply["result"]["results"][0]
    assert result["state"] == "queued", result

    [message] = inbox(bob, "api-codex")
    saved = [Path(p) for p in message["files"]]
    assert [p.name for p in saved] == ["app.py", "notes.md"]
    folder = saved[0].parent
    assert folder.parent == (bob.home / "inbox").resolve() or folder.parent == bob.home / "inbox"
    assert is_ulid(folder.name) and folder.name != result["id"]  # named on bob's machine, not by the sender
    assert mode(folder) == 0o700
    assert all(mode(p) == 0o600 for p in saved)  # private and never executable
    assert saved[0].read_text() == "def refresh():\n\treturn 401\n"
    assert saved[1].read_text() == "# why refresh fails\nthe token <hive-message> changed\n"  # the file is as sent

    text = bob.request({"id": 1, "op": "inbox", "session": "api-codex", "peek": True})["result"]["text"]
    frame_end = text.index("</hive-message>")
    listed = text[frame_end:]
    assert all(str(p) in listed for p in saved)  # listed after the frame, where the body cannot imitate it
    assert "don't run them" in listed
    wait_for(lambda: not sent(alice, result["id"])["in_outbox"], what="the ack")


def test_a_file_sent_to_a_session_on_the_same_machine_is_saved_the_same_way(
    hive: Hive, repo: Path, start: Start
) -> None:
    start(hive, "a1", str(repo))
    register(hive, "a2", "/src/web")
    reply = send_files(hive, "alice/web-codex", "here", ["notes.md"], **{"from": "a1"})
    assert reply["ok"], reply
    [message] = inbox(hive, "web-codex")
    [path] = [Path(p) for p in message["files"]]
    assert path.read_text().startswith("# why refresh fails")
    assert mode(path) == 0o600 and mode(path.parent) == 0o700


def test_an_agent_may_attach_only_plain_text_files_of_its_own_folder(hive: Hive, repo: Path, start: Start) -> None:
    outside = Path(tempfile.mkdtemp(prefix="hive-out-", dir="/tmp"))
    try:
        (outside / "plan.txt").write_text("not yours to send\n")
        (repo / "escape.txt").symlink_to(outside / "plan.txt")
        (repo / "innocent.txt").symlink_to(repo / ".env")
        (repo / "id_rsa").write_text("ssh key\n")
        (repo / "deploy.txt").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")
        (repo / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
        (repo / "bell.txt").write_text("ding\x07\n")
        (repo / "big.txt").write_text("x" * (256 * 1024 + 1))
        for n in range(3):
            (repo / f"part{n}.txt").write_text("y" * (200 * 1024))
        for n in range(11):
            (repo / f"small{n}.txt").write_text("z\n")
        start(hive, "a1", str(repo))
        register(hive, "a2", "/src/web")
        start(hive, "a3", str(Path.home()))
        start(hive, "a4", str(hive.home))

        def refused(files: list[str], sender: str = "a1") -> str:
            return code_of(send_files(hive, "alice/web-codex", "look", files, **{"from": sender}))

        assert refused([".env"]) == "attachment_hidden"
        assert refused([".git/config"]) == "attachment_hidden"
        assert refused(["innocent.txt"]) == "attachment_hidden"  # a link resolved into a hidden file
        assert refused([str(outside / "plan.txt")]) == "attachment_outside"
        assert refused(["../" + outside.name + "/plan.txt"]) == "attachment_outside"  # a .. escape
        assert refused(["escape.txt"]) == "attachment_outside"  # a link resolved out of the repository
        assert refused(["id_rsa"]) == "attachment_credential"
        assert refused(["deploy.txt"]) == "attachment_credential"
        assert refused(["logo.png"]) == "attachment_not_text"
        assert refused(["bell.txt"]) == "attachment_not_text"
        assert refused(["big.txt"]) == "attachment_too_large"
        assert refused([f"part{n}.txt" for n in range(3)]) == "attachment_too_large"  # 600 KB in all
        assert refused([f"small{n}.txt" for n in range(11)]) == "attachment_too_many"
        assert refused(["nowhere.txt"]) == "attachment_missing"
        assert refused(["src"]) == "attachment_missing"  # a folder is not a file
        assert refused(["notes.md"], sender="a3") == "attachment_home"  # works in the home folder
        assert refused(["config.toml"], sender="a4") == "attachment_outside"  # the state folder
        assert inbox(hive, "web-codex") == []  # nothing of any refused send was stored
        assert send_files(hive, "alice/web-codex", "fine", ["notes.md", "src/app.py"], **{"from": "a1"})["ok"]
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def test_hard_links_in_the_repository_to_keys_and_settings_are_refused(
    make_hive: Any, repo: Path, monkeypatch: pytest.MonkeyPatch, start: Start
) -> None:
    home = Path(tempfile.mkdtemp(prefix="hive-home-", dir="/tmp")).resolve()  # one file system with the repo
    try:
        monkeypatch.setenv("HOME", str(home))
        (home / ".aws").mkdir()
        (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key = abc123\n")
        (home / ".config" / "gh").mkdir(parents=True)
        (home / ".config" / "gh" / "hosts.yml").write_text("github.com:\n  oauth_token: gho_abc\n")
        hive = make_hive()
        hive.start()
        hive.cli("init", "acme", "--as", "alice", check=True)  # the machine key is made for a team
        assert (hive.home / "machine.key").exists()
        targets = {
            "aws.txt": home / ".aws" / "credentials",
            "machine.txt": hive.home / "machine.key",
            "gh.txt": home / ".config" / "gh" / "hosts.yml",
        }
        for name, target in targets.items():
            os.link(target, repo / name)
        (repo / "plain.txt").write_text("one name only\n")
        start(hive, "a1", str(repo))
        register(hive, "a2", "/src/web")
        for name in targets:
            assert (
                code_of(send_files(hive, "alice/web-codex", "look", [name], **{"from": "a1"})) == "attachment_hard_link"
            ), name
        assert inbox(hive, "web-codex") == []
        assert send_files(hive, "alice/web-codex", "fine", ["plain.txt"], **{"from": "a1"})["ok"]
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_folder_an_agent_attaches_from_is_the_one_its_harness_reported_not_one_it_declares(
    hive: Hive, repo: Path, start: Start
) -> None:
    register(hive, "a2", "/src/web")
    register(hive, "x1", "/etc")  # a client declaring a session in /etc, with no harness behind it
    assert code_of(send_files(hive, "alice/web-codex", "look", ["passwd"], **{"from": "x1"})) == "attachment_home"
    assert code_of(send_files(hive, "alice/web-codex", "look", ["/etc/passwd"], **{"from": "x1"})) == "attachment_home"
    # Naming its own pid as the harness's does not make a client a harness's plugin.
    ok(hive, "register", session={"key": "x2", "agent": "opencode", "cwd": "/etc", "pid": os.getpid()})
    assert code_of(send_files(hive, "alice/web-codex", "look", ["passwd"], **{"from": "x2"})) == "attachment_home"
    # A session its harness started in the repository, declared again in /etc, stays in the repository.
    start(hive, "a1", str(repo))
    register(hive, "a1", "/etc")
    assert code_of(send_files(hive, "alice/web-codex", "look", ["passwd"], **{"from": "a1"})) == "attachment_missing"
    assert (
        code_of(send_files(hive, "alice/web-codex", "look", ["/etc/passwd"], **{"from": "a1"})) == "attachment_outside"
    )
    # A hook request any client on the socket can send, naming /etc as the session's folder: the
    # harness process still runs in the repository, and that is where its files come from.
    hook(
        hive,
        "claude-code",
        "UserPromptSubmit",
        claude("a1", "/etc", "UserPromptSubmit", prompt="hi"),
        {"CLAUDECODE": "1"},
    )
    assert (
        code_of(send_files(hive, "alice/web-codex", "look", ["/etc/passwd"], **{"from": "a1"})) == "attachment_outside"
    )
    assert code_of(send_files(hive, "alice/web-codex", "look", ["passwd"], **{"from": "a1"})) == "attachment_missing"
    # A client with no session and no terminal names its folder in vain: the one it runs in counts.
    declared = {"op": "send", "to": "alice/web-codex", "body": "look", "files": ["/etc/passwd"], "cwd": "/etc"}
    assert code_of(hive.request_from_script(declared)) == "attachment_outside"
    assert inbox(hive, "web-codex") == []
    assert send_files(hive, "alice/web-codex", "fine", ["notes.md"], **{"from": "a1"})["ok"]


def test_a_plugin_registering_from_inside_its_harness_sets_the_folder_its_agent_attaches_from(
    hive: Hive, repo: Path, tmp_path: Path
) -> None:
    # A process that runs as opencode and registers its own session, as hive's opencode plugin does.
    plugin = tmp_path / "opencode"
    session = {"key": "o1", "agent": "opencode", "cwd": str(repo), "tier": "push"}
    plugin.write_text(
        "import json, os, socket\n"
        f"session = {{**{session!r}, 'pid': os.getpid()}}\n"
        "link = socket.socket(socket.AF_UNIX)\n"
        f"link.connect({str(hive.paths.socket)!r})\n"
        "link.sendall((json.dumps({'id': 1, 'op': 'register', 'session': session}) + '\\n').encode())\n"
        "print(link.makefile().readline())\n"
    )
    plugin.write_text(plugin.read_text() + "import sys; sys.stdin.read()\n")  # the harness runs on
    running = subprocess.Popen(
        [sys.executable, str(plugin)], cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=hive.env
    )
    try:
        assert running.stdout is not None
        assert json.loads(running.stdout.readline())["ok"]
        register(hive, "a2", "/src/web")
        assert send_files(hive, "alice/web-codex", "see", ["notes.md"], **{"from": "o1"})["ok"]
        assert (
            code_of(send_files(hive, "alice/web-codex", "look", ["/etc/passwd"], **{"from": "o1"}))
            == "attachment_outside"
        )
    finally:
        running.communicate(timeout=30)
    # Its harness gone, the session has no folder to attach from.
    assert code_of(send_files(hive, "alice/web-codex", "see", ["notes.md"], **{"from": "o1"})) == "attachment_home"


def test_a_person_at_the_terminal_may_attach_any_text_file_their_script_only_its_folders_and_an_agents_shell_none(
    hive: Hive, repo: Path
) -> None:
    outside = Path(tempfile.mkdtemp(prefix="hive-out-", dir="/tmp"))
    try:
        (outside / "plan.txt").write_text("the plan\n")
        (outside / "latest.txt").symlink_to(outside / "plan.txt")
        register(hive, "a2", "/src/web")
        code, output = run_in_terminal(hive, "send", "--file", str(outside / "latest.txt"), "alice/web-codex", "fyi")
        assert code == 0, output
        [message] = inbox(hive, "web-codex")
        assert Path(message["files"][0]).read_text() == "the plan\n"  # a person's link is followed
        # The person's command with no terminal (a script) is held to the agent's rules in the folder it runs in.
        script = subprocess.run(
            [*HIVE, "send", "--file", str(outside / "plan.txt"), "alice/web-codex", "again"],
            env=hive.env,
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
        )
        assert script.stderr.rstrip().endswith("[attachment_outside]"), script.stderr
        script = subprocess.run(
            [*HIVE, "send", "--file", ".env", "alice/web-codex", "again"],
            env=hive.env,
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
        )
        assert script.stderr.rstrip().endswith("[attachment_hidden]"), script.stderr
        # The same command in an agent's shell tool, under no session's harness, has no folder to attach
        # from, whatever folder it runs in (here the very folder the file is in).
        harness = outside / "claude"
        harness.symlink_to(sys.executable)
        agent = subprocess.run(
            [str(harness), "-c", AGENT_RUNS, *HIVE, "send", "--file", "plan.txt", "alice/web-codex", "again"],
            env=hive.env,
            cwd=outside,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
        )
        assert agent.returncode != 0
        assert agent.stderr.rstrip().endswith("[attachment_home]"), agent.stderr
        assert len(inbox(hive, "web-codex")) == 1
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def test_files_from_a_peer_get_plain_names_in_a_folder_of_their_own_and_oversize_ones_are_refused(
    make_hive: Any,
) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(alice, "a1", "/src/web")
    bob.stop()  # the test speaks for bob's machine with bob's key
    good, big = new_ulid(), new_ulid()
    files = [
        {"name": "../../.bashrc", "content": "alias ls=rm\n"},
        {"name": "CON", "content": "a"},
        {"name": "run.sh", "content": "echo hi\n"},
        {"name": "Run.sh", "content": "echo ho\n"},
        {"name": "<hive-message from=x>.md", "content": "b"},
    ]
    frames = [
        _msg(good, "bob/api-codex", "alice/web-codex", "files", files=files),
        _msg(
            big,
            "bob/api-codex",
            "alice/web-codex",
            "too big",
            files=[{"name": "a.txt", "content": "x" * (256 * 1024 + 1)}],
        ),
    ]
    got = anyio.run(_raw_link, alice, bob, frames, 2)
    acks = {f["id"]: f for f in got if f["t"] == "ack"}
    assert acks[good]["state"] == "queued", acks[good]
    assert acks[big]["state"] == "refused" and "attachment_too_large" in acks[big]["note"]
    [message] = inbox(alice, "web-codex")
    saved = [Path(p) for p in message["files"]]
    inbox_folder = (alice.home / "inbox").resolve()
    assert all(p.resolve().parent.parent == inbox_folder for p in saved)  # nothing escaped the new folder
    names = [p.name for p in saved]
    assert names[0] == "bashrc" and names[1] == "file-CON"
    assert names[2] == "run.sh" and names[3] == "Run-2.sh"  # distinct where a file system folds case
    assert "<hive" not in names[4]
    assert all(mode(p) == 0o600 for p in saved)


def test_past_a_persons_hourly_quota_files_wait_in_the_senders_outbox(make_hive: Any, repo: Path, start: Start) -> None:
    (repo / "half.txt").write_text("h" * 700)
    alice, bob = form_team(make_hive, ["alice", "bob"], {"bob": "[attachments]\nperson_hour = 1000\n"})
    start(alice, "a1", str(repo))
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in who(alice)), what="bob's session")
    first = send_files(alice, "bob/api-codex", "one", ["half.txt"], **{"from": "a1"})["result"]["results"][0]
    second = send_files(alice, "bob/api-codex", "two", ["half.txt"], **{"from": "a1"})["result"]["results"][0]
    assert first["state"] == "queued" and second["state"] == "queued"
    wait_for(lambda: sent(alice, second["id"])["state"] == "retry", what="the quota's retry")
    assert sent(alice, second["id"])["in_outbox"]
    # A later message without files crosses (the quota counts files); once bob has it, the
    # second had every chance to arrive too.
    ok(alice, "send", to="bob/api-codex", body="marker", **{"from": "a1"})
    wait_for(lambda: [m["body"] for m in inbox(bob, "api-codex")][-1:] == ["marker"], what="the marker")
    assert [m["body"] for m in inbox(bob, "api-codex")] == ["one", "marker"]  # the second waits, it is not lost
    assert ok(alice, "sent", ids=[second["id"]])["messages"][0]["state"] == "retry"
    assert os.path.isdir(bob.home / "inbox")


def test_a_held_messages_files_are_saved_only_once_it_is_approved_and_never_if_dropped(
    make_hive: Any, repo: Path, start: Start
) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"], {"bob": '[inbound.people]\nalice = "hold"\n'})
    start(alice, "a1", str(repo))
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in who(alice)), what="bob's session")
    kept = send_files(alice, "bob/api-codex", "keep this", ["notes.md"], **{"from": "a1"})["result"]["results"][0]
    dropped = send_files(alice, "bob/api-codex", "not this", ["src/app.py"], **{"from": "a1"})["result"]["results"][0]
    assert kept["state"] == dropped["state"] == "held"
    assert not (bob.home / "inbox").exists()  # nothing saved while held
    assert [h["files"] for h in ok(bob, "held")["held"]] == [["notes.md"], ["app.py"]]
    assert "with files: notes.md" in bob.cli("held", check=True).stdout
    ok(bob, "drop", ids=[dropped["id"]])
    ok(bob, "approve", ids=[kept["id"]])
    [message] = inbox(bob, "api-codex")
    assert message["body"] == "keep this"
    [path] = [Path(p) for p in message["files"]]
    assert path.name == "notes.md" and path.read_text().startswith("# why refresh fails")
    assert [p.name for p in (bob.home / "inbox").iterdir()] == [path.parent.name]  # one folder: the approved one


async def _as_an_older_hive(alice: Hive, bob: Hive, sends: list[Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Speak for bob's machine as a hive without the ``files`` feature; collect alice's msg frames."""
    got: list[dict[str, Any]] = []
    results: list[Any] = []
    async with dial(_address(alice), machine_cert(_key_of(bob)), lambda key, alpn: True) as link:
        await link.send({"t": "hello", "team": _team_id(alice), "proto": 1, "features": ["receipts"]})
        with anyio.fail_after(30):
            while (await link.receive())["t"] != "hello":
                pass
            await link.send(
                {
                    "t": "presence",
                    "presence": {
                        "sessions": [{"name": "api-codex", "agent": "codex", "tier": "pull"}],
                        "features": ["receipts"],
                    },
                }
            )
            await anyio.to_thread.run_sync(
                lambda: wait_for(
                    lambda: any(s["address"] == "bob/api-codex" and s["live"] for s in who(alice)), what="bob's session"
                )
            )
            async with anyio.create_task_group() as tg:

                async def send_all() -> None:
                    for send in sends:
                        results.append(await anyio.to_thread.run_sync(send))

                tg.start_soon(send_all)
                while len(got) < 1:
                    frame = await link.receive()
                    if frame["t"] == "msg":
                        got.append(frame["msg"])
                        await link.send({"t": "ack", "id": frame["msg"]["id"], "state": "queued", "note": "queued"})
    return got, results


def test_files_for_a_machine_whose_hive_takes_none_go_in_the_text_or_the_send_is_refused(
    make_hive: Any, repo: Path, start: Start
) -> None:
    (repo / "big.txt").write_text("b" * (70 * 1024))
    alice, bob = form_team(make_hive, ["alice", "bob"])
    start(alice, "a1", str(repo))
    bob.stop()  # the test speaks for bob's machine, as an older hive

    def small() -> Any:
        return send_files(alice, "bob/api-codex", "see below", ["src/app.py"], **{"from": "a1"})

    def too_big() -> Any:
        return send_files(alice, "bob/api-codex", "too much", ["big.txt"], **{"from": "a1"})

    got, results = anyio.run(_as_an_older_hive, alice, bob, [too_big, small])
    refused, sent_small = (r["result"]["results"][0] for r in results)
    assert refused["state"] == "refused" and "takes no attached files" in refused["note"]
    [msg] = got
    assert "files" not in msg
    assert msg["body"] == "see below\n\napp.py:\n```\ndef refresh():\n\treturn 401\n```"
    assert sent_small["state"] == "queued"
