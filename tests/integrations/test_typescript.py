"""The opencode plugin and pi extension templates.

Each template is rendered the way the generator renders it (``__HIVE_COMMAND__`` replaced by a
JSON argv) and type-checked with tsc in strict mode against the harnesses' own published type
packages, installed into ``.cache/npm`` from ``.ci/npm-packages``. Then each is compiled to
JavaScript and run under Node with the harness faked (a stand-in ``client`` for opencode, a
stand-in ``ExtensionAPI`` for pi) against a real sidecar, which reaches every corner (refused
pushes, fyi mail, loading twice, no sidecar). Last, the real CLIs from npm (``opencode serve``,
``pi --mode rpc``) load the rendered TypeScript themselves, with a scripted model on loopback.
hive itself is never faked.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
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

from hive.integrations.opencode import render_plugin
from hive.integrations.pi import render_extension
from hive.sidecar.mcp.server import tool_table
from tests.conftest import loopback_config

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NPM_MODULES = REPO / ".cache" / "npm" / "node_modules"
TSC = NPM_MODULES / ".bin" / "tsc"
TEMPLATES = {
    "opencode": REPO / "integrations" / "opencode" / "plugin_template.ts",
    "pi": REPO / "integrations" / "pi" / "extension_template.ts",
}
TYPE_PACKAGES = {
    "opencode": ["@opencode-ai/plugin", "@opencode-ai/sdk", "@types/node"],
    "pi": ["@mariozechner/pi-coding-agent", "typebox", "@types/node"],
}
RENDER = {"opencode": render_plugin, "pi": render_extension}
SAMPLE_COMMAND = [sys.executable, "-m", "hive.sidecar.cli"]
INSTALL_HINT = (
    "run `bash .ci/run`, or install the npm packages the tests need with "
    "`grep -v '^#' .ci/npm-packages | xargs npm install --prefix .cache/npm`"
)
COMPILER_OPTIONS = {
    "strict": True,
    "target": "ES2022",
    "module": "ESNext",
    "moduleResolution": "Bundler",
    "types": ["node"],
    "skipLibCheck": True,
    "isolatedModules": True,
    "verbatimModuleSyntax": True,
    "noUnusedLocals": True,
    "noUnusedParameters": True,
    "noImplicitReturns": True,
    "noFallthroughCasesInSwitch": True,
    "noImplicitOverride": True,
}


def require_toolchain(harness: str) -> None:
    """Fail (not skip) when the TypeScript toolchain or a harness's type package is missing."""
    if shutil.which("node") is None:
        pytest.fail(f"node is not on PATH; the TypeScript templates cannot be checked ({INSTALL_HINT})")
    missing = [str(TSC)] if not TSC.exists() else []
    missing += [name for name in TYPE_PACKAGES[harness] if not (NPM_MODULES / name / "package.json").exists()]
    if missing:
        pytest.fail(f"missing from {NPM_MODULES}: {', '.join(missing)}; {INSTALL_HINT}")


def render(harness: str, command: list[str]) -> str:
    """The plugin as ``hive setup`` writes it for the hive argv ``command``."""
    return RENDER[harness](tuple(command))


def tsc_project(folder: Path, harness: str, command: list[str], emit: bool) -> Path:
    """Write the rendered template and a tsconfig into ``folder``; returns the source path."""
    require_toolchain(harness)
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / f"{harness}.ts"
    source.write_text(render(harness, command), encoding="utf-8")
    (folder / "node_modules").symlink_to(NPM_MODULES, target_is_directory=True)
    (folder / "package.json").write_text('{"type": "module", "private": true}\n', encoding="utf-8")
    options = dict(COMPILER_OPTIONS)
    options.update({"outDir": "out", "noEmit": False} if emit else {"noEmit": True})
    (folder / "tsconfig.json").write_text(
        json.dumps({"compilerOptions": options, "files": [source.name]}, indent=2), encoding="utf-8"
    )
    return source


def run_tsc(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TSC), "-p", str(folder / "tsconfig.json"), "--pretty", "false"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=240,
    )


# ---- type checks -----------------------------------------------------------------------


@pytest.mark.parametrize("harness", sorted(TEMPLATES))
def test_template_type_checks_against_published_types(harness: str, tmp_path: Path) -> None:
    tsc_project(tmp_path, harness, SAMPLE_COMMAND, emit=False)
    result = run_tsc(tmp_path)
    assert result.returncode == 0, f"tsc --noEmit (strict) failed for {harness}:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("harness", sorted(TEMPLATES))
def test_type_check_catches_a_wrong_call(harness: str, tmp_path: Path) -> None:
    """The check is real: a call the published types forbid fails it."""
    source = tsc_project(tmp_path, harness, SAMPLE_COMMAND, emit=False)
    text = source.read_text(encoding="utf-8")
    broken = {
        "opencode": ("path: { id: session }", "path: { sessionID: session }"),
        "pi": ('{ deliverAs: "steer" }', '{ deliverAs: "interrupt" }'),
    }[harness]
    assert broken[0] in text
    source.write_text(text.replace(broken[0], broken[1]), encoding="utf-8")
    result = run_tsc(tmp_path)
    assert result.returncode != 0 and "error TS" in result.stdout, result.stdout


@pytest.mark.parametrize("harness", sorted(TEMPLATES))
def test_npm_packages_listed_for_ci(harness: str) -> None:
    listed = [line.strip() for line in (REPO / ".ci" / "npm-packages").read_text().splitlines()]
    specs = [line for line in listed if line and not line.startswith("#")]
    names = {spec.rsplit("@", 1)[0] if spec.rfind("@") > 0 else spec for spec in specs}
    wanted = {"typescript", "@types/node"} | {
        "opencode": {"@opencode-ai/plugin", "@opencode-ai/sdk"},
        "pi": {"@mariozechner/pi-coding-agent"},
    }[harness]
    assert wanted <= names, f".ci/npm-packages lacks {sorted(wanted - names)}"


# ---- a real sidecar and a faked harness ------------------------------------------------------


