"""The real harness CLIs from npm confirm what ``hive setup`` wrote, and that ``--remove`` undid it.

One machine for the module: each harness's own configuration with entries of the person's (a
``notes`` MCP server, hooks, a pi extension, a skill), and each CLI run once first, as a person's
would have been, so the originals are what the CLIs themselves leave. Then ``hive setup``, a
second ``hive setup``, each CLI's own check, ``hive setup --remove``, and the CLIs again. The
fixture records everything; each test asserts one part. A CLI that cannot run here fails its
test with the harness name and version: it is never skipped.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from hive.integrations import registry
from tests.installer.conftest import (
    CLIS,
    Machine,
    installed_version,
    machine_context,
    npm_pins,
    plan_rows,
    preinstall_opencode_plugin,
    require_cli,
)

# What the CLIs keep for themselves while they run: logs, caches, session databases.
RUNTIME = (".cache/", ".local/share/", ".local/state/")
TRUSTED = {"GEMINI_CLI_TRUST_WORKSPACE": "true"}  # the test's stand-in for the person trusting the folder


def configs(snapshot: dict[str, bytes]) -> dict[str, bytes]:
    return {path: data for path, data in snapshot.items() if not path.startswith(RUNTIME)}


def mcp_list(machine: Machine, harness: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """``<cli> mcp list``, with stderr folded into stdout (Gemini CLI prints its list there)."""
    binary = require_cli(harness)
    done = machine.run([str(binary), "mcp", "list"], timeout=120, **extra)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout + done.stderr, "")


def codex_hooks(machine: Machine) -> list[dict[str, Any]]:
    """Codex's own list of its hooks and their trust, from ``codex app-server``'s ``hooks/list``."""
    binary = require_cli("codex")
    process = subprocess.Popen(
        [str(binary), "app-server"],
        cwd=machine.project,
        env=machine.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    timer = threading.Timer(60, process.kill)
    timer.start()
    try:
        for request in (
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"clientInfo": {"name": "hive-tests", "version": "1"}},
            },
            {"jsonrpc": "2.0", "method": "initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {}},
        ):
            process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        for line in process.stdout:
            message = json.loads(line) if line.startswith("{") else {}
            if message.get("id") == 2:
                return [hook for entry in message["result"]["data"] for hook in entry["hooks"]]
        raise AssertionError(f"codex {CLIS['codex'][2]}: app-server gave no hooks/list answer")
    finally:
        timer.cancel()
        process.kill()
        process.wait()
        with contextlib.suppress(OSError):
            process.stdin.close()
        process.stdout.close()


@dataclass
class PiRun:
    commands: list[dict[str, Any]]
    session: dict[str, Any] | None
    stderr: str


def pi_headless(machine: Machine, wait_for_session: bool) -> PiRun:
    """pi in RPC mode (no model needed): the commands it loaded, and the session its hive extension registered."""
    binary = require_cli("pi")
    process = subprocess.Popen(
        [str(binary), "--mode", "rpc", "--no-session"],
        cwd=machine.project,
        env=machine.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    timer = threading.Timer(90, process.kill)
    timer.start()
    session = None
    commands: list[dict[str, Any]] = []
    try:
        process.stdin.write(json.dumps({"id": "c", "type": "get_commands"}) + "\n")
        process.stdin.flush()
        for line in process.stdout:
            message = json.loads(line) if line.startswith("{") else {}
            if message.get("id") == "c":
                commands = message["data"]["commands"]
                break
        deadline = time.monotonic() + 30
        while wait_for_session and session is None and time.monotonic() < deadline:
            who = json.loads(machine.hive("who", "--json").stdout)
            session = next((s for s in who["sessions"] if s["agent"] == "pi" and s["live"]), None)
            time.sleep(0.2)
    finally:
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        timer.cancel()
        stderr = process.stderr.read()
        process.stdout.close()
        process.stderr.close()
    return PiRun(commands, session, stderr)


@dataclass
class RealRun:
    machine: Machine
    original: dict[str, bytes] = field(default_factory=dict)
    setup_out: str = ""
    wired: dict[str, bytes] = field(default_factory=dict)
    second_out: str = ""
    second: dict[str, bytes] = field(default_factory=dict)
    lists: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    gemini_untrusted: subprocess.CompletedProcess[str] | None = None
    codex_hooks: list[dict[str, Any]] = field(default_factory=list)
    pi: PiRun | None = None
    after_clis: dict[str, bytes] = field(default_factory=dict)
    third_out: str = ""
    remove_out: str = ""
    removed: dict[str, bytes] = field(default_factory=dict)
    lists_after: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    pi_after: PiRun | None = None


def all_lists(machine: Machine) -> dict[str, subprocess.CompletedProcess[str]]:
    return {
        harness: mcp_list(machine, harness, **(TRUSTED if harness == "gemini" else {}))
        for harness in ("claude-code", "gemini", "codex", "opencode")
    }


@pytest.fixture(scope="module")
def real() -> Iterator[RealRun]:
    for harness in CLIS:
        require_cli(harness)
    with machine_context(with_clis=True) as machine:
        preinstall_opencode_plugin(machine)
        run = RealRun(machine)
        # Each CLI once, as the person's own use would have: they migrate and complete their files.
        warm = all_lists(machine)
        for harness, done in warm.items():
            if done.returncode != 0 or "notes" not in done.stdout:
                version = CLIS[harness][2]
                pytest.fail(
                    f"{harness} {version}: `mcp list` does not work here before hive is involved "
                    f"(exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
                )
        pi_headless(machine, wait_for_session=False)
        run.original = machine.snapshot()

        run.setup_out = machine.setup()
        run.wired = machine.snapshot()
        run.second_out = machine.setup()
        run.second = machine.snapshot()

        run.lists = all_lists(machine)
        run.gemini_untrusted = mcp_list(machine, "gemini")
        run.codex_hooks = codex_hooks(machine)
        machine.hive("status")  # the sidecar pi's extension registers with (hive mcp started one already)
        run.pi = pi_headless(machine, wait_for_session=True)
        run.after_clis = machine.snapshot()
        run.third_out = machine.setup()

        run.remove_out = machine.setup("--remove")
        run.removed = machine.snapshot()
        run.lists_after = all_lists(machine)
        run.pi_after = pi_headless(machine, wait_for_session=False)
        yield run


def explain(harness: str, done: subprocess.CompletedProcess[str]) -> str:
    return f"{harness} {CLIS[harness][2]} (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"


def test_setup_detects_every_cli_with_its_version_and_says_what_it_will_do(real: RealRun) -> None:
    rows = plan_rows(real.setup_out)
    for harness, (binary, package, _) in CLIS.items():
        version = installed_version(package)  # the pin, or the latest release under HIVE_E2E_LATEST
        assert f" {version} " in rows[harness] and f"/.bin/{binary}" in rows[harness], rows[harness]
        assert "wire: " in rows[harness]
    assert "~/.cursor" in rows["cursor"] and "wire: ~/.cursor/mcp.json" in rows["cursor"]


def test_a_second_setup_changes_no_byte(real: RealRun) -> None:
    assert configs(real.second) == configs(real.wired)
    assert real.second_out.count("nothing to change") == 6
    # Nor after the CLIs ran against the wired files, which they read without rewriting.
    assert real.third_out.count("nothing to change") == 6
    assert sorted(path for path in configs(real.original) if real.after_clis.get(path) != real.wired.get(path)) == []


def test_claude_code_spawns_hive_and_reports_it_connected_next_to_the_persons_server(real: RealRun) -> None:
    done = real.lists["claude-code"]
    assert done.returncode == 0, explain("claude-code", done)
    assert "hive: " in done.stdout and " mcp - ✔ Connected" in done.stdout, explain("claude-code", done)
    assert "notes: " in done.stdout and "notes_server.py - ✔ Connected" in done.stdout


def test_gemini_spawns_hive_and_reports_it_connected_in_a_trusted_folder(real: RealRun) -> None:
    done = real.lists["gemini"]
    assert done.returncode == 0, explain("gemini", done)
    assert "✓ hive: " in done.stdout and "(stdio) - Connected" in done.stdout, explain("gemini", done)
    assert "✓ notes: " in done.stdout


def test_gemini_still_asks_for_folder_trust_hive_did_not_bypass_it(real: RealRun) -> None:
    done = real.gemini_untrusted
    assert done is not None
    assert "hive: " in done.stdout and "- Disabled" in done.stdout, explain("gemini", done)
    assert "folder is untrusted" in done.stdout
    assert "gemini: Gemini CLI loads MCP servers and hooks only in folders you trust" in real.setup_out


def test_codex_lists_hive_with_the_persons_server(real: RealRun) -> None:
    done = real.lists["codex"]
    assert done.returncode == 0, explain("codex", done)
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert "hive" in rows and rows["hive"].split()[1].endswith("hive") and " mcp " in rows["hive"], explain(
        "codex", done
    )
    assert "enabled" in rows["hive"] and "notes" in rows


def test_codex_sees_hives_hooks_untrusted_until_the_person_trusts_them(real: RealRun) -> None:
    ours = [h for h in real.codex_hooks if "hive_hook.py" in h["command"]]
    assert {h["eventName"] for h in ours} == {
        "sessionStart",
        "userPromptSubmit",
        "postToolUse",
        "stop",
        "permissionRequest",
    }
    assert {h["trustStatus"] for h in ours} == {"untrusted"}
    persons = [h for h in real.codex_hooks if h["command"] == "notify-send 'Codex is done'"]
    assert len(persons) == 1 and persons[0]["eventName"] == "stop"
    assert "type `/hooks` and trust hive's entries" in real.setup_out


def test_opencode_spawns_hive_and_reports_it_connected(real: RealRun) -> None:
    done = real.lists["opencode"]
    assert done.returncode == 0, explain("opencode", done)
    assert "✓ hive" in done.stdout and "connected" in done.stdout.split("✓ hive", 1)[1].split("\n")[0], explain(
        "opencode", done
    )
    assert "✓ notes" in done.stdout


def test_pi_loads_hives_extension_and_skill_next_to_the_persons_extension(real: RealRun) -> None:
    assert real.pi is not None
    names = {c["name"]: c for c in real.pi.commands}
    assert "greet" in names and names["greet"]["source"] == "extension", real.pi.stderr
    assert "skill:hive" in names, real.pi.stderr
    # The extension ran: it registered the pi session with the sidecar.
    assert real.pi.session is not None, (
        f"pi {CLIS['pi'][2]}: the hive extension registered no session\n{real.pi.stderr}"
    )
    assert real.pi.session["address"] == "alice/api-pi" and real.pi.session["tier"] == "push"


def test_remove_gives_back_every_config_byte_for_byte(real: RealRun) -> None:
    original, removed = configs(real.original), configs(real.removed)
    assert sorted(path for path in original if removed.get(path) != original[path]) == []
    written = set(configs(real.wired)) - set(original)
    assert written and sorted(written & set(removed)) == []
    for line in (
        "~/.claude.json: restored to its content before setup",
        "~/.codex/config.toml: restored to its content before setup",
        "~/.gemini/settings.json: restored to its content before setup",
        "~/.config/opencode/opencode.json: restored to its content before setup",
        "~/.pi/agent/extensions/hive.ts: deleted (hive created it)",
    ):
        assert line in real.remove_out


def test_after_remove_the_clis_show_only_the_persons_own_entries(real: RealRun) -> None:
    for harness, done in real.lists_after.items():
        assert done.returncode == 0, explain(harness, done)
        assert "notes" in done.stdout, explain(harness, done)
        assert "hive" not in done.stdout.replace(str(real.machine.root), ""), explain(harness, done)
    assert real.pi_after is not None
    names = {c["name"] for c in real.pi_after.commands}
    assert "greet" in names and "skill:hive" not in names


def test_ci_pins_an_exact_version_of_every_cli_these_tests_run() -> None:
    pins = npm_pins()
    for harness, (_, package, _) in CLIS.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", pins.get(package, "")), (
            f"{harness}: .ci/npm-packages pins no exact version of {package}: {pins.get(package)!r}"
        )


@pytest.mark.parametrize("harness", sorted(CLIS))
def test_each_descriptor_names_the_newest_version_its_tests_run(harness: str) -> None:
    # hive doctor compares the installed harness with this; the e2e tests run the pin and, where a
    # harness moved on, its current release too.
    package = CLIS[harness][1]
    versions = [v for v in (npm_pins().get(package), npm_pins("npm-packages-current").get(package)) if v]
    newest = max(versions, key=lambda v: tuple(int(p) for p in v.split(".")))
    assert registry.harness(harness).identity.tested_up_to == newest
