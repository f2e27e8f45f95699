"""A throwaway machine for ``hive setup``: its own HOME, XDG folders and hive state folder, and each
harness's own configuration already there, with entries of the person's that hive must keep.

The harness CLIs come from npm (``.ci/npm-packages``, installed into ``.cache/npm``) and run with
their telemetry and update checks off, inside the machine's HOME. Sidecars started along the way
(``hive mcp`` health checks start one) are stopped at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, loopback_config

HERE = Path(__file__).resolve().parent
# HIVE_E2E_LATEST=1: the upgrade check. .ci/run then installs the latest release of every package
# of .ci/npm-packages into .cache/npm-latest, and the tests run those instead of the pins.
LATEST = os.environ.get("HIVE_E2E_LATEST") == "1"
NPM = REPO / ".cache" / ("npm-latest" if LATEST else "npm")
NPM_BIN = NPM / "node_modules" / ".bin"
NOTES_SERVER = HERE / "notes_server.py"
INSTALL_HINT = "run `bash .ci/run`, or `grep -v '^#' .ci/npm-packages | xargs npm install --prefix .cache/npm`"


def npm_pins(name: str = "npm-packages") -> dict[str, str]:
    """package -> version, as ``.ci/<name>`` pins it (``@scope/name@1.2.3`` lines)."""
    lines = (REPO / ".ci" / name).read_text(encoding="utf-8").splitlines()
    specs = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return {package: version for package, _, version in (spec.rpartition("@") for spec in specs)}


def installed_version(package: str) -> str:
    """The version of ``package`` in the npm folder the tests run from (the pin, or the latest)."""
    return str(json.loads((NPM / "node_modules" / package / "package.json").read_text(encoding="utf-8"))["version"])


# harness -> (binary, npm package, version pinned in .ci/npm-packages)
CLIS = {
    harness: (binary, package, npm_pins().get(package, "?"))
    for harness, binary, package in (
        ("claude-code", "claude", "@anthropic-ai/claude-code"),
        ("codex", "codex", "@openai/codex"),
        ("gemini", "gemini", "@google/gemini-cli"),
        ("opencode", "opencode", "opencode-ai"),
        ("pi", "pi", "@mariozechner/pi-coding-agent"),
    )
}

# Telemetry, update checks and background downloads off (../shared/notes/harnesses.md).
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "PI_OFFLINE": "1",
    "PI_TELEMETRY": "0",
    "PI_SKIP_VERSION_CHECK": "1",
    "NO_COLOR": "1",
}

# Variables of the machine running the tests that would point a CLI or hive somewhere else.
FOREIGN_ENV = (
    "HIVE_HOME",
    "CODEX_HOME",
    "CLAUDE_CONFIG_DIR",
    "GEMINI_CLI_HOME",
    "OPENCODE_CONFIG",
    "OPENCODE_CONFIG_DIR",
    "PI_CODING_AGENT_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "GEMINI_CLI_TRUST_WORKSPACE",
)


def require_cli(harness: str) -> Path:
    """The npm-installed binary of ``harness``; fails (never skips) naming it and its version."""
    binary, package, version = CLIS[harness]
    path = NPM_BIN / binary
    if not path.exists():
        pytest.fail(f"{harness}: {package}@{version} is not installed ({path} missing); {INSTALL_HINT}")
    return path


@dataclass
class Machine:
    root: Path
    with_clis: bool

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def project(self) -> Path:
        return self.home / "src" / "api"

    @property
    def manifest(self) -> dict[str, Any]:
        return json.loads((self.state / "setup" / "manifest.json").read_text())

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
        # Without the CLIs on PATH, detection goes by config folders only and runs no version probe.
        system_path = "/usr/local/bin:/usr/bin:/bin"
        node = shutil.which("node")
        if node:
            system_path = f"{Path(node).parent}:{system_path}"
        env.update(QUIET_ENV)
        env.update(
            {
                "HOME": str(self.home),
                "HIVE_HOME": str(self.state),
                "XDG_CONFIG_HOME": str(self.home / ".config"),
                "XDG_DATA_HOME": str(self.home / ".local" / "share"),
                "XDG_STATE_HOME": str(self.home / ".local" / "state"),
                "XDG_CACHE_HOME": str(self.home / ".cache"),
                "PATH": f"{NPM_BIN}:{system_path}" if self.with_clis else system_path,
            }
        )
        env.update(extra)
        return env

    def hive(
        self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hive.sidecar.cli", *args],
            cwd=cwd or self.home,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def setup(self, *args: str, expect: int = 0, **kwargs: Any) -> str:
        done = self.hive("setup", *args, **kwargs)
        assert done.returncode == expect, (
            f"hive setup {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
        return done.stdout

    def run(
        self, argv: list[str], cwd: Path | None = None, timeout: float = 120, input: str | None = None, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        # A session of its own, as a harness a person starts in a terminal has: a harness in the
        # test runner's session would make every other test's hive command look like its agent's.
        return subprocess.run(
            argv,
            cwd=cwd or self.project,
            env=self.env(**extra),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )

    def write(self, relative: str, text: str) -> Path:
        path = self.home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def read(self, relative: str) -> str:
        return (self.home / relative).read_text(encoding="utf-8")

    def snapshot(self) -> dict[str, bytes]:
        """Every file under HOME (relative path -> bytes), skipping installed npm packages."""
        files: dict[str, bytes] = {}
        for folder, dirs, names in os.walk(self.home):
            dirs[:] = [d for d in dirs if d != "node_modules"]
            for name in names:
                path = Path(folder) / name
                if not path.is_symlink():
                    files[str(path.relative_to(self.home))] = path.read_bytes()
        return files

    def stop_sidecars(self) -> None:
        self.hive("stop", timeout=60)
        # A harness that does not pass HIVE_HOME on to `hive mcp` starts one in the default state folder.
        default = self.env()
        default.pop("HIVE_HOME")
        self.hive("stop", env=default, timeout=60)


def python() -> str:
    return sys.executable


def write_defaults(machine: Machine) -> None:
    """Each harness's own configuration, as a person who already uses it would have it."""
    py, notes = json.dumps(python()), json.dumps(str(NOTES_SERVER))
    machine.project.mkdir(parents=True)
    machine.write(
        ".claude.json",
        f"""{{
  "numStartups": 12,
  "installMethod": "npm-global",
  "autoUpdates": false,
  "hasCompletedOnboarding": true,
  "mcpServers": {{
    "notes": {{
      "type": "stdio",
      "command": {py},
      "args": [
        {notes}
      ]
    }}
  }}
}}
""",
    )
    machine.write(
        ".claude/settings.json",
        """{
  "permissions": {
    "allow": [
      "Bash(git status)"
    ]
  },
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {
            "type": "command",
            "command": "~/bin/guard.sh"
          }
        ]
      }
    ],
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send 'Claude is done'"
          }
        ]
      }
    ]
  }
}
""",
    )
    machine.write(
        ".codex/config.toml",
        f"""# Codex settings, kept by hand
model = "gpt-5.5"  # the one I like
approval_policy = "on-request"
check_for_update_on_startup = false

[features]
plugins = false  # no marketplace fetch at start-up

[analytics]
enabled = false

# my own MCP server
[mcp_servers.notes]
command = {py}
args = [{notes}]

[projects."{machine.project}"]
trust_level = "trusted"
""",
    )
    machine.write(
        ".codex/hooks.json",
        """{
  "hooks": {
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send 'Codex is done'"
          }
        ]
      }
    ]
  }
}
""",
    )
    machine.write(
        ".gemini/settings.json",
        f"""{{
  "security": {{
    "auth": {{
      "selectedType": "gemini-api-key"
    }}
  }},
  "privacy": {{
    "usageStatisticsEnabled": false
  }},
  "telemetry": {{
    "enabled": false
  }},
  "general": {{
    "enableAutoUpdate": false,
    "enableAutoUpdateNotification": false
  }},
  "mcpServers": {{
    "notes": {{
      "command": {py},
      "args": [
        {notes}
      ]
    }}
  }},
  "hooks": {{
    "AfterAgent": [
      {{
        "hooks": [
          {{
            "type": "command",
            "command": "notify-send 'Gemini is done'"
          }}
        ]
      }}
    ]
  }}
}}
""",
    )
    machine.write(
        ".config/opencode/opencode.json",
        f"""{{
  "$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "mcp": {{
    "notes": {{
      "type": "local",
      "command": [
        {py},
        {notes}
      ],
      "enabled": true
    }}
  }}
}}
""",
    )
    machine.write(".pi/agent/settings.json", '{\n  "quietStartup": true,\n  "enableInstallTelemetry": false\n}\n')
    machine.write(
        ".pi/agent/extensions/greet.ts",
        """export default function (pi: any) {
  pi.registerCommand("greet", { description: "Say hello", handler: async () => {} });
}
""",
    )
    machine.write(
        ".cursor/mcp.json",
        f"""{{
  "mcpServers": {{
    "notes": {{
      "command": {py},
      "args": [
        {notes}
      ]
    }}
  }}
}}
""",
    )
    machine.write(
        ".cursor/hooks.json",
        """{
  "version": 1,
  "hooks": {
    "afterFileEdit": [
      {
        "command": "./hooks/format.sh"
      }
    ],
    "stop": [
      {
        "command": "notify-send 'Cursor is done'"
      }
    ]
  }
}
""",
    )
    machine.write(
        ".agents/skills/release-notes/SKILL.md",
        "---\nname: release-notes\ndescription: Write release notes. Use when asked for them.\n---\n\n"
        "Collect merged pull requests, group them, write the notes.\n",
    )