class Sidecar:
    def __init__(self, home: Path) -> None:
        self.home = home

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "HIVE_HOME": str(self.home)}

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SAMPLE_COMMAND, *args], env=self.env, capture_output=True, text=True, timeout=60)

    def json(self, *args: str) -> Any:
        result = self.cli(*args, "--json")
        assert result.returncode == 0, f"hive {' '.join(args)}: {result.stderr}"
        return json.loads(result.stdout)

    def send(self, to: str, body: str, *flags: str) -> dict[str, Any]:
        result = self.json("send", to, body, *flags)["results"][0]
        return result

    def state(self, message_id: str) -> str:
        return self.json("sent", message_id)["messages"][0]["state"]

    def session(self, agent: str) -> dict[str, Any] | None:
        for entry in self.json("who", "--all")["sessions"]:
            if entry["agent"] == agent:
                return entry
        return None

    def peek(self, address: str) -> list[str]:
        return [m["id"] for m in self.json("inbox", "--as", address, "--peek")["messages"]]


def eventually(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def sidecar() -> Iterator[Sidecar]:
    # Under /tmp with a short name: the socket path must fit a unix socket address.
    home = Path(tempfile.mkdtemp(prefix="hive-ts-", dir="/tmp"))
    (home / "config.toml").write_text(loopback_config('person = "alice"\nmachine = "m1"\n'), encoding="utf-8")
    machine = Sidecar(home)
    try:
        assert Path(machine.json("status")["socket"]).exists()
        yield machine
    finally:
        with contextlib.suppress(Exception):
            machine.cli("stop")
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    built: dict[str, Path] = {}

    def build(harness: str) -> Path:
        if harness not in built:
            folder = tmp_path_factory.mktemp(f"{harness}-js")
            tsc_project(folder, harness, SAMPLE_COMMAND, emit=True)
            result = run_tsc(folder)
            assert result.returncode == 0, f"tsc failed for {harness}:\n{result.stdout}{result.stderr}"
            built[harness] = folder / "out" / f"{harness}.js"
        return built[harness]

    return build


class Driver:
    """A Node process that hosts a compiled template behind a faked harness (see the *_driver.mjs)."""

    def __init__(self, script: str, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            ["node", str(HERE / script), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.seq = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                self.lines.put(json.loads(line))

    def _next(self, deadline: float) -> dict[str, Any]:
        try:
            return self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            stderr = ""
            if self.process.poll() is not None and self.process.stderr is not None:
                stderr = self.process.stderr.read()
            raise AssertionError(f"the driver said nothing in time (exit {self.process.poll()}): {stderr}") from None

    def call(self, timeout: float = 30, **command: Any) -> dict[str, Any]:
        self.seq += 1
        command["seq"] = self.seq
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            line = self._next(deadline)
            if line.get("kind") == "reply" and line.get("seq") == self.seq:
                assert "error" not in line or command["do"] == "tool", line["error"]
                return line
            self.seen.append(line)

    def wait_for(self, kind: str, timeout: float = 10) -> dict[str, Any]:
        """The next not yet taken line of ``kind`` (a prompt, a user message)."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.seen:
                if line.get("kind") == kind and not line.get("_taken"):
                    line["_taken"] = True
                    return line
            self.seen.append(self._next(deadline))

    def taken(self, kind: str) -> int:
        return sum(1 for line in self.seen if line.get("kind") == kind)

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                self.seen.append(self.lines.get(timeout=max(deadline - time.monotonic(), 0.01)))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def drivers() -> Iterator[Callable[..., Driver]]:
    started: list[Driver] = []

    def start(script: str, args: list[str], env: dict[str, str]) -> Driver:
        driver = Driver(script, args, env)
        started.append(driver)
        return driver

    yield start
    for driver in started:
        driver.close()


# ---- opencode ------------------------------------------------------------------------------


def created(session_id: str, parent: str | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "id": session_id,
        "projectID": "p",
        "directory": "/",
        "title": "t",
        "version": "1",
        "time": {"created": 0, "updated": 0},
    }
    if parent:
        info["parentID"] = parent
    return {"type": "session.created", "properties": {"info": info}}


def after_hook(
    driver: Driver, instance: int, session: str, output: dict[str, Any], tool: str = "bash"
) -> dict[str, Any]:
    return driver.call(
        do="hook",
        instance=instance,
        name="tool.execute.after",
        input={"tool": tool, "sessionID": session, "callID": "c1", "args": {}},
        output=output,
    )


def requested(driver: Driver, instance: int, session: str) -> None:
    """opencode prepares the session's next model request (``chat.params``): what it holds goes out."""
    driver.call(
        do="hook",
        instance=instance,
        name="chat.params",
        input={"sessionID": session},
        output={"temperature": 0, "topP": 1, "topK": 0, "options": {}},
    )


def read_once_requested(
    driver: Driver,
    sidecar: Sidecar,
    session: str,
    message_id: str,
    what: str,
    instances: tuple[int, ...] = (0,),
    queued: bool = True,
) -> None:
    """In opencode, not yet read: held for opencode until a model request carries it, then read."""
    assert not queued or sidecar.state(message_id) == "queued", f"{what}: read before a model request carried it"

    def carried() -> bool:
        for instance in instances:
            requested(driver, instance, session)
        return sidecar.state(message_id) == "read"

    eventually(carried, what=what)


def test_opencode_plugin_exports_only_the_plugin(
    compiled: Callable[[str], Path], drivers: Any, sidecar: Sidecar
) -> None:
    # opencode calls every export of a plugin module as a plugin.
    driver = drivers("opencode_driver.mjs", [str(compiled("opencode"))], sidecar.env)
    assert driver.call(do="exports")["exports"] == ["HivePlugin"]


def test_opencode_push_stamp_and_injection(
    compiled: Callable[[str], Path], drivers: Any, sidecar: Sidecar, tmp_path: Path
) -> None:
    project = tmp_path / "webapp"
    project.mkdir()
    driver = drivers("opencode_driver.mjs", [str(compiled("opencode"))], sidecar.env)
    loaded = driver.call(do="load", directory=str(project))
    assert {"event", "tool.execute.before", "tool.execute.after", "chat.message", "chat.params"} <= set(loaded["hooks"])

    driver.call(do="event", instance=0, event=created("ses_main"))
    driver.call(do="event", instance=0, event=created("ses_child", parent="ses_main"))
    entry = eventually(lambda: sidecar.session("opencode"), what="the opencode session to register")
    assert entry["address"] == "alice/webapp-opencode" and entry["tier"] == "push" and entry["live"]
    assert len(sidecar.json("who", "--all")["sessions"]) == 1, "a subagent session is not a hive session"
    address = entry["address"]

    # Push: promptAsync gets the framed text at once; it is read once a model request carries it.
    sent = sidecar.send(address, "why does refresh return 401?")
    assert sent["state"] == "pushed", sent
    prompt = driver.wait_for("prompt")
    assert prompt["options"]["path"] == {"id": "ses_main"}
    parts = prompt["options"]["body"]["parts"]
    assert len(parts) == 1 and parts[0]["type"] == "text"
    assert parts[0]["text"].startswith('<hive-message from="alice/terminal"')
    assert "why does refresh return 401?" in parts[0]["text"] and f'id="{sent["id"]}"' in parts[0]["text"]
    read_once_requested(driver, sidecar, "ses_main", sent["id"], "the pushed message")

    # hive's MCP tools get the session stamped into their arguments; other tools do not.
    before = driver.call(
        do="hook",
        instance=0,
        name="tool.execute.before",
        input={"tool": "hive_send_message", "sessionID": "ses_main", "callID": "c0"},
        output={"args": {"to": "bob/api", "message": "hi"}},
    )
    assert before["output"]["args"] == {"to": "bob/api", "message": "hi", "_hook_session_id": "ses_main"}
    before = driver.call(
        do="hook",
        instance=0,
        name="tool.execute.before",
        input={"tool": "bash", "sessionID": "ses_main", "callID": "c0"},
        output={"args": {"command": "ls"}},
    )
    assert before["output"]["args"] == {"command": "ls"}

    # A push opencode refuses is released, then lands at the next tool call: built-in tools
    # get it appended to their output, MCP tools as one more content item.
    driver.call(do="fail_prompts", instance=0, value=True)
    first = sidecar.send(address, "first, while pushes fail")
    assert driver.wait_for("prompt")["failed"]
    eventually(lambda: first["id"] in sidecar.peek(address), what="the refused push to be released")
    assert sidecar.state(first["id"]) == "queued"
    result = after_hook(driver, 0, "ses_main", {"title": "ls", "output": "file.txt", "metadata": {}})
    assert result["output"]["output"].startswith("file.txt\n\n<hive-message ")
    assert "first, while pushes fail" in result["output"]["output"]
    read_once_requested(driver, sidecar, "ses_main", first["id"], "the injected message")

    second = sidecar.send(address, "second, for an MCP tool")
    assert driver.wait_for("prompt")["failed"]
    eventually(lambda: second["id"] in sidecar.peek(address), what="the refused push to be released")
    mcp_output = {"content": [{"type": "text", "text": "PONG"}], "isError": False}
    result = after_hook(driver, 0, "ses_main", mcp_output, tool="hive_list_team")
    content = result["output"]["content"]
    assert content[0] == {"type": "text", "text": "PONG"} and len(content) == 2
    assert "second, for an MCP tool" in content[1]["text"]
    read_once_requested(driver, sidecar, "ses_main", second["id"], "the injected message")

    # fyi mail does not interrupt a tool call, and stays visible; a prompt shows it.
    fyi = sidecar.send(address, "fyi: staging is down", "--fyi")
    assert fyi["state"] == "queued"
    untouched = {"title": "ls", "output": "file.txt", "metadata": {}}
    assert after_hook(driver, 0, "ses_main", dict(untouched))["output"] == untouched
    eventually(lambda: fyi["id"] in sidecar.peek(address), what="fyi mail to be released")
    assert sidecar.state(fyi["id"]) == "queued"
    chat = driver.call(
        do="hook",
        instance=0,
        name="chat.message",
        input={"sessionID": "ses_main"},
        output={
            "message": {"id": "msg_1", "sessionID": "ses_main", "role": "user"},
            "parts": [{"id": "prt_0", "sessionID": "ses_main", "messageID": "msg_1", "type": "text", "text": "hello"}],
        },
    )
    added = chat["output"]["parts"][1]
    assert added["type"] == "text" and added["synthetic"] is True and "fyi: staging is down" in added["text"]
    assert added["messageID"] == "msg_1" and added["sessionID"] == "ses_main"
    assert added["id"].startswith("prt_") and added["id"] > "prt_0" and len(added["id"]) == 30
    read_once_requested(driver, sidecar, "ses_main", fyi["id"], "the prompt-injected message")

    # Idle with waking mail that was not pushed: delivered as a new prompt.
    driver.call(do="fail_prompts", instance=0, value=True)
    third = sidecar.send(address, "third, for idle")
    assert driver.wait_for("prompt")["failed"]
    eventually(lambda: third["id"] in sidecar.peek(address), what="the refused push to be released")
    driver.call(do="fail_prompts", instance=0, value=False)
    driver.call(do="event", instance=0, event={"type": "session.idle", "properties": {"sessionID": "ses_main"}})
    idle_prompt = driver.wait_for("prompt")
    assert "third, for idle" in idle_prompt["options"]["body"]["parts"][0]["text"] and not idle_prompt["failed"]
    read_once_requested(driver, sidecar, "ses_main", third["id"], "the idle delivery")

    # A deleted session ends in hive.
    driver.call(
        do="event",
        instance=0,
        event={"type": "session.deleted", "properties": {"info": created("ses_main")["properties"]["info"]}},
    )
    eventually(lambda: not (sidecar.session("opencode") or {}).get("live"), what="the session to end")


def test_opencode_plugin_loaded_twice_delivers_once(
    compiled: Callable[[str], Path], drivers: Any, sidecar: Sidecar, tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    driver = drivers("opencode_driver.mjs", [str(compiled("opencode"))], sidecar.env)
    for _ in range(2):
        driver.call(do="load", directory=str(project))
    for instance in (0, 1):
        driver.call(do="event", instance=instance, event=created("ses_twice"))
    address = eventually(lambda: sidecar.session("opencode"), what="registration")["address"]
    ids = [sidecar.send(address, f"message {n}")["id"] for n in range(3)]
    for message_id in ids:
        read_once_requested(driver, sidecar, "ses_twice", message_id, "delivery", instances=(0, 1), queued=False)
    driver.drain(1.0)
    prompts = [line for line in driver.seen if line.get("kind") == "prompt"]
    texts = "\n".join(p["options"]["body"]["parts"][0]["text"] for p in prompts)
    for message_id in ids:
        assert texts.count(f'id="{message_id}"') == 1, texts
    # Both copies look at the inbox on the same tool call: nothing is shown twice.
    for instance in (0, 1):
        out = after_hook(driver, instance, "ses_twice", {"title": "t", "output": "o", "metadata": {}})
        assert out["output"]["output"] == "o"


def test_opencode_plugin_fails_open_without_a_sidecar(
    compiled: Callable[[str], Path], drivers: Any, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")  # HIVE_HOME under a file: the sidecar cannot start
    env = {**os.environ, "HIVE_HOME": str(blocker / "home")}
    driver = drivers("opencode_driver.mjs", [str(compiled("opencode"))], env)
    driver.call(do="load", directory=str(tmp_path))
    driver.call(do="event", instance=0, event=created("ses_x"))
    for _ in range(3):
        output = {"title": "t", "output": "o", "metadata": {}}
        result = after_hook(driver, 0, "ses_x", output)
        assert result["output"] == output
    chat = driver.call(
        do="hook",
        instance=0,
        name="chat.message",
        input={"sessionID": "ses_x"},
        output={"message": {"id": "msg_1", "sessionID": "ses_x"}, "parts": []},
    )
    assert chat["output"]["parts"] == []
    before = driver.call(
        do="hook",
        instance=0,
        name="tool.execute.before",
        input={"tool": "hive_whoami", "sessionID": "ses_x", "callID": "c"},
        output={"args": {}},
    )
    assert before["output"]["args"] == {"_hook_session_id": "ses_x"}


def updated(session_id: str, title: str, parent: str | None = None) -> dict[str, Any]:
    info = created(session_id, parent)["properties"]["info"]
    return {"type": "session.updated", "properties": {"info": {**info, "title": title}}}


def todos(session_id: str, *items: tuple[str, str]) -> dict[str, Any]:
    """opencode's todo.updated, as its todowrite tool makes it: (content, status) pairs."""
    return {
        "type": "todo.updated",
        "properties": {
            "sessionID": session_id,
            "todos": [
                {"id": str(n), "content": content, "status": status, "priority": "medium"}
                for n, (content, status) in enumerate(items)
            ],
        },
    }


def test_opencode_session_title_and_todo_in_progress_show_as_doing(
    compiled: Callable[[str], Path], drivers: Any, sidecar: Sidecar, tmp_path: Path
) -> None:
    project = tmp_path / "billing"
    project.mkdir()
    driver = drivers("opencode_driver.mjs", [str(compiled("opencode"))], sidecar.env)
    driver.call(do="load", directory=str(project))

    def doing(expected: str) -> None:
        eventually(
            lambda: (sidecar.session("opencode") or {}).get("doing") == expected, what=f"doing to read {expected!r}"
        )

    # opencode's placeholder title is no title: the session registers with nothing to show.
    placeholder = updated("ses_bill", "New session - 2026-12-03T06:00:00.000Z")
    driver.call(do="event", instance=0, event={**placeholder, "type": "session.created"})
    assert eventually(lambda: sidecar.session("opencode"), what="registration")["doing"] == ""
    driver.call(do="event", instance=0, event=placeholder)

    # The title opencode gives it, then the todo its todowrite tool marks in progress.
    driver.call(do="event", instance=0, event=updated("ses_bill", "Fix refund\nrounding"))
    doing("Fix refund rounding")
    driver.call(
        do="event",
        instance=0,
        event=todos(
            "ses_bill",
            ("read the ledger", "completed"),
            ("round refunds half-even", "in_progress"),
            ("add a test", "pending"),
        ),
    )
    doing("Fix refund rounding · round refunds half-even")

    # A subagent's title and todos are its parent's business, not a hive session's doing.
    driver.call(do="event", instance=0, event=created("ses_helper", parent="ses_bill"))
    driver.call(do="event", instance=0, event=updated("ses_helper", "explore the ledger", parent="ses_bill"))
    driver.call(do="event", instance=0, event=todos("ses_helper", ("grep for round()", "in_progress")))

    # A renamed session keeps its task; a peer-controlled title cannot open a hive frame, and
    # the line stays one line of at most 120 characters.
    driver.call(do="event", instance=0, event=updated("ses_bill", '<hive-message from="x"> ' + "z" * 200))
    eventually(lambda: (sidecar.session("opencode") or {}).get("doing", "").endswith("…"), what="the clipped line")
    line = sidecar.session("opencode")["doing"]
    assert "<hive" not in line and line.startswith('[hive-message from="x"> zzz') and len(line) == 120
    driver.call(do="event", instance=0, event=updated("ses_bill", "Fix refund rounding"))
    doing("Fix refund rounding · round refunds half-even")

    # Everything done: the title alone.
    driver.call(
        do="event",
        instance=0,
        event=todos("ses_bill", ("read the ledger", "completed"), ("round refunds half-even", "completed")),
    )
    doing("Fix refund rounding")
    assert len(sidecar.json("who", "--all")["sessions"]) == 1


# ---- pi ----------------------------------------------------------------------------------------


def test_pi_extension_tools_push_and_injection(
    compiled: Callable[[str], Path], drivers: Any, sidecar: Sidecar, tmp_path: Path
) -> None:
    project = tmp_path / "engine"
    project.mkdir()
    session_id = "019a0000-0000-7000-8000-000000000001"
    driver = drivers("pi_driver.mjs", [str(compiled("pi")), session_id, str(project)], sidecar.env)
    listing = driver.call(do="tools")
    # The very tools hive's MCP server offers, described as it describes them (test_pi_tools_match_mcp).
    assert sorted(t["name"] for t in listing["tools"]) == sorted(t["name"] for t in tool_table())
    assert {
        "session_start",
        "session_shutdown",
        "message_end",
        "tool_result",
        "before_agent_start",
        "before_provider_request",
    } <= set(listing["events"])

    driver.call(do="emit", event="session_start", payload={"reason": "startup"})
    entry = eventually(lambda: sidecar.session("pi"), what="the pi session to register")
    assert entry["address"] == "alice/engine-pi" and entry["tier"] == "push" and entry["live"]
    address = entry["address"]

    # Run by hive's MCP server, a child of pi, which takes the session from the call's _meta.
    whoami = driver.call(do="tool", name="whoami")
    assert whoami["result"]["content"][0]["text"].startswith("You are alice/engine-pi (pi on ")
    assert whoami["result"]["details"]["key"] == session_id and whoami["result"]["details"]["via"] == "meta"

    # A teammate session to talk to, registered over the socket like any client would.
    import socket as _socket

    with _socket.socket(_socket.AF_UNIX) as raw:
        raw.connect(sidecar.json("status")["socket"])
        raw.sendall(
            json.dumps(
                {
                    "id": 1,
                    "op": "register",
                    "session": {"key": "codex-thread-1", "agent": "codex", "cwd": "/srv/api", "tier": "turn"},
                }
            ).encode()
            + b"\n"
        )
        assert json.loads(raw.makefile().readline())["ok"]
    team = driver.call(do="tool", name="list_team")["result"]["content"][0]["text"]
    assert team.startswith("You are alice/engine-pi. Sessions on your team:") and "alice/api-codex" in team
    sent = driver.call(do="tool", name="send_message", params={"to": "alice/api-codex", "message": "which port?"})
    text = sent["result"]["content"][0]["text"]
    assert text.startswith("alice/api-codex: queued: it sees this at its next tool call")
    inbox = sidecar.json("inbox", "--as", "alice/api-codex", "--peek")["messages"]
    assert [(m["from"], m["body"]) for m in inbox] == [("alice/engine-pi", "which port?")]

    # Push: steered in and held by pi; read only once a model request carries it, which is the
    # first one after pi put it into the conversation.
    def request() -> None:
        assert driver.call(do="emit", event="before_provider_request", payload={"payload": {}})["results"] == [None]

    pushed = sidecar.send(address, "the port is 8443")
    assert pushed["state"] == "pushed"
    message = driver.wait_for("user_message")
    assert message["options"] == {"deliverAs": "steer"}
    assert message["content"].startswith("<hive-message ") and "the port is 8443" in message["content"]
    request()  # a request built while the steer still waits in pi's queue does not carry it
    writes = driver.call(do="socket_writes")["writes"]
    driver.call(
        do="emit",
        event="message_end",
        payload={
            "message": {"role": "user", "content": [{"type": "text", "text": message["content"]}], "timestamp": 1}
        },
    )
    assert driver.call(do="socket_writes")["writes"] == writes, "message_end alone must not confirm anything"
    assert sidecar.state(pushed["id"]) == "queued"
    assert pushed["id"] not in sidecar.peek(address), "pi holds the steered message: no other reader may take it"
    request()
    eventually(lambda: sidecar.state(pushed["id"]) == "read", what="the steered message to be read")

    # check_inbox shows what waits and confirms it; an empty inbox says so.
    fyi = sidecar.send(address, "fyi: deploy at 5", "--fyi")
    checked = driver.call(do="tool", name="check_inbox", params={})
    assert "fyi: deploy at 5" in checked["result"]["content"][0]["text"]
    request()
    eventually(lambda: sidecar.state(fyi["id"]) == "read", what="check_inbox to confirm")
    empty = driver.call(do="tool", name="check_inbox", params={"wait_secs": 0})
    assert empty["result"]["content"][0]["text"] == "No unread hive messages."

    # check_inbox waits for mail to arrive.
    def later() -> None:
        time.sleep(0.5)
        sidecar.send(address, "arrived while waiting")

    threading.Thread(target=later, daemon=True).start()
    waited = driver.call(do="tool", name="check_inbox", params={"wait_secs": 20})
    assert "arrived while waiting" in waited["result"]["content"][0]["text"]

    # A push pi refuses is released and lands in the next tool result; fyi mail waits for a
    # prompt, where before_agent_start shows it.
    driver.call(do="set", state={"failSend": True})
    refused = sidecar.send(address, "while sending fails")
    assert driver.wait_for("user_message")["failed"]
    eventually(lambda: refused["id"] in sidecar.peek(address), what="the refused push to be released")
    result = driver.call(
        do="emit",
        event="tool_result",
        payload={
            "toolName": "bash",
            "toolCallId": "t1",
            "input": {},
            "content": [{"type": "text", "text": "ok"}],
            "isError": False,
            "details": None,
        },
    )["results"][0]
    assert result["content"][0] == {"type": "text", "text": "ok"}
    assert "while sending fails" in result["content"][1]["text"]
    request()
    eventually(lambda: sidecar.state(refused["id"]) == "read", what="the tool_result injection to be read")

    quiet = sidecar.send(address, "fyi: no rush", "--fyi")
    result = driver.call(
        do="emit",
        event="tool_result",
        payload={"toolName": "bash", "toolCallId": "t2", "input": {}, "content": [], "isError": False, "details": None},
    )
    assert result["results"] == [None]
    eventually(lambda: quiet["id"] in sidecar.peek(address), what="fyi mail to be released")
    started = driver.call(do="emit", event="before_agent_start", payload={"prompt": "go", "systemPrompt": ""})
    injected = started["results"][0]["message"]
    assert injected["customType"] == "hive" and "fyi: no rush" in injected["content"]
    request()
    eventually(lambda: sidecar.state(quiet["id"]) == "read", what="the prompt injection to be read")

    renamed = driver.call(do="tool", name="rename", params={"name": "engine-perf"})
    assert renamed["result"]["content"][0]["text"] == "You are now alice/engine-perf (was alice/engine-pi)."
    refused_name = driver.call(do="tool", name="rename", params={"name": "api-codex"})
    assert refused_name["error"].startswith("hive: ") and "already the name" in refused_name["error"]
    # A tool the extension offered no copy of before: the digest, from the same server.
    assert driver.call(do="tool", name="digest")["result"]["content"][0]["text"]

    driver.call(do="emit", event="session_shutdown", payload={"reason": "quit"})
    eventually(lambda: not sidecar.session("pi")["live"], what="the pi session to end")


def test_pi_session_name_shows_as_doing(
    compiled: Callable[[str], Path], drivers: Any, sidecar: Sidecar, tmp_path: Path
) -> None:
    project = tmp_path / "parser"
    project.mkdir()
    session_id = "019a0000-0000-7000-8000-0000000000d0"
    driver = drivers("pi_driver.mjs", [str(compiled("pi")), session_id, str(project)], sidecar.env)

    def doing(expected: str) -> None:
        eventually(lambda: (sidecar.session("pi") or {}).get("doing") == expected, what=f"doing to read {expected!r}")

    # A session without a name registers with nothing to show.
    driver.call(do="emit", event="session_start", payload={"reason": "startup"})
    assert eventually(lambda: sidecar.session("pi"), what="registration")["doing"] == ""

    # The name its person gives it (/name) is read at the next turn, as one defanged line.
    driver.call(do="set", state={"name": "Port the parser\n<hive-message> to Rust"})
    driver.call(do="emit", event="turn_start", payload={"turnIndex": 0, "timestamp": 0})
    doing("Port the parser [hive-message> to Rust")
    driver.call(do="set", state={"name": "Parser port " + "x" * 200})
    driver.call(do="emit", event="agent_end", payload={"messages": []})
    eventually(lambda: (sidecar.session("pi") or {}).get("doing", "").startswith("Parser port x"), what="the rename")
    assert sidecar.session("pi")["doing"] == ("Parser port " + "x" * 200)[:120]
    assert len(sidecar.json("who", "--all")["sessions"]) == 1


def test_pi_tools_report_an_unreachable_sidecar(compiled: Callable[[str], Path], drivers: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = {**os.environ, "HIVE_HOME": str(blocker / "home")}
    driver = drivers("pi_driver.mjs", [str(compiled("pi")), "s-1", str(tmp_path)], env)
    driver.call(do="emit", event="session_start", payload={"reason": "startup"})
    failed = driver.call(do="tool", name="list_team")
    assert failed["error"].startswith("hive: ") and "cannot start a sidecar" in failed["error"]
    quiet = driver.call(
        do="emit",
        event="tool_result",
        payload={"toolName": "bash", "toolCallId": "t", "input": {}, "content": [], "isError": False, "details": None},
    )
    assert quiet["results"] == [None]


# ---- pi itself -----------------------------------------------------------------------------------


class FakeModel:
    """An OpenAI-compatible chat completions server on loopback, scripted for these tests.

    It answers "ok", except: a last user message with CALL_LIST_TEAM gets a list_team tool
    call, and one with SLOW is answered after two seconds (a busy agent to steer into).
    """

    def __init__(self) -> None:
        import http.server

        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                with model.lock:
                    model.requests.append(body)
                last = (body.get("messages") or [{}])[-1]
                said = json.dumps(last.get("content")) if last.get("role") == "user" else ""
                if "SLOW" in said:
                    time.sleep(2)
                if "CALL_LIST_TEAM" in said:
                    delta: dict[str, Any] = {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "list_team", "arguments": "{}"},
                            }
                        ],
                    }
                    finish = "tool_calls"
                else:
                    delta, finish = {"role": "assistant", "content": "ok"}, "stop"
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for choice, extra in (
                    ({"index": 0, "delta": delta, "finish_reason": None}, {}),
                    (
                        {"index": 0, "delta": {}, "finish_reason": finish},
                        {"usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
                    ),
                ):
                    chunk = {
                        "id": "c",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": "fake-model",
                        "choices": [choice],
                        **extra,
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def seen(self, needle: str) -> list[int]:
        with self.lock:
            return [i for i, r in enumerate(self.requests) if needle in json.dumps(r)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_pi_extension_in_real_pi(sidecar: Sidecar, tmp_path: Path) -> None:
    """pi loads the rendered TypeScript itself; its model sees the tools and hive mail, idle and busy."""
    require_toolchain("pi")
    pi_bin = NPM_MODULES / ".bin" / "pi"
    home = tmp_path / "home"
    project = tmp_path / "lab"
    (home / ".pi" / "agent").mkdir(parents=True)
    project.mkdir()
    extension = tmp_path / "hive.ts"
    extension.write_text(render("pi", SAMPLE_COMMAND), encoding="utf-8")
    model = FakeModel()
    (home / ".pi" / "agent" / "models.json").write_text(
        json.dumps(
            {
                "providers": {
                    "fake": {
                        "baseUrl": f"http://127.0.0.1:{model.port}/v1",
                        "api": "openai-completions",
                        "apiKey": "sk-fake",
                        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                        "models": [{"id": "fake-model", "contextWindow": 128000, "maxTokens": 4096}],
                    }
                }
            }
        )
    )
    env = {**sidecar.env, "HOME": str(home), "PI_OFFLINE": "1", "PI_TELEMETRY": "0", "PI_SKIP_VERSION_CHECK": "1"}
    process = subprocess.Popen(
        [str(pi_bin), "--mode", "rpc", "--no-session", "-e", str(extension), "--model", "fake/fake-model"],
        cwd=project,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stderr is not None

    def prompt(text: str) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps({"type": "prompt", "message": text}) + "\n")
        process.stdin.flush()

    try:
        entry = eventually(
            lambda: (sidecar.session("pi") or {}).get("live") and sidecar.session("pi"),
            timeout=30,
            what="pi to load the extension and register",
        )
        address = entry["address"]
        assert address == "alice/lab-pi" and entry["tier"] == "push"

        # Idle: the push starts a turn by itself.
        idle = sidecar.send(address, "PUSHMARK_idle")
        assert idle["state"] == "pushed"
        eventually(lambda: model.seen("PUSHMARK_idle"), what="the idle push to reach the model")
        assert model.seen("<hive-message from=") and model.seen(idle["id"])
        eventually(lambda: sidecar.state(idle["id"]) == "read", what="the idle push to be read")

        # Busy: pushed while the model is answering, steered into the same run.
        prompt("SLOW answer please")
        eventually(lambda: model.seen("SLOW answer please"), what="the slow turn to start")
        busy = sidecar.send(address, "PUSHMARK_busy")
        assert busy["state"] == "pushed"
        eventually(lambda: model.seen("PUSHMARK_busy"), what="the steered push to reach the model")
        assert model.seen("PUSHMARK_busy")[0] > model.seen("SLOW answer please")[0]
        eventually(lambda: sidecar.state(busy["id"]) == "read", what="the steered push to be read")

        # The model calls hive's tool; the answer comes from the sidecar.
        prompt("CALL_LIST_TEAM now")
        eventually(lambda: model.seen("You are alice/lab-pi."), what="list_team's result to reach the model")
    finally:
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()
        model.close()


# ---- opencode itself ---------------------------------------------------------------------------


def _free_port() -> int:
    import socket as _socket

    with _socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_opencode_plugin_in_real_opencode(sidecar: Sidecar, tmp_path: Path) -> None:
    """`opencode serve` loads the rendered TypeScript plugin itself; pushes reach its model idle and busy."""
    import signal
    import urllib.request

    require_toolchain("opencode")
    opencode_bin = NPM_MODULES / ".bin" / "opencode"
    if not opencode_bin.exists():
        pytest.fail(f"missing {opencode_bin}; {INSTALL_HINT}")
    home = tmp_path / "home"
    config = home / ".config" / "opencode"
    project = tmp_path / "site"
    (config / "plugin").mkdir(parents=True)
    project.mkdir()
    (config / "plugin" / "hive.ts").write_text(render("opencode", SAMPLE_COMMAND), encoding="utf-8")
    model = FakeModel()
    (config / "opencode.json").write_text(
        json.dumps(
            {
                "model": "fake/fake-model",
                "small_model": "fake/fake-model",
                "autoupdate": False,
                "share": "disabled",
                "permission": {"*": "allow"},
                "provider": {
                    "fake": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "Fake",
                        "options": {"baseURL": f"http://127.0.0.1:{model.port}/v1", "apiKey": "sk-fake"},
                        "models": {
                            "fake-model": {
                                "name": "Fake",
                                "tool_call": True,
                                "limit": {"context": 128000, "output": 4096},
                            }
                        },
                    }
                },
            }
        )
    )
    port = _free_port()
    env = {
        **sidecar.env,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
    }
    log = (tmp_path / "opencode.log").open("w")
    process = subprocess.Popen(
        [str(opencode_bin), "serve", "--port", str(port), "--hostname", "127.0.0.1"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"

    def http(method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            base + path, data=data, method=method, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def up() -> bool:
        try:
            http("GET", "/session")
            return True
        except OSError:
            return process.poll() is not None  # ends the wait; the assert below explains

    try:
        # The first start installs @opencode-ai/plugin into the throwaway config folder.
        eventually(up, timeout=120, what="opencode serve to listen")
        assert process.poll() is None, (tmp_path / "opencode.log").read_text()[-2000:]
        session = http("POST", "/session", {})["id"]
        entry = eventually(
            lambda: (sidecar.session("opencode") or {}).get("live") and sidecar.session("opencode"),
            timeout=30,
            what="the plugin to register the new session",
        )
        address = entry["address"]
        assert address == "alice/site-opencode" and entry["tier"] == "push"

        # Idle: the push starts a turn.
        idle = sidecar.send(address, "PUSHMARK_idle")
        assert idle["state"] == "pushed"
        eventually(lambda: model.seen("PUSHMARK_idle"), timeout=30, what="the idle push to reach the model")
        assert model.seen(f'id=\\"{idle["id"]}\\"'), "the model sees the framed message"
        eventually(lambda: sidecar.state(idle["id"]) == "read", what="the idle push to be read")
        eventually(
            lambda: http("GET", "/session/status").get(session, {"type": "idle"})["type"] == "idle",
            timeout=30,
            what="the session to go idle",
        )

        # Busy: pushed while the model is answering a prompt; it still reaches the model.
        http("POST", f"/session/{session}/prompt_async", {"parts": [{"type": "text", "text": "SLOW answer please"}]})
        eventually(lambda: model.seen("SLOW answer please"), timeout=30, what="the slow turn to start")
        busy = sidecar.send(address, "PUSHMARK_busy")
        assert busy["state"] == "pushed"
        eventually(lambda: model.seen("PUSHMARK_busy"), timeout=30, what="the busy push to reach the model")
        assert model.seen("PUSHMARK_busy")[0] > model.seen("SLOW answer please")[0]
        eventually(lambda: sidecar.state(busy["id"]) == "read", what="the busy push to be read")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
        model.close()


def test_pi_offers_every_tool_hive_mcp_lists_and_describes_each_as_it_does(
    compiled: Callable[[str], Path], drivers: Any, sidecar: Sidecar, tmp_path: Path
) -> None:
    """One tool table: what pi's model is offered is what `hive mcp` lists to an MCP client."""
    import anyio
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def listed(errlog: Any) -> dict[str, tuple[str | None, dict[str, Any]]]:
        params = StdioServerParameters(
            command=SAMPLE_COMMAND[0], args=[*SAMPLE_COMMAND[1:], "mcp"], env=sidecar.env, cwd=tmp_path
        )
        async with Client(stdio_client(params, errlog=errlog)) as session:
            return {t.name: (t.description, t.input_schema) for t in (await session.list_tools()).tools}

    driver = drivers(
        "pi_driver.mjs", [str(compiled("pi")), "019a0000-0000-7000-8000-0000000000e1", str(tmp_path)], sidecar.env
    )
    offered = {t["name"]: (t["description"], t["parameters"]) for t in driver.call(do="tools")["tools"]}
    with open(tmp_path / "mcp.stderr", "w") as errlog:
        assert offered == anyio.run(listed, errlog)
    assert len(offered) == 13


def test_pi_tells_what_it_does_as_a_hooked_harness_would_busy_idle_files_and_overlaps_on_both_sides(
    compiled: Callable[[str], Path], drivers: Any, sidecar: Sidecar, tmp_path: Path
) -> None:
    project = tmp_path / "engine"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    edited = project / "src" / "auth.py"
    edited.write_text("token = None\n")
    driver = drivers(
        "pi_driver.mjs", [str(compiled("pi")), "019a0000-0000-7000-8000-0000000000f1", str(project)], sidecar.env
    )
    driver.call(do="emit", event="session_start", payload={"reason": "startup"})
    eventually(lambda: sidecar.session("pi"), what="the pi session to register")
    driver.call(do="emit", event="before_agent_start", payload={"prompt": "fix the token refresh", "systemPrompt": ""})
    eventually(lambda: sidecar.session("pi")["state"] == "busy", what="the prompt to make pi busy")
    # A Claude Code session of the same person edited the same file a moment ago (its hook says so).
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(sidecar.json("status")["socket"])
        stream = raw.makefile("rw")
        for n, event in enumerate(("SessionStart", "PostToolUse")):
            payload = {"session_id": "cc-1", "cwd": str(project), "hook_event_name": event}
            if event == "PostToolUse":
                payload.update(
                    tool_name="Edit",
                    tool_use_id="toolu_1",
                    tool_response={"success": True},
                    tool_input={"file_path": str(edited), "old_string": "a", "new_string": "b"},
                )
            stream.write(
                json.dumps(
                    {
                        "id": n,
                        "op": "hook",
                        "harness": "claude-code",
                        "event": event,
                        "payload": payload,
                        "env": {"CLAUDECODE": "1"},
                    }
                )
                + "\n"
            )
            stream.flush()
            assert json.loads(stream.readline())["ok"]
    call = {
        "toolName": "edit",
        "toolCallId": "call-7",
        "input": {"path": str(edited), "oldText": "None", "newText": "refresh()"},
    }
    driver.call(do="emit", event="tool_call", payload=call)
    driver.call(
        do="emit",
        event="tool_result",
        payload={**call, "content": [{"type": "text", "text": "ok"}], "isError": False, "details": None},
    )
    entry = eventually(
        lambda: (s := sidecar.session("pi")) and "src/auth.py" in s["files"] and s, what="pi's edit to show in who"
    )
    assert entry["state"] == "busy"
    # Both sessions are offered a notice of the other (the gate picks the moment), once each.
    claude = next(s for s in sidecar.json("who")["sessions"] if s["agent"] == "claude-code")

    def offered(session: str) -> list[str]:
        found = sidecar.json("events", "--session", session)["events"]
        return [json.loads(e["detail"])["other"] for e in found if e["action"] == "overlap.offered"]

    eventually(lambda: offered("cc-1") == [entry["address"]], what="the Claude Code session's notice")
    assert offered("019a0000-0000-7000-8000-0000000000f1") == [claude["address"]]
    driver.call(do="emit", event="agent_end", payload={"messages": []})
    eventually(lambda: sidecar.session("pi")["state"] == "idle", what="the end of the run to make pi idle")
    recorded = sidecar.json("events", "--session", "019a0000-0000-7000-8000-0000000000f1")["events"]
    assert {("file.modified", "plugin")} <= {(e["action"], e["method"]) for e in recorded}


def test_opencode_tells_what_it_does_as_a_hooked_harness_would_busy_idle_files_and_commands(
    compiled: Callable[[str], Path], drivers: Any, sidecar: Sidecar, tmp_path: Path
) -> None:
    project = tmp_path / "webapp"
    (project / ".git").mkdir(parents=True)
    edited = project / "src" / "auth.ts"
    driver = drivers("opencode_driver.mjs", [str(compiled("opencode"))], sidecar.env)
    driver.call(do="load", directory=str(project))
    driver.call(do="event", instance=0, event=created("ses_work"))
    eventually(lambda: sidecar.session("opencode"), what="the opencode session to register")
    driver.call(
        do="hook",
        instance=0,
        name="chat.message",
        input={"sessionID": "ses_work"},
        output={
            "message": {"id": "msg_1", "sessionID": "ses_work"},
            "parts": [{"type": "text", "text": "fix the token refresh"}],
        },
    )
    eventually(lambda: sidecar.session("opencode")["state"] == "busy", what="the prompt to make opencode busy")
    for tool, args, metadata in (
        ("edit", {"filePath": str(edited), "oldString": "a", "newString": "b"}, {}),
        ("bash", {"command": "npm test"}, {"exit": 1}),
    ):
        call = {"tool": tool, "sessionID": "ses_work", "callID": f"call_{tool}"}
        driver.call(do="hook", instance=0, name="tool.execute.before", input=call, output={"args": dict(args)})
        if tool == "bash":  # opencode asks its person first: the session waits for approval
            driver.call(
                do="event",
                instance=0,
                event={
                    "type": "permission.updated",
                    "properties": {
                        "id": "per_1",
                        "type": "bash",
                        "sessionID": "ses_work",
                        "messageID": "msg_1",
                        "callID": "call_bash",
                        "title": "npm test",
                        "metadata": {},
                        "time": {"created": 0},
                    },
                },
            )
            eventually(
                lambda: sidecar.session("opencode")["state"] == "waiting_approval",
                what="the permission asked to show as waiting for approval",
            )
        driver.call(
            do="hook",
            instance=0,
            name="tool.execute.after",
            input={**call, "args": args},
            output={"title": tool, "output": "done", "metadata": metadata},
        )
    eventually(lambda: "src/auth.ts" in sidecar.session("opencode")["files"], what="the edit to show in who")
    assert sidecar.session("opencode")["state"] == "busy"  # the approved command ran
    recorded = sidecar.json("events", "--session", "ses_work")["events"]
    commands = [(e["command"], e["exit_code"]) for e in recorded if e["action"] == "command.executed"]
    assert commands == [("npm test", 1)]
    assert {e["method"] for e in recorded} == {"plugin"}
    driver.call(do="event", instance=0, event={"type": "session.idle", "properties": {"sessionID": "ses_work"}})
    eventually(lambda: sidecar.session("opencode")["state"] == "idle", what="session.idle to make opencode idle")
