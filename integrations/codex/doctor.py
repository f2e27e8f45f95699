"""``hive doctor``'s Codex check: whether Codex trusts hive's user hooks, asked of Codex itself.

Codex runs a non-managed hook only once the person has trusted it in ``/hooks``, and only Codex
knows which hook hashes the person approved: so doctor runs ``codex app-server`` and asks its
``hooks/list``, on a scratch copy of the Codex home, since an app-server started in the real
``~/.codex`` creates databases, logs and system skills there.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from hive.sidecar import __version__

from ..descriptor import HOOK_MARKERS, DoctorCheck, DoctorContext

NAME = "codex"
CODEX_TIMEOUT = 20.0


def _scratch_codex_home(hooks_file: Path, scratch: Path) -> Path:
    """A copy of the person's Codex home holding only what ``hooks/list`` reads: the hooks file and the
    config with its trust records, their keys moved to the copy's path (a key names its hooks file).

    Codex's app-server creates databases, logs and system skills in its home on start; run in the
    real ``~/.codex`` that would be doctor writing into the person's folder."""
    home = scratch / "codex-home"
    home.mkdir()
    copy = home / hooks_file.name
    copy.write_bytes(hooks_file.read_bytes())
    config = hooks_file.parent / "config.toml"
    try:
        doc = tomlkit.parse(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return home
    state = (doc.get("hooks") or {}).get("state")
    if state is not None:
        prefix = f"{hooks_file}:"
        for key in [k for k in state if k.startswith(prefix)]:
            state[f"{copy}:{key[len(prefix) :]}"] = state.pop(key)
    (home / "config.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")
    return home


def _codex_hooks(binary: Path, hooks_file: Path) -> list[dict[str, Any]]:
    """Codex's own view of hive's user hooks, from ``codex app-server``'s ``hooks/list``, with each
    hook's ``sourcePath`` and ``key`` given as in the person's own Codex home."""
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"clientInfo": {"name": "hive-doctor", "version": __version__}},
        },
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {}},
    ]
    with tempfile.TemporaryDirectory(prefix="hive-doctor-") as folder:
        scratch = Path(folder)
        home = _scratch_codex_home(hooks_file, scratch)
        copy = str(home / hooks_file.name)
        env = {**os.environ, "CODEX_HOME": str(home)}
        process = subprocess.Popen(
            [str(binary), "app-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=scratch,
            env=env,
            text=True,
            start_new_session=True,
        )  # see hive.installer.detect._probe_version: not the person's session
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
            process.stdin.flush()
            with _deadline(process, CODEX_TIMEOUT):
                for line in process.stdout:
                    try:
                        message = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if message.get("id") == 2:
                        if "error" in message:
                            raise RuntimeError(message["error"].get("message", "hooks/list failed"))
                        hooks = [hook for entry in message["result"]["data"] for hook in entry.get("hooks", [])]
                        for hook in hooks:
                            if hook.get("sourcePath") == copy:
                                hook["sourcePath"] = str(hooks_file)
                        return hooks
            raise RuntimeError(f"codex app-server gave no hooks/list answer within {CODEX_TIMEOUT:.0f}s")
        finally:
            process.kill()
            process.wait()
            with contextlib.suppress(OSError):  # a pipe to a killed process may refuse the final flush
                process.stdin.close()
            process.stdout.close()


class _deadline:
    """Kill ``process`` if the block takes longer than ``seconds`` (its blocked reads then end)."""

    def __init__(self, process: subprocess.Popen[str], seconds: float) -> None:
        self.timer = threading.Timer(seconds, process.kill)

    def __enter__(self) -> None:
        self.timer.start()

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()


def check_codex_trust(binary: Path | None, hooks_file: Path) -> DoctorCheck:
    if binary is None:
        return DoctorCheck("hooks trusted", "info", "cannot tell without the codex binary")
    try:
        hooks = _codex_hooks(binary, hooks_file)
    except (OSError, RuntimeError, KeyError, TypeError, tomlkit.exceptions.ParseError) as exc:
        return DoctorCheck("hooks trusted", "warn", f"could not ask Codex: {exc}")
    ours = [
        h
        for h in hooks
        if any(m in str(h.get("command", "")) for m in HOOK_MARKERS)
        and Path(str(h.get("sourcePath", ""))) == hooks_file
    ]
    if not ours:
        return DoctorCheck("hooks trusted", "fail", "Codex does not list hive's hooks", f"`hive setup --only {NAME}`")
    untrusted = [h for h in ours if h.get("trustStatus") not in ("trusted", "managed")]
    if untrusted:
        events = ", ".join(sorted({str(h.get("eventName")) for h in untrusted}))
        return DoctorCheck(
            "hooks trusted",
            "todo",
            f"{len(untrusted)} of hive's {len(ours)} hooks are not trusted yet ({events}): Codex skips them",
            "start `codex`, type `/hooks` and trust hive's entries",
        )
    return DoctorCheck("hooks trusted", "ok", f"all {len(ours)} of hive's hooks")


def checks(context: DoctorContext) -> list[DoctorCheck]:
    """Codex's hook trust, once hive's user files are all there and parse."""
    if not context.complete:
        return []
    hooks_file = next((p for p, g in context.files.items() if any(n.role == "hooks" for n in g)), None)
    return [] if hooks_file is None else [check_codex_trust(context.binary, hooks_file)]