def preinstall_opencode_plugin(machine: Machine) -> None:
    """What opencode itself installs into a config folder on its first start, from the local npm cache.

    Offline, opencode's own background ``npm install @opencode-ai/plugin`` hangs start-up
    (../shared/notes/harnesses.md §4); the package is already in npm's cache from .ci/run.
    """
    version = CLIS["opencode"][2]
    folder = machine.home / ".config" / "opencode"
    (folder / "package.json").write_text(
        json.dumps({"dependencies": {"@opencode-ai/plugin": version}}, indent=2) + "\n"
    )
    cache = subprocess.run(["npm", "config", "get", "cache"], capture_output=True, text=True, timeout=60).stdout.strip()
    done = subprocess.run(
        ["npm", "install", "--offline", "--cache", cache, "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HOME": os.environ.get("HOME", str(machine.home))},
    )
    if done.returncode != 0:
        pytest.fail(
            f"opencode {version}: cannot pre-install @opencode-ai/plugin@{version} from the npm cache "
            f"{cache} (it hangs offline otherwise): {done.stderr.strip()[-500:]}; {INSTALL_HINT}"
        )


def new_machine(with_clis: bool) -> Machine:
    # Under /tmp with a short name: the sidecar's socket lives in the state folder.
    root = Path(tempfile.mkdtemp(prefix="hive-inst-", dir="/tmp"))
    machine = Machine(root, with_clis)
    machine.home.mkdir()
    machine.state.mkdir(mode=0o700)
    (machine.state / "config.toml").write_text(loopback_config('person = "alice"\nmachine = "m1"\n'), encoding="utf-8")
    return machine


