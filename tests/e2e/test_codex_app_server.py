"""Codex push, below the TUI: hive's app-server client against a real ``codex app-server`` on a
unix control socket (the daemon the TUI runs on), offline against the scripted model; and the
sidecar's side when no Codex TUI runs a session's thread.

The daemon here is started by the test (``codex app-server --listen unix://``, the TUI's own
transport) and a thread is opened on it the way the TUI opens one (``thread/start``); the push
then goes in as it does for a person's TUI. The whole TUI, in tmux, is ``test_push_tui.py``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from hive.integrations.codex import app_server
from hive.integrations.codex.app_server import Delivery, NotRunning, PushFailed
from hive.integrations.codex.tui import find_tui, is_tui
from tests.conftest import Hive
from tests.installer.conftest import require_cli

from .conftest import contract, wait_for
from .model_server import ModelServer, Request, Script, call, say
from .scenarios import after_last_call
from .test_codex import CONFIG, PORT_PLACEHOLDER

HARNESS = "codex"


class Daemon:
    """A Codex app-server on its control socket, in a CODEX_HOME of its own."""

    def __init__(self, home: Path, process: subprocess.Popen[bytes]) -> None:
        self.home = home
        self.process = process

    @property
    def socket(self) -> Path:
        return self.home / app_server.SOCKET

    def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request on a connection of its own, as a TUI or another client makes them."""

        async def run() -> dict[str, Any]:
            async with app_server.connect(self.socket, client="hive-test") as rpc:
                return await rpc.call(method, params)

        return anyio.run(run)

    def new_thread(self, cwd: Path) -> str:
        return str(self.rpc("thread/start", {"cwd": str(cwd)})["thread"]["id"])

    def push(self, thread: str, text: str) -> Delivery:
        return anyio.run(app_server.send, self.socket, thread, text)


