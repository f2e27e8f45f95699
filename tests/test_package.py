"""The distribution as a user gets it: built from a clean clone's files, complete, and working once installed.

The wheel and sdist are built from a copy of exactly the git-tracked files, so a file the package
needs but nobody committed is missing here as it is in a clean clone. The wheel is installed (not
editable) into a fresh venv that sees the test venv's dependencies but not its ``hive``, and run
in a fresh HOME.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import copy_tracked, link_dependencies, tracked_files

# Each source folder and where it lands in the installed package.
PACKAGE_FOLDERS = {
    "sidecar": "hive/sidecar",
    "integrations": "hive/integrations",
    "installer": "hive/installer",
    "skills": "hive/skills",
}
BUILD_TIMEOUT = 300


def build(hook: str, source: Path, out: Path) -> tuple[Path, str]:
    """Run one PEP 517 hook of setuptools in ``source``, as pip or `python -m build` would; returns
    the artifact and everything the build printed."""
    out.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; from setuptools import build_meta; print(build_meta.{hook}(sys.argv[1]))",
            str(out),
        ],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert result.returncode == 0, f"{hook} failed:\n{result.stdout}\n{result.stderr}"
    return out / result.stdout.strip().splitlines()[-1], result.stdout + result.stderr


@dataclass
class Built:
    tracked: list[str]
    sdist: Path
    wheel: Path
    log: str


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist built from a copy of the tracked files, and the wheel built from that sdist."""
    root = tmp_path_factory.mktemp("dist")
    clone = root / "clone"
    tracked = copy_tracked(clone)
    sdist, sdist_log = build("build_sdist", clone, root / "sdist")
    with tarfile.open(sdist) as archive:
        archive.extractall(root / "unpacked", filter="data")
    (unpacked,) = (root / "unpacked").iterdir()
    wheel, wheel_log = build("build_wheel", unpacked, root / "wheel")
    return Built(tracked, sdist, wheel, sdist_log + wheel_log)


@dataclass
class Installed:
    """A fresh venv holding the wheel, and a fresh HOME to run it in."""

    venv: Path
    home: Path
    hive_home: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def hive(self) -> Path:
        return self.venv / "bin" / "hive"

    @property
    def env(self) -> dict[str, str]:
        # Nothing of the test's own environment that points at the checkout or the user's folders.
        return {
            "HOME": str(self.home),
            "HIVE_HOME": str(self.hive_home),
            "HIVE_KEYRING": "off",
            "PATH": f"{self.venv / 'bin'}:/usr/bin:/bin",
            "LANG": "C.UTF-8",
        }

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.hive), *args], env=self.env, cwd=self.home, capture_output=True, text=True, timeout=timeout
        )


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("installed")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    link_dependencies(venv, built.wheel)
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(built.wheel)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    home = root / "home"
    for harness_folder in (".claude", ".codex", ".gemini"):
        (home / harness_folder).mkdir(parents=True)
    hive_home = Path(tempfile.mkdtemp(prefix="hive-pkg-", dir="/tmp"))  # short: the socket stays inside
    (hive_home / "config.toml").write_text(
        'person = "alice"\nmachine = "m1"\n\n[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n'
    )
    machine = Installed(venv, home, hive_home)
    yield machine
    with contextlib.suppress(ValueError, OSError):  # a sidecar `hive mcp` started; not a pid reused since
        pid = int((hive_home / "sidecar.lock").read_text().strip())
        if str(venv).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGTERM)
    shutil.rmtree(hive_home, ignore_errors=True)


def package_files(names: list[str]) -> set[str]:
    """The tracked files of the package folders, as paths inside the installed package."""
    return {
        f"{PACKAGE_FOLDERS[name.split('/')[0]]}/{name.split('/', 1)[1]}"
        for name in names
        if name.split("/")[0] in PACKAGE_FOLDERS
    }


def test_the_wheel_built_from_the_sdist_holds_every_tracked_file_of_the_package_folders(built: Built) -> None:
    expected = package_files(built.tracked)
    names = set(zipfile.ZipFile(built.wheel).namelist())
    shipped = {name for name in names if not name.startswith("hive_agents-")}
    assert sorted(expected - shipped) == [], "tracked files missing from the wheel"
    assert {name.split("/")[0] for name in shipped} == {"hive"}
    assert not [name for name in shipped if "__pycache__" in name or name.endswith(".pyc")]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "hive = hive.sidecar.cli.console:main" in zipfile.ZipFile(built.wheel).read(entry_points).decode()


def test_the_sdist_holds_every_tracked_file_of_the_package_folders_and_the_build_warns_about_none(built: Built) -> None:
    with tarfile.open(built.sdist) as archive:
        members = {member.name.split("/", 1)[1] for member in archive.getmembers() if member.isfile()}
    missing = {name for name in built.tracked if name.split("/")[0] in PACKAGE_FOLDERS} - members
    assert sorted(missing) == [], "tracked files missing from the sdist"
    assert {"pyproject.toml", "setup.py", "README.md"} <= members
    assert "would be ignored" not in built.log and "SetuptoolsDeprecationWarning" not in built.log, built.log


def test_every_module_of_the_installed_package_imports_from_the_fresh_venv(installed: Installed) -> None:
    script = (
        "import importlib, pkgutil, sys\n"
        "import hive\n"
        "names = []\n"
        "for info in pkgutil.walk_packages(hive.__path__, 'hive.', onerror=lambda name: sys.exit(name)):\n"
        "    module = importlib.import_module(info.name)\n"
        "    names.append(info.name + ' ' + module.__file__)\n"
        "print('\\n'.join(names))\n"
    )
    result = subprocess.run(
        [str(installed.python), "-c", script],
        env=installed.env,
        cwd=installed.home,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    modules = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    site = str(installed.venv)
    assert {name for name, path in modules.items() if not path.startswith(site)} == set()
    for harness in ("claude_code", "codex", "cursor", "gemini", "opencode", "pi"):
        assert f"hive.integrations.{harness}" in modules
    assert "hive.integrations.codex.app_server" in modules
    tracked_modules = {
        name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for name in package_files(tracked_files())
        if name.endswith(".py")
    }
    assert sorted(tracked_modules - set(modules)) == [], "tracked modules the installed package cannot import"


def test_in_a_fresh_home_the_installed_hive_starts_its_sidecar_and_finds_the_harnesses(installed: Installed) -> None:
    status = installed.run("status")
    assert status.returncode == 0, status.stderr
    assert "running" in status.stdout and str(installed.hive_home) in status.stdout
    pid = int((installed.hive_home / "sidecar.lock").read_text().strip())
    os.kill(pid, 0)  # the sidecar it started is alive

    dry = installed.run("setup", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    found = {line.split()[0] for line in dry.stdout.splitlines() if line.strip() and "not found" not in line}
    assert {"claude-code", "codex", "gemini"} <= found, dry.stdout
    assert not (installed.home / ".claude" / "settings.json").exists()  # a dry run writes nothing

    assert installed.run("stop").returncode == 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the sidecar (pid {pid}) is still running after `hive stop`")


@pytest.mark.anyio
async def test_the_installed_hive_mcp_lists_its_tools_to_the_official_client(installed: Installed) -> None:
    params = StdioServerParameters(
        command=str(installed.hive), args=["mcp"], env=installed.env, cwd=str(installed.home)
    )
    with anyio.fail_after(120):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {tool.name for tool in (await session.list_tools()).tools}
    assert {"send_message", "check_inbox", "list_team"} <= tools
