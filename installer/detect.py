"""Which harnesses this machine has: each descriptor's binaries on PATH, its config folders, its version.

The version probe runs the binary with the descriptor's ``version_args`` under a short timeout,
all harnesses at once, so a slow or hung CLI costs the table a few seconds, never a hang.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from hive.integrations.registry import Harness

from .errors import display

VERSION_TIMEOUT = 20.0  # node CLIs take seconds to start on a busy machine; the probes run in parallel
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:[-+.][0-9A-Za-z.]+)?")


@dataclass
class Detection:
    """What was found of one harness."""

    name: str
    title: str
    binary: Path | None = None
    version: str | None = None
    version_problem: str | None = None
    config_dirs: list[Path] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.binary is not None or bool(self.config_dirs)

    def where(self) -> str:
        places = ([display(self.binary)] if self.binary else []) + [display(d) for d in self.config_dirs]
        return ", ".join(places) or "-"


def _probe_version(binary: Path, args: tuple[str, ...]) -> tuple[str | None, str | None]:
    try:
        done = subprocess.run([str(binary), *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT, env={**os.environ, "NO_COLOR": "1"})
    except subprocess.TimeoutExpired:
        return None, f"`{binary.name} {' '.join(args)}` did not answer in {VERSION_TIMEOUT:.0f}s"
    except OSError as exc:
        return None, f"`{binary}` cannot run: {exc.strerror}"
    output = done.stdout.strip() or done.stderr.strip()
    match = _VERSION.search(output)
    if done.returncode != 0 or not match:
        first = output.splitlines()[0] if output else f"exit code {done.returncode}"
        return None, f"`{binary.name} {' '.join(args)}` said: {first[:120]}"
    return match.group(0), None


def detect_one(harness: Harness, home: Path, probe: bool = True) -> Detection:
    identity = harness.identity
    found = Detection(identity.name, identity.title)
    for name in identity.binaries:
        located = shutil.which(name)
        if located:
            found.binary = Path(located)
            break
    found.config_dirs = [home / folder for folder in identity.config_dirs if (home / folder).is_dir()]
    if probe and found.binary is not None:
        found.version, found.version_problem = _probe_version(found.binary, identity.version_args)
    return found


def detect(harnesses: list[Harness], home: Path, probe: bool = True) -> dict[str, Detection]:
    """Detect every harness in ``harnesses`` (version probes in parallel), keyed by canonical name."""
    if not harnesses:
        return {}
    with ThreadPoolExecutor(max_workers=len(harnesses)) as pool:
        results = pool.map(lambda h: detect_one(h, home, probe), harnesses)
        return {d.name: d for d in results}
