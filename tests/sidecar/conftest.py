"""Fixtures for the sidecar tests: no desktop unless a test asks for one, and a real one when it does."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hive.sidecar.person.dialog import DESKTOP_VARIABLES
from tests.sidecar.desktop import Desktop, running_desktop


@pytest.fixture(autouse=True)
def empty_runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No way to a desktop for anything these tests start: no bus, no display, an empty XDG_RUNTIME_DIR.

    A sidecar looks for the user's own bus in the runtime directory, so without this a test run
    on a developer's desktop could put real pop-ups on their screen and wait for them.
    """
    path = Path(tempfile.mkdtemp(prefix="hive-run-", dir="/tmp"))
    path.chmod(0o700)
    for name in DESKTOP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def desktop() -> Iterator[Desktop]:
    """A real notification server (dunst) on a private X display and session bus, stopped at teardown."""
    with running_desktop() as running:
        yield running