def strays(machine: Machine) -> list[int]:
    """Processes (other than sidecars) still running with this machine's HOME or state folder."""
    marks = {f"HOME={machine.home}".encode(), f"HIVE_HOME={machine.state}".encode()}
    found: list[int] = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marks & environ and b"hive.sidecar\0--detach" not in command and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def wait_for_strays(machine: Machine, timeout: float = 30) -> None:
    if not Path("/proc/self/environ").exists():
        return
    deadline = time.monotonic() + timeout
    while strays(machine) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in strays(machine):  # children of the CLIs this test ran, still alive: end them
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def machine_context(with_clis: bool, defaults: bool = True) -> Iterator[Machine]:
    machine = new_machine(with_clis)
    try:
        if defaults:
            write_defaults(machine)
        yield machine
    finally:
        # An MCP health check may leave `hive mcp` finishing its start-up after the CLI exited, and it
        # would start a sidecar once stopped: let those end first.
        wait_for_strays(machine)
        machine.stop_sidecars()
        # Folders made read-only by a test must be writable again to be removed.
        for folder, dirs, _ in os.walk(machine.root):
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(Path(folder) / name, 0o755)
        shutil.rmtree(machine.root, ignore_errors=True)


@pytest.fixture
def machine() -> Iterator[Machine]:
    """A machine with every harness's config but none of their binaries on PATH (no version probes)."""
    with machine_context(with_clis=False) as m:
        yield m


@pytest.fixture
def bare_machine() -> Iterator[Machine]:
    """A machine with an empty HOME."""
    with machine_context(with_clis=False, defaults=False) as m:
        yield m


def plan_rows(out: str) -> dict[str, str]:
    """The rows of ``hive setup``'s plan table by harness, each wrapped PLAN cell joined back into one line."""
    rows: dict[str, str] = {}
    harness = ""
    for line in out.split("\nHARNESS", 1)[1].split("\n\n", 1)[0].splitlines()[1:]:
        if line.startswith(" "):
            rows[harness] += " " + line.strip()
        else:
            harness = line.split()[0]
            rows[harness] = line
    return rows
