"""The code as shipped passes its checkers: mypy (strict for base/, daemon/ and the session and harness
registries), ruff check and ruff format.

mypy reads the *installed* package, as CI installs it (``pip install '.[test]'``, not editable),
so what it checks is what users get, py.typed markers included. An editable install (the dev
venv) maps ``hive.<folder>`` onto the repository's folders through an import hook mypy cannot
follow; there the same installed folders are laid out as ``hive/<folder>`` for it instead.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("hive.sidecar", "hive.integrations", "hive.installer")
FOLDERS = ("sidecar", "integrations", "installer", "skills")  # skills too: the others import it
TIMEOUT = 280  # a cold mypy run takes ~20 s; the suite's per-test limit is 300 s
# What mypy says when it cannot see the package where it looked (then it exits 2 and checks nothing).
NOT_FOUND = ("Can't find package", "cannot be type checked due to missing py.typed marker")


def run_mypy(cwd: Path) -> subprocess.CompletedProcess[str]:
    # The config is named: from a folder outside the repository mypy would not find pyproject.toml.
    args = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml")]
    for package in PACKAGES:
        args += ["-p", package]
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)


def installed_folder(folder: str) -> Path:
    spec = importlib.util.find_spec(f"hive.{folder}")
    assert spec is not None and spec.submodule_search_locations, f"hive.{folder} is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def test_the_package_type_checks_clean_at_mypys_default_settings(tmp_path: Path) -> None:
    # An empty working folder: mypy finds hive in site-packages only, never a folder of the checkout.
    empty = tmp_path / "cwd"
    empty.mkdir()
    result = run_mypy(empty)
    output = result.stdout + result.stderr
    if result.returncode == 2 and any(sign in output for sign in NOT_FOUND):
        root = tmp_path / "root"
        (root / "hive").mkdir(parents=True)
        for folder in FOLDERS:
            (root / "hive" / folder).symlink_to(installed_folder(folder), target_is_directory=True)
        result = run_mypy(root)
        output = result.stdout + result.stderr
    assert result.returncode == 0, f"mypy reports problems:\n{output}"


def test_the_repository_is_clean_under_ruff_check() -> None:
    # --no-cache: the test leaves nothing behind in the checkout.
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, f"ruff reports problems:\n{result.stdout}{result.stderr}"


def test_the_repository_is_formatted_as_ruff_format_writes_it() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, f"files ruff format would change (run `ruff format`):\n{result.stdout}"