@pytest.fixture
def daemon(model: ModelServer) -> Iterator[Daemon]:
    root = Path(tempfile.mkdtemp(prefix="hive-cx-", dir="/tmp"))
    home = root / ".codex"
    home.mkdir()
    (root / "project").mkdir()
    (home / "config.toml").write_text(CONFIG.replace(PORT_PLACEHOLDER, model.url), encoding="utf-8")
    env = {
        "HOME": str(root),
        "CODEX_HOME": str(home),
        "FAKE_OPENAI_KEY": "sk-fake",
        "PATH": "/usr/bin:/bin",
        "NO_COLOR": "1",
    }
    process = subprocess.Popen(
        [str(require_cli(HARNESS)), "app-server", "--listen", "unix://"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    daemon = Daemon(home, process)
    try:

        def answers() -> bool:
            assert process.poll() is None, f"{contract(HARNESS)}: the app-server exited: {process.stderr.read()!r}"
            with contextlib.suppress(PushFailed):
                daemon.rpc("thread/loaded/list", {})
                return True
            return False

        wait_for(answers, timeout=60, what=f"{contract(HARNESS)}: the app-server's control socket")
        yield daemon
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        assert process.stderr is not None
        process.stderr.close()
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_a_push_into_an_idle_thread_starts_a_turn_whose_user_message_reaches_the_model(
    model: ModelServer, daemon: Daemon
) -> None:
    who = contract(HARNESS)
    model.script = Script({"PUSHMARK_idle": [say("IDLE-ANSWER-OK")]})
    thread = daemon.new_thread(daemon.home.parent / "project")
    delivery = daemon.push(thread, "PUSHMARK_idle is the api up?")
    assert delivery.how == "start" and delivery.turn, f"{who}: {delivery}"
    carriers = model.wait_for(
        lambda: model.seen("PUSHMARK_idle is the api up?"),
        timeout=60,
        what=f"{who}: the pushed turn to reach the model",
    )
    turns = model.requests[carriers[0]].turns
    assert turns[-1].role == "user" and "PUSHMARK_idle" in turns[-1].text, f"{who}: {model.transcript()}"


def test_a_push_larger_than_one_short_websocket_frame_reaches_the_model_whole(
    model: ModelServer, daemon: Daemon
) -> None:
    who = contract(HARNESS)
    # Over 65535 bytes: the frame carries a 64-bit length (RFC 6455 §5.2), as hive's largest messages do.
    body = "PUSHMARK_large " + " ".join(f"line-{n:05d}" for n in range(7000)) + " PUSHMARK_end"
    assert len(body.encode()) > 1 << 16
    thread = daemon.new_thread(daemon.home.parent / "project")
    assert daemon.push(thread, body).how == "start"
    carriers = model.wait_for(lambda: model.seen("PUSHMARK_end"), timeout=60, what=f"{who}: the large push")
    assert body in model.requests[carriers[0]].text, f"{who}: the large push arrived altered"


def test_a_push_during_a_slow_tool_steers_the_running_turn_and_arrives_after_the_tool_result(
    model: ModelServer, daemon: Daemon
) -> None:
    who = contract(HARNESS)
    calling = threading.Event()

    def tool_goes_out(request: Request) -> None:
        calling.set()

    model.script = Script(
        {
            "E2E-BUSY": [
                call("exec_command", {"cmd": "sleep 6", "yield_time_ms": 30000}, before=tool_goes_out),
                say("busy done"),
            ]
        }
    )
    thread = daemon.new_thread(daemon.home.parent / "project")
    daemon.rpc("turn/start", {"threadId": thread, "input": [{"type": "text", "text": "E2E-BUSY run the check"}]})
    assert calling.wait(60), f"{who}: the model was never asked for the turn:\n{model.transcript()}"
    # The tool runs for 6 s: the thread is active until its result went back to the model.
    wait_for(
        lambda: daemon.rpc("thread/read", {"threadId": thread})["thread"]["status"]["type"] == "active",
        timeout=30,
        what=f"{who}: the thread to be running its turn",
    )
    delivery = daemon.push(thread, "PUSHMARK_busy the port is 8443")
    assert delivery.how == "steer", f"{who}: {delivery}"
    carriers = model.wait_for(
        lambda: model.seen("PUSHMARK_busy the port is 8443"),
        timeout=60,
        what=f"{who}: the steered text to reach the model",
    )
    first = model.requests[carriers[0]]
    assert "PUSHMARK_busy" in after_last_call(first), f"{who}: not after the tool result:\n{model.transcript()}"
    last_call = next(t for t in reversed(first.turns) if t.role == "assistant" and t.calls)
    assert any("exec_command" in name for name in last_call.calls), f"{who}: {model.transcript()}"
    model.wait_for(
        lambda: any("busy done" in r.reply for r in model.requests), timeout=60, what=f"{who}: the same turn to end"
    )


def test_a_push_into_a_thread_the_app_server_does_not_run_fails_as_not_running(daemon: Daemon) -> None:
    with pytest.raises(NotRunning) as failed:
        daemon.push("01a23766-0000-7000-8000-000000000000", "PUSHMARK_nobody")
    assert failed.value.code == "push_not_running"


def test_a_push_with_no_app_server_and_no_codex_binary_fails_without_a_fallback(tmp_path: Path) -> None:
    with pytest.raises(PushFailed) as failed:
        anyio.run(app_server.deliver, tmp_path, "01a23766-0000-7000-8000-000000000000", "PUSHMARK_x", None)
    assert failed.value.code == "push_failed"


def test_a_hung_app_server_fails_the_push_at_its_deadline_then_the_codex_queue_fallback_is_tried(
    tmp_path: Path,
) -> None:
    home = tmp_path / ".codex"
    (home / app_server.SOCKET).parent.mkdir(parents=True)
    # As Codex lays it out: the control socket is a symlink to a short path under /tmp.
    short = Path(tempfile.mkdtemp(prefix="hive-cxh-", dir="/tmp"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(short / "s"))
    (home / app_server.SOCKET).symlink_to(short / "s")
    listener.listen(4)  # accepts (the kernel's backlog) and never answers the handshake
    try:
        with pytest.raises(PushFailed) as failed:
            anyio.run(
                app_server.deliver,
                home,
                "01a23766-0000-7000-8000-000000000000",
                "PUSHMARK_hung",
                require_cli(HARNESS),
                1.0,
            )
    finally:
        listener.close()
        subprocess.run(["rm", "-rf", str(short)], check=False)
    # The fallback ran and was refused too (Codex has no rollout for that thread); its failure is the cause.
    assert failed.value.code == "push_failed"
    assert isinstance(failed.value.__cause__, PushFailed) and failed.value.__cause__.code == "push_failed"


def test_codex_queue_the_fallback_refuses_a_thread_codex_has_no_rollout_for(daemon: Daemon) -> None:
    with pytest.raises(PushFailed) as failed:
        anyio.run(
            app_server.queue,
            require_cli(HARNESS),
            daemon.home,
            "01a23766-0000-7000-8000-000000000000",
            "PUSHMARK_queue",
        )
    assert failed.value.code == "push_failed"


# ---- the sidecar, for a Codex session no TUI runs --------------------------------------------------


def ok(hive: Hive, request: dict[str, Any]) -> dict[str, Any]:
    reply = hive.request(request, timeout=30)
    assert reply["ok"], reply
    return reply["result"]


def codex_hook(
    hive: Hive, event: str, thread: str, codex_home: Path, cwd: Path, rollout: Path | None = None, **extra: Any
) -> dict[str, Any]:
    """A Codex hook's stdin, as the TUI's app-server sends it (../shared/notes/harnesses.md §2)."""
    rollout = rollout or codex_home / "sessions" / "2026" / "12" / "02" / f"rollout-2026-12-02T15-36-58-{thread}.jsonl"
    payload = {
        "session_id": thread,
        "turn_id": "01a23766-ee2e-7143-a2b2-2461f54ed655",
        "transcript_path": str(rollout),
        "cwd": str(cwd),
        "hook_event_name": event,
        "model": "fake-model",
        "permission_mode": "bypassPermissions",
        **extra,
    }
    return ok(hive, {"op": "hook", "harness": HARNESS, "event": event, "payload": payload})


def test_a_codex_session_no_tui_runs_keeps_its_mail_for_the_next_hook_and_is_told_as_turn_from_then_on(
    hive: Hive, tmp_path: Path
) -> None:
    thread = "01a23766-e15d-73d0-838b-bc34c8cbd019"
    codex_home = tmp_path / ".codex"
    codex_hook(hive, "SessionStart", thread, codex_home, tmp_path, source="startup")
    ok(
        hive,
        {"op": "register", "session": {"key": "peer-key", "agent": "claude-code", "cwd": "/tmp/peer", "name": "peer"}},
    )
    me = ok(hive, {"op": "who", "session": thread, "all": True})["me"]
    listed = {s["address"]: s for s in ok(hive, {"op": "who", "all": True})["sessions"]}
    assert listed[me]["tier"] == "push"

    sent = ok(hive, {"op": "send", "from": "peer-key", "to": me, "body": "PUSHMARK_first"})["results"][0]
    # Nothing runs the thread, so Codex never took it: not pushed, and the session drops to the turn tier.
    assert sent["state"] == "queued", sent
    listed = {s["address"]: s for s in ok(hive, {"op": "who", "all": True})["sessions"]}
    assert listed[me]["tier"] == "turn"
    unread = wait_for(
        lambda: ok(hive, {"op": "inbox", "session": thread, "peek": True})["ids"],
        timeout=30,
        what="the mail to be visible again after the failed push",
    )
    assert unread == [sent["id"]]

    # The next tool hook shows it, as for any turn-tier session.
    shown = codex_hook(
        hive,
        "PostToolUse",
        thread,
        codex_home,
        tmp_path,
        tool_name="exec_command",
        tool_input={"cmd": "true"},
        tool_use_id="call_1",
        tool_response={"content": ""},
    )
    assert sent["id"] in shown["stdout"] and shown["ids"] == [sent["id"]]

    # A later sender is told the truth at once: queued for the next tool call or turn end.
    later = ok(hive, {"op": "send", "from": "peer-key", "to": me, "body": "PUSHMARK_second"})["results"][0]
    assert later["state"] == "queued"


# ---- which process is a Codex TUI ----------------------------------------------------------------


@contextlib.contextmanager
def running(argv: list[str], executable: str, home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process with its own ``argv`` (``argv[0]`` as the caller names it) under CODEX_HOME ``home``."""
    env = {"HOME": str(home.parent), "CODEX_HOME": str(home), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
    process = subprocess.Popen(
        argv,
        executable=executable,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(timeout=30)


def test_the_codex_binary_running_as_its_sandbox_helper_is_not_taken_for_a_tui(tmp_path: Path) -> None:
    """What ``codex exec`` runs a sandboxed command under: the codex binary itself with ``argv[0]``
    ``codex-linux-sandbox`` (here started by ``codex sandbox``, Codex's own way to run one)."""
    home = tmp_path / ".codex"
    home.mkdir()
    codex = os.path.realpath(require_cli(HARNESS))
    # The npm launcher is a node script: the native binary beside it is what Codex runs as the helper.
    native = next(Path(codex).parents[1].glob("node_modules/@openai/codex-linux-*/vendor/*/bin/codex"), None) or next(
        Path(codex).parents[2].glob("codex-linux-*/vendor/*/bin/codex"), None
    )
    assert native is not None, f"{contract(HARNESS)}: no native codex binary beside {codex}"
    with running(["codex", "sandbox", "--", "sleep", "600"], str(native), home) as sandbox:

        def helper() -> list[str]:
            for process in psutil.Process(sandbox.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    argv = process.cmdline()
                    if argv[:1] == ["codex-linux-sandbox"] and any(
                        c.cmdline()[:1] == ["sleep"] for c in process.children()
                    ):
                        assert os.path.basename(process.exe()) == "codex"  # the same binary
                        return argv
            return []

        argv = wait_for(helper, timeout=30, what=f"{contract(HARNESS)}: the sandbox helper to run sleep")
        assert not is_tui(argv)
        assert find_tui(home) is None, f"{contract(HARNESS)}: took {argv[:3]} for a TUI"
    # A process whose own arguments are a TUI's, under that home, is one; under another home it is not.
    with running(["codex", "600"], "/bin/sleep", home) as tui:
        found = wait_for(lambda: find_tui(home), timeout=10, what="the TUI stand-in to be found")
        assert found.pid == tui.pid
        assert find_tui(tmp_path / "elsewhere") is None


# ---- the sidecar pushing into a Codex TUI: accepted by Codex is not read -----------------------------


@dataclass
class Pushed:
    hive: Hive
    daemon: Daemon
    thread: str
    address: str
    rollout: Path
    message: dict[str, Any]
    asked: threading.Event  # the model got the request carrying the pushed text
    answer: threading.Event  # set to let the model answer it

    def state(self) -> str:
        return str(ok(self.hive, {"op": "sent", "ids": [self.message["id"]]})["messages"][0]["state"])

    def visible(self) -> list[str]:
        return list(ok(self.hive, {"op": "inbox", "session": self.thread, "peek": True})["ids"])

    def hook(self, event: str, **extra: Any) -> dict[str, Any]:
        return codex_hook(
            self.hive,
            event,
            self.thread,
            self.daemon.home,
            self.daemon.home.parent / "project",
            rollout=self.rollout,
            **extra,
        )


@contextlib.contextmanager
def pushed_while_the_model_thinks(hive: Hive, model: ModelServer, daemon: Daemon) -> Iterator[Pushed]:
    """A Codex session whose TUI runs (a stand-in process with a TUI's arguments, on the real
    app-server): a peer's message is pushed into its idle thread, and the model holds its answer
    to the request that carries it until the test sets ``answer``."""
    asked, answer = threading.Event(), threading.Event()

    def hold_the_answer(request: Request) -> None:
        asked.set()
        answer.wait(60)

    model.script = Script({"PUSHMARK_held": [say("HELD-OK", before=hold_the_answer)]})
    thread = daemon.rpc("thread/start", {"cwd": str(daemon.home.parent / "project")})["thread"]
    rollout = Path(thread["path"])
    with running(["codex", "600"], "/bin/sleep", daemon.home):
        wait_for(lambda: find_tui(daemon.home), timeout=10, what="the TUI stand-in to be found")
        pushed = Pushed(hive, daemon, thread["id"], "", rollout, {}, asked, answer)
        pushed.hook("SessionStart", source="startup")
        ok(
            hive,
            {
                "op": "register",
                "session": {"key": "peer-key", "agent": "claude-code", "cwd": "/tmp/peer", "name": "peer"},
            },
        )
        pushed.address = ok(hive, {"op": "who", "session": pushed.thread, "all": True})["me"]
        pushed.message = ok(
            hive, {"op": "send", "from": "peer-key", "to": pushed.address, "body": "PUSHMARK_held the port is 8443"}
        )["results"][0]
        try:
            assert pushed.message["state"] == "pushed", pushed.message
            assert asked.wait(60), f"{contract(HARNESS)}: the pushed turn never reached the model"
            yield pushed
        finally:
            answer.set()


def test_mail_pushed_into_a_codex_tui_is_read_only_once_the_model_answered_a_request_that_carried_it(
    hive: Hive, model: ModelServer, daemon: Daemon
) -> None:
    who = contract(HARNESS)
    with pushed_while_the_model_thinks(hive, model, daemon) as pushed:
        # Codex took it (turn/start) and the model has the request, but has not answered: not read.
        # The session's Stop hook (a hook that confirms mail a hook showed) looks at the rollout too.
        stopped = pushed.hook("Stop", stop_hook_active=False, last_assistant_message="")
        assert pushed.message["id"] not in stopped["stdout"], f"{who}: held mail shown again: {stopped}"
        assert pushed.state() == "queued", f"{who}: read before the model answered"
        assert pushed.visible() == [], f"{who}: mail Codex holds is shown to other readers"
        pushed.answer.set()
        model.wait_for(
            lambda: any("HELD-OK" in r.reply for r in model.requests), timeout=60, what=f"{who}: the model's answer"
        )
        wait_for(lambda: pushed.state() == "read", timeout=30, what=f"{who}: the read receipt after the answer")


def test_mail_pushed_into_a_codex_turn_that_is_interrupted_before_the_model_answers_is_unread_and_shown_again(
    hive: Hive, model: ModelServer, daemon: Daemon
) -> None:
    who = contract(HARNESS)
    with pushed_while_the_model_thinks(hive, model, daemon) as pushed:
        turn = daemon.rpc("thread/turns/list", {"threadId": pushed.thread, "limit": 1})["data"][0]["id"]
        daemon.rpc("turn/interrupt", {"threadId": pushed.thread, "turnId": turn})
        wait_for(
            lambda: pushed.visible() == [pushed.message["id"]],
            timeout=30,
            what=f"{who}: the pushed mail to be visible again after its turn was aborted",
        )
        assert pushed.state() == "queued"
        shown = pushed.hook(
            "PostToolUse",
            tool_name="exec_command",
            tool_input={"cmd": "true"},
            tool_use_id="call_1",
            tool_response={"content": ""},
        )
        assert pushed.message["id"] in shown["stdout"], f"{who}: the next hook did not show it: {shown}"


def test_mail_pushed_into_a_codex_tui_that_exits_before_the_model_answers_is_unread_and_visible_again(
    hive: Hive, model: ModelServer, daemon: Daemon
) -> None:
    who = contract(HARNESS)
    with pushed_while_the_model_thinks(hive, model, daemon) as pushed:
        tui = find_tui(daemon.home)
        assert tui is not None
        os.kill(tui.pid, 9)
        wait_for(
            lambda: pushed.visible() == [pushed.message["id"]],
            timeout=30,
            what=f"{who}: the pushed mail to be visible again once its TUI is gone",
        )
        assert pushed.state() == "queued"
