"""Fixtures for the sidecar tests: a real desktop for pop-ups, and a runtime directory without one."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sidecar.desktop import Desktop, running_desktop


@pytest.fixture
def desktop() -> Iterator[Desktop]:
    """A real notification server (dunst) on a private X display and session bus, stopped at teardown."""
    with running_desktop() as running:
        yield running


@pytest.fixture
def empty_runtime() -> Iterator[Path]:
    """An XDG_RUNTIME_DIR with no bus in it."""
    path = Path(tempfile.mkdtemp(prefix="hive-run-", dir="/tmp"))
    path.chmod(0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)
