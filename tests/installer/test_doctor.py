"""``hive doctor`` on a real machine: a real sidecar, ``hive mcp`` spoken to over MCP, Codex asked itself."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hive.integrations import registry
from tests.conftest import copy_tracked
from tests.installer.conftest import Machine, machine_context, require_cli
from tests.installer.test_real_clis import codex_hooks


def report(machine: Machine, expect: int) -> dict[str, Any]:
    done = machine.hive("doctor", "--json", timeout=120)
    assert done.returncode == expect, f"hive doctor exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["ok"] is (expect == 0)
    return result


def doctor(machine: Machine, expect: int) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["area"], c["name"]): c for c in report(machine, expect)["checks"]}


def test_a_fresh_correct_setup_exits_0_and_lists_the_persons_own_steps_as_todos(machine: Machine) -> None:
    machine.setup()
    result = report(machine, expect=0)
    checks = {(c["area"], c["name"]): c for c in result["checks"]}
    assert result["failures"] == []
    assert [(c["area"], c["name"]) for c in result["todo"]] == [("gemini", "folder trust")]
    assert (
        checks["gemini", "folder trust"]["fix"] == "trust a project folder when `gemini` asks there (or with "
        "`/permissions`)"
    )
    assert checks["install", "complete"]["status"] == "ok"

    running = checks["sidecar", "running"]
    assert running["status"] == "ok" and "it was not running; doctor started it" in running["detail"]
    assert checks["sidecar", "version"]["status"] == "ok"
    assert checks["sidecar", "socket"] == {**checks["sidecar", "socket"], "status": "ok"}
    assert checks["sidecar", "socket"]["detail"].endswith("hive.sock, mode 0600")
    assert checks["team", "state"] == {
        "area": "team",
        "name": "state",
        "status": "info",
        "detail": "no team yet: this machine only (alice on m1)",
        "fix": None,
    }
    mcp = checks["mcp", "hive mcp"]
    assert mcp["status"] == "ok" and "list_team" in mcp["detail"] and "send_message" in mcp["detail"]
    for harness in ("claude-code", "codex", "cursor", "gemini", "opencode", "pi"):
        assert checks[harness, "wired"]["status"] == "ok", checks[harness, "wired"]
        assert checks[harness, "config parses"]["status"] == "ok"
    assert checks["codex", "hooks trusted"]["status"] == "info"  # no codex binary here to ask

    text = machine.hive("doctor")
    assert text.returncode == 0 and text.stdout.rstrip().endswith("all good, 1 step left for you")
    assert "  TODO  folder trust" in text.stdout
    assert (
        "needs your action (hive never takes these steps for you):\n  - gemini folder trust: trust a project"
        in text.stdout
    )

    # Once the person trusted a folder, Gemini's trust is information, not a step left.
    machine.write(".gemini/trustedFolders.json", json.dumps({str(machine.project): "TRUST_FOLDER"}))
    assert doctor(machine, expect=0)["gemini", "folder trust"]["status"] == "info"
    # The sidecar was already running this time.
    assert "doctor started it" not in doctor(machine, expect=0)["sidecar", "running"]["detail"]


def test_each_problem_comes_with_the_command_that_fixes_it(machine: Machine) -> None:
    machine.setup()
    claude = json.loads(machine.read(".claude.json"))
    del claude["mcpServers"]["hive"]
    machine.write(".claude.json", json.dumps(claude, indent=2) + "\n")
    machine.write(".gemini/settings.json", '{\n  "mcpServers": {\n    "hive": 1,\n  }\n}\n')
    machine.write(".pi/agent/extensions/hive.ts", "// edited by hand\n")
    (machine.home / ".cursor/hooks.json").unlink()

    checks = doctor(machine, expect=1)
    assert checks["claude-code", "wired"]["status"] == "fail"
    assert "not as setup writes it: ~/.claude.json" in checks["claude-code", "wired"]["detail"]
    assert checks["claude-code", "wired"]["fix"] == "`hive setup --only claude-code`"
    parses = checks["gemini", "config parses"]
    assert parses["status"] == "fail" and "~/.gemini/settings.json: line 4, column 3:" in parses["detail"]
    assert parses["fix"] == "fix the file as described, then `hive setup --only gemini`"
    assert checks["pi", "wired"]["detail"] == "not as setup writes it: ~/.pi/agent/extensions/hive.ts"
    assert checks["cursor", "wired"]["detail"] == "missing ~/.cursor/hooks.json"
    assert checks["codex", "wired"]["status"] == "ok"

    text = machine.hive("doctor").stdout
    assert "FAIL  wired" in text and "fix: `hive setup --only claude-code`" in text
    assert text.rstrip().endswith("4 problems found")

    # Left out altogether, a harness is only a warning: the person may not want hive there.
    machine.setup("--remove", "--only", "pi")
    assert doctor(machine, expect=1)["pi", "wired"] == {
        "area": "pi",
        "name": "wired",
        "status": "warn",
        "detail": "not wired: hive is not set up for it",
        "fix": "`hive setup --only pi`",
    }


def test_a_socket_others_can_reach_is_a_failure(machine: Machine) -> None:
    status = json.loads(machine.hive("status", "--json").stdout)
    socket = status["socket"]
    import os

    os.chmod(socket, 0o666)
    checks = doctor(machine, expect=1)
    assert checks["sidecar", "socket"]["status"] == "fail"
    assert "mode 0666: other users may reach your sidecar" in checks["sidecar", "socket"]["detail"]
    assert checks["sidecar", "socket"]["fix"].startswith("`hive stop`")


def test_harnesses_that_are_not_there_are_information_not_failures(bare_machine: Machine) -> None:
    checks = doctor(bare_machine, expect=0)
    assert checks["cursor", "installed"] == {
        "area": "cursor",
        "name": "installed",
        "status": "info",
        "detail": "not found on this machine",
        "fix": None,
    }
    assert checks["service", "sidecar service"]["detail"] == "not installed: the sidecar starts on demand"


@pytest.fixture
def codex_machine() -> Iterator[Machine]:
    require_cli("codex")
    with machine_context(with_clis=True) as machine:
        yield machine


def test_codex_hooks_are_a_todo_until_the_person_trusts_them_in_codex(codex_machine: Machine) -> None:
    machine = codex_machine
    machine.setup("--only", "codex")
    result = report(machine, expect=0)
    trust = next(c for c in result["todo"] if (c["area"], c["name"]) == ("codex", "hooks trusted"))
    assert trust["status"] == "todo" and trust["detail"].startswith("5 of hive's 5 hooks are not trusted yet")
    assert trust["fix"] == "start `codex`, type `/hooks` and trust hive's entries"
    assert result["failures"] == []

    # What Codex's /hooks writes when the person trusts each entry: the hash of what they reviewed.
    approvals = "".join(
        f'\n[hooks.state."{h["key"]}"]\ntrusted_hash = "{h["currentHash"]}"\n'
        for h in codex_hooks(machine)
        if "hive_hook.py" in h["command"]
    )
    machine.write(".codex/config.toml", machine.read(".codex/config.toml") + approvals)
    checks = doctor(machine, expect=0)
    assert checks["codex", "hooks trusted"] == {
        **checks["codex", "hooks trusted"],
        "status": "ok",
        "detail": "all 5 of hive's hooks",
    }
    # A later setup keeps the person's approvals.
    assert "nothing to change" in machine.setup("--only", "codex")
    assert len(tomllib.loads(machine.read(".codex/config.toml"))["hooks"]["state"]) == 5


def test_project_approvals_are_todos_until_claude_code_and_gemini_have_them(machine: Machine) -> None:
    machine.setup("--project", str(machine.project), "--only", "claude,gemini")
    where = "~/src/api"
    result = report(machine, expect=0)
    todos = {c["name"]: c for c in result["todo"] if c["area"] == "projects"}
    assert set(todos) == {f"{where}: claude-code", f"{where}: gemini"}
    assert todos[f"{where}: claude-code"]["fix"] == f"start `claude` in {where} and approve 'hive' (or in `/mcp`)"
    assert result["failures"] == []

    # What Claude Code and Gemini CLI record once the person said yes in them.
    claude = json.loads(machine.read(".claude.json"))
    claude["projects"] = {str(machine.project): {"enabledMcpjsonServers": ["hive"]}}
    machine.write(".claude.json", json.dumps(claude, indent=2))
    machine.write(".gemini/trustedFolders.json", json.dumps({str(machine.project): "TRUST_FOLDER"}))
    checks = doctor(machine, expect=0)
    assert checks["projects", f"{where}: claude-code"]["status"] == "ok"
    assert checks["projects", f"{where}: gemini"]["status"] == "ok"


@pytest.fixture(scope="module")
def broken_hive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hive installed from its wheel (not editable) into a venv of its own, then a module deleted from it.

    The dependencies come from this test environment (a path line, not its .pth files, so the
    editable hive there stays out of sight)."""
    root = tmp_path_factory.mktemp("broken")
    wheels = root / "wheels"
    copy_tracked(root / "source")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(root / "source"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    wheel = next(wheels.glob("hive_agents-*.whl"))
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (purelib / "hive" / "sidecar" / "mail" / "codex_push.py").unlink()  # a module the sidecar imports at start
    return venv / "bin" / "hive"


def test_a_broken_install_names_the_missing_module_and_the_reinstall_not_a_socket_error(
    machine: Machine, broken_hive: Path
) -> None:
    done = subprocess.run(
        [str(broken_hive), "doctor", "--json"],
        cwd=machine.home,
        env=machine.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads(done.stdout)
    [failure] = result["failures"]
    assert (failure["area"], failure["name"]) == ("install", "complete")
    assert "missing hive.sidecar.mail.codex_push" in failure["detail"]
    assert "hive/sidecar/mail/codex_push.py is gone" in failure["detail"]
    assert failure["fix"].startswith("reinstall hive: `") and "--force-reinstall" in failure["fix"]
    assert "socket" not in done.stdout and "No such file" not in done.stdout
    assert not (machine.state / "hive.sock").exists()  # it did not try to start a sidecar that cannot run

    text = subprocess.run(
        [str(broken_hive), "doctor"], cwd=machine.home, env=machine.env(), capture_output=True, text=True, timeout=120
    )
    assert text.returncode == 1 and "FAIL  complete" in text.stdout and "fix: reinstall hive: `" in text.stdout


def claude_printing(machine: Machine, version: str) -> dict[str, str]:
    """The machine's environment with a ``claude`` on PATH whose ``--version`` prints ``version``."""
    bin_dir = machine.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "claude"
    script.write_text(f"#!/bin/sh\necho '{version} (Claude Code)'\n")
    script.chmod(0o755)
    return machine.env(PATH=f"{bin_dir}:/usr/bin:/bin")


def test_doctor_says_when_claude_code_is_newer_than_any_version_hive_was_tested_with(machine: Machine) -> None:
    machine.setup()
    tested = registry.harness("claude-code").identity.tested_up_to
    newer = ".".join([*tested.split(".")[:-1], str(int(tested.split(".")[-1]) + 1)])
    done = machine.hive("doctor", "--json", env=claude_printing(machine, newer), timeout=120)
    check = {(c["area"], c["name"]): c for c in json.loads(done.stdout)["checks"]}["claude-code", "tested version"]
    assert check["status"] == "warn", check
    assert f"{newer} is newer than {tested}" in check["detail"] and tested in check["fix"]
    assert done.returncode == 0, "a newer harness is a warning, not a failure"

    done = machine.hive("doctor", "--json", env=claude_printing(machine, tested), timeout=120)
    check = {(c["area"], c["name"]): c for c in json.loads(done.stdout)["checks"]}["claude-code", "tested version"]
    assert check["status"] == "ok", check
