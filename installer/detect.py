"""Which harnesses this machine has: each descriptor's binaries on PATH, its config folders, its version.

Finding a version must not touch the person's files: a harness CLI started with ``--version``
still writes into its home (Gemini CLI leaves ``~/.gemini/projects.json.*.tmp``, opencode
creates its data, state and cache folders). So the version comes from package metadata first:
the npm ``package.json`` whose ``bin`` is the binary found on PATH, which is how every harness
here is published. Only a binary without such metadata (a native installer, a Homebrew build)
is run, and then with a throwaway HOME and XDG folders, removed afterwards. Those probes run for
all harnesses at once under a short timeout, so a slow or hung CLI costs seconds, never a hang.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from hive.integrations.registry import Harness

from .errors import display

VERSION_TIMEOUT = 20.0  # node CLIs take seconds to start on a busy machine; the probes run in parallel
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:[-+.][0-9A-Za-z.]+)?")
# Where a CLI keeps its own state: pointed into the throwaway home for a probe.
_HOME_VARS = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


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


def package_version(binary: Path) -> str | None:
    """The version in the npm ``package.json`` that publishes ``binary``, if one does.

    npm links ``node_modules/.bin/<name>`` (or ``<prefix>/bin/<name>``) to a file inside the
    package; the package is the nearest folder above that file whose ``package.json`` lists the
    file under ``bin``.
    """
    try:
        real = binary.resolve(strict=True)
    except OSError:
        return None
    for folder in real.parents:
        manifest = folder / "package.json"
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict):
            bins = data.get("bin")
            targets = [bins] if isinstance(bins, str) else list(bins.values()) if isinstance(bins, dict) else []
            for target in targets:
                try:
                    points_here = isinstance(target, str) and (folder / target).resolve() == real
                except OSError:
                    points_here = False
                if points_here and isinstance(data.get("version"), str):
                    return data["version"]
        if folder.name == "node_modules" or folder == folder.parent:
            break  # past the package: a package.json further up is some project's, not this binary's
    return None


def _probe_version(binary: Path, args: tuple[str, ...]) -> tuple[str | None, str | None]:
    with tempfile.TemporaryDirectory(prefix="hive-probe-") as scratch:
        env = {**os.environ, "NO_COLOR": "1"}
        for var in _HOME_VARS:
            env[var] = str(Path(scratch) / var.lower())
            os.mkdir(env[var])
        try:
            # A session of its own: a harness sharing the person's session makes the sidecar take the
            # person's other hive commands for its agent's while it runs (sidecar/base/peer.py).
            done = subprocess.run(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=VERSION_TIMEOUT,
                env=env,
                cwd=scratch,
                start_new_session=True,
            )
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


def find_version(binary: Path, args: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(version, None) or (None, why not): from package metadata, else from a sandboxed ``--version``."""
    version = package_version(binary)
    if version is not None:
        return version, None
    return _probe_version(binary, args)


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
        found.version, found.version_problem = find_version(found.binary, identity.version_args)
    return found


def detect(harnesses: list[Harness], home: Path, probe: bool = True) -> dict[str, Detection]:
    """Detect every harness in ``harnesses`` (version probes in parallel), keyed by canonical name."""
    if not harnesses:
        return {}
    with ThreadPoolExecutor(max_workers=len(harnesses)) as pool:
        results = pool.map(lambda h: detect_one(h, home, probe), harnesses)
        return {d.name: d for d in results}
