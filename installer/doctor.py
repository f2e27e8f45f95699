"""``hive doctor``: check the install, the sidecar, the team and every harness, and print the fix for each problem.

Each check is one :class:`Check` with a status (``ok``, ``info``, ``todo``, ``warn``, ``fail``)
and, for anything not ok, the exact command or step that fixes it. A ``todo`` is a step only the
person can take in a harness (trust hive's hooks in Codex, trust a folder in Gemini CLI, approve a
project's .mcp.json in Claude Code): listed, but a setup that only waits for those is correct and
exits 0. Exit code 1 when any check failed. The install is checked first (every module in
place), since a broken one fails everything else for that one reason.

The harness checks read the same descriptors ``hive setup`` writes from, so "wired" means "what
setup would write is there". The MCP check starts ``hive mcp`` as harnesses do and speaks MCP to
it with the official client; Codex's hook trust is asked of Codex itself (its app-server's
``hooks/list``, run on a scratch copy of its home), because only Codex knows which hook hashes
the person approved. Doctor writes nothing in the person's folders.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

import anyio
import tomlkit
import tomlkit.exceptions

from hive.integrations import registry
from hive.integrations.descriptor import HOOK_MARKERS
from hive.sidecar import __version__
from hive.sidecar.base.errors import HiveError
from hive.sidecar.base.paths import state_paths
from hive.sidecar.client import Client as SidecarClient

from . import documents, fileops, integrity, ownership, service
from .commands import install_context
from .detect import Detection, detect
from .errors import InstallError, display
from .manifest import Manifest
from .setup import resolve_path, setup_folder, skill_source

# "todo": hive is set up right, and a step only the person can take remains (trusting hooks or a
# folder in a harness). Listed, never a failure: a fresh, correct setup exits 0.
Status = Literal["ok", "info", "todo", "warn", "fail"]
MCP_TIMEOUT = 30.0
CODEX_TIMEOUT = 20.0
EXPECTED_TOOLS = {"list_team", "send_message", "check_inbox", "whoami"}


@dataclass
class Check:
    area: str  # "sidecar", "team", "mcp", "service" or a harness name
    name: str
    status: Status
    detail: str
    fix: str | None = None


# ---- the sidecar and the team -----------------------------------------------------------------------


def check_sidecar() -> tuple[list[Check], dict[str, Any] | None]:
    paths = state_paths()

    async def status(autostart: bool) -> dict[str, Any]:
        async with SidecarClient.open(paths, autostart=autostart) as client:
            return await client.call("status")

    checks: list[Check] = []
    started = ""
    try:
        result = anyio.run(status, False)
    except HiveError:
        started = " (it was not running; doctor started it, as any hive command does)"
        try:
            result = anyio.run(status, True)
        except HiveError as exc:
            checks.append(
                Check(
                    "sidecar",
                    "running",
                    "fail",
                    f"cannot start: {exc.message}",
                    f"read {display(paths.home / 'sidecar.stderr')} and {display(paths.log)}, "
                    "then run `hive sidecar` to see it fail in the foreground",
                )
            )
            return checks, None
    checks.append(
        Check("sidecar", "running", "ok", f"pid {result['pid']}, state folder {display(paths.home)}{started}")
    )
    if result.get("version") == __version__:
        checks.append(Check("sidecar", "version", "ok", __version__))
    else:
        checks.append(
            Check(
                "sidecar",
                "version",
                "fail",
                f"the sidecar runs {result.get('version')}, this hive is {__version__}",
                "`hive stop` (the next hive command starts this version)",
            )
        )
    socket = Path(result["socket"])
    try:
        mode = stat.S_IMODE(socket.stat().st_mode)
    except OSError as exc:
        checks.append(
            Check("sidecar", "socket", "fail", f"{socket}: {exc.strerror}", "`hive stop`, then `hive status`")
        )
    else:
        if mode == 0o600:
            checks.append(Check("sidecar", "socket", "ok", f"{display(socket)}, mode 0600"))
        else:
            checks.append(
                Check(
                    "sidecar",
                    "socket",
                    "fail",
                    f"{display(socket)} has mode {mode:04o}: other users may reach your sidecar",
                    "`hive stop`, then `hive status` (the sidecar recreates it private)",
                )
            )
    return checks, result


def check_team(status: dict[str, Any] | None) -> list[Check]:
    if status is None:
        return [Check("team", "state", "warn", "unknown: the sidecar did not answer")]
    if not status.get("team"):
        return [
            Check(
                "team",
                "state",
                "info",
                f"no team yet: this machine only ({status.get('person')} on {status.get('machine')})",
            )
        ]
    return [Check("team", "state", "ok", f"team {status['team']}")]


# ---- the MCP server -------------------------------------------------------------------------------------


async def _list_tools(argv: tuple[str, ...], cwd: Path, errlog: TextIO) -> list[str]:
    # The MCP SDK takes a while to import; only this check needs it.
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp_types import Implementation

    params = StdioServerParameters(command=argv[0], args=list(argv[1:]), env=dict(os.environ), cwd=cwd)
    with anyio.fail_after(MCP_TIMEOUT):
        async with Client(
            stdio_client(params, errlog=errlog),
            mode="legacy",
            client_info=Implementation(name="hive-doctor", version=__version__),
        ) as client:
            listed = await client.list_tools()
    return sorted(tool.name for tool in listed.tools)


def check_mcp(argv: tuple[str, ...]) -> Check:
    command = " ".join(argv)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errlog:
        try:
            tools = anyio.run(_list_tools, argv, Path.home() if Path.home().is_dir() else Path("/"), errlog)
        except BaseException as exc:  # a timeout, a crash, an exception group from the SDK: all mean "broken"
            if isinstance(exc, KeyboardInterrupt):
                raise
            errlog.seek(0)
            said = errlog.read().strip().splitlines()[-3:]
            reason = f"no answer within {MCP_TIMEOUT:.0f}s" if isinstance(exc, TimeoutError) else repr(exc)
            return Check(
                "mcp",
                "hive mcp",
                "fail",
                f"`{command}` failed: {reason}" + (f"; it said: {' | '.join(said)}" if said else ""),
                f"run `{command}` to see the error",
            )
    missing = EXPECTED_TOOLS - set(tools)
    if missing:
        return Check(
            "mcp",
            "hive mcp",
            "fail",
            f"answered, but without {', '.join(sorted(missing))}",
            "reinstall hive, then `hive setup`",
        )
    return Check("mcp", "hive mcp", "ok", f"starts and answers initialize + tools/list: {', '.join(tools)}")


# ---- harnesses ------------------------------------------------------------------------------------------


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
        )  # see detect._probe_version: not the person's session
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


def check_codex_trust(detection: Detection, hooks_file: Path) -> Check:
    if detection.binary is None:
        return Check("codex", "hooks trusted", "info", "cannot tell without the codex binary")
    try:
        hooks = _codex_hooks(detection.binary, hooks_file)
    except (OSError, RuntimeError, KeyError, TypeError, tomlkit.exceptions.ParseError) as exc:
        return Check("codex", "hooks trusted", "warn", f"could not ask Codex: {exc}")
    ours = [
        h
        for h in hooks
        if any(m in str(h.get("command", "")) for m in HOOK_MARKERS)
        and Path(str(h.get("sourcePath", ""))) == hooks_file
    ]
    if not ours:
        return Check("codex", "hooks trusted", "fail", "Codex does not list hive's hooks", "`hive setup --only codex`")
    untrusted = [h for h in ours if h.get("trustStatus") not in ("trusted", "managed")]
    if untrusted:
        events = ", ".join(sorted({str(h.get("eventName")) for h in untrusted}))
        return Check(
            "codex",
            "hooks trusted",
            "todo",
            f"{len(untrusted)} of hive's {len(ours)} hooks are not trusted yet ({events}): Codex skips them",
            "start `codex`, type `/hooks` and trust hive's entries",
        )
    return Check("codex", "hooks trusted", "ok", f"all {len(ours)} of hive's hooks")


def _gemini_trust(settings: Path, home: Path) -> Check | None:
    """Gemini CLI's folder trust (on unless its settings turn it off) hides hive in untrusted folders."""
    try:
        data = json.loads(settings.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if ((data.get("security") or {}).get("folderTrust") or {}).get("enabled") is False:
        return None
    try:
        folders = json.loads((home / ".gemini" / "trustedFolders.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        folders = {}
    trusted = [path for path, level in folders.items() if level in ("TRUST_FOLDER", "TRUST_PARENT")]
    if not trusted:
        return Check(
            "gemini",
            "folder trust",
            "todo",
            "Gemini CLI uses hive only in folders you trust, and none is trusted yet",
            "trust a project folder when `gemini` asks there (or with `/permissions`)",
        )
    return Check(
        "gemini",
        "folder trust",
        "info",
        f"Gemini CLI uses hive only in folders you trust ({len(trusted)} trusted so far)",
        "trust more folders when `gemini` asks there (or with `/permissions`)",
    )


def _gemini_trusts(folder: Path, home: Path) -> bool:
    try:
        folders = json.loads((home / ".gemini" / "trustedFolders.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    for path, level in folders.items() if isinstance(folders, dict) else ():
        if level == "TRUST_FOLDER" and Path(path) == folder:
            return True
        if level == "TRUST_PARENT" and folder.is_relative_to(Path(path).parent):
            return True
    return False


def _claude_approved(project: Path, home: Path) -> bool | None:
    """Whether Claude Code runs the ``hive`` server of ``project``'s .mcp.json: True, False (declined),
    None (not asked yet). Claude keeps the answer per project in ~/.claude.json, or a settings file."""
    sources: list[dict[str, Any]] = []
    try:
        projects = json.loads((home / ".claude.json").read_text(encoding="utf-8")).get("projects") or {}
        sources.append(projects.get(str(project)) or {})
    except (OSError, ValueError, AttributeError):
        pass
    for settings in (
        project / ".claude" / "settings.local.json",
        project / ".claude" / "settings.json",
        home / ".claude" / "settings.json",
    ):
        try:
            sources.append(json.loads(settings.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    for source in sources:
        if not isinstance(source, dict):
            continue
        if "hive" in (source.get("disabledMcpjsonServers") or []):
            return False
        if source.get("enableAllProjectMcpServers") is True or "hive" in (source.get("enabledMcpjsonServers") or []):
            return True
    return None


def check_projects(manifest: Manifest, home: Path) -> list[Check]:
    """The approvals hive's committed project files wait for, per project ``hive setup --project`` wired."""
    projects: dict[Path, set[str]] = {}
    context = install_context("project")
    table = registry.harnesses()
    for path, entry in manifest.files.items():
        if entry.scope != "project":
            continue
        for name in entry.harnesses:
            harness = table.get(name)
            for native in harness.native_files(context) if harness else ():
                if str(path).endswith("/" + native.path):
                    projects.setdefault(Path(str(path)[: -len(native.path) - 1]), set()).add(name)
    checks: list[Check] = []
    for project, names in sorted(projects.items()):
        where = display(project)
        if "claude-code" in names:
            approved = _claude_approved(project, home)
            if approved:
                checks.append(Check("projects", f"{where}: claude-code", "ok", "hive in .mcp.json is approved"))
            else:
                checks.append(
                    Check(
                        "projects",
                        f"{where}: claude-code",
                        "todo",
                        "Claude Code has not been allowed to start hive from .mcp.json"
                        + (" (it was declined)" if approved is False else ""),
                        f"start `claude` in {where} and approve 'hive' (or in `/mcp`)",
                    )
                )
        if "gemini" in names:
            if _gemini_trusts(project, home):
                checks.append(Check("projects", f"{where}: gemini", "ok", "the folder is trusted"))
            else:
                checks.append(
                    Check(
                        "projects",
                        f"{where}: gemini",
                        "todo",
                        "Gemini CLI reads the project's .gemini/settings.json only once you trust it",
                        f"start `gemini` in {where} and trust the folder (or with `/permissions`)",
                    )
                )
    return checks


def check_harness(harness: registry.Harness, detection: Detection, manifest: Manifest, home: Path) -> list[Check]:
    name = harness.name
    natives = harness.native_files(install_context("user"))
    paths = {resolve_path(n.path, "user", home) for n in natives}
    recorded = any(p in manifest.files and name in manifest.files[p].harnesses for p in paths)
    if not detection.found and not recorded:
        return [Check(name, "installed", "info", "not found on this machine")]
    checks: list[Check] = []
    if detection.binary is None:
        checks.append(Check(name, "installed", "info", f"no binary on PATH; config in {detection.where()}"))
    elif detection.version is None:
        checks.append(Check(name, "installed", "warn", f"{display(detection.binary)}: {detection.version_problem}"))
    else:
        checks.append(Check(name, "installed", "ok", f"{detection.version} at {display(detection.binary)}"))

    fix = f"`hive setup --only {name}`"
    by_path: dict[Path, list[Any]] = {}
    for native in natives:
        by_path.setdefault(resolve_path(native.path, "user", home), []).append(native)
    unparsed: list[str] = []
    missing: list[str] = []
    outdated: list[str] = []
    traces = 0  # files (skills aside: others share them) holding any part of hive's for this harness
    for path, group in by_path.items():
        data = fileops.read_or_none(path)
        if data is None:
            missing.append(display(path))
            continue
        fmt = group[0].format
        if fmt == "text":
            wanted = skill_source(group[0]) if group[0].role == "skill" else group[0].content
            traces += group[0].role != "skill"
            if data.decode("utf-8", errors="replace") != wanted:
                outdated.append(display(path))
            continue
        try:
            doc = documents.parse(fmt, path, data.decode("utf-8"))
        except (InstallError, UnicodeDecodeError) as exc:
            unparsed.append(str(exc))
            continue
        owned: dict[Any, Any] = {}
        for native in group:
            owned.update(native.owned)
        traces += ownership.any_parts(doc, owned)
        if not ownership.has_parts(doc, owned):
            outdated.append(display(path))
    if unparsed:
        checks.append(
            Check(name, "config parses", "fail", "; ".join(unparsed), f"fix the file as described, then {fix}")
        )
    else:
        present = len(by_path) - len(missing)
        checks.append(Check(name, "config parses", "ok", f"{present} of its {len(by_path)} files present, all parse"))
    if not traces and not unparsed:
        # Never wired (or removed): the person may have left it out on purpose, so not a failure.
        checks.append(Check(name, "wired", "warn", "not wired: hive is not set up for it", fix))
    elif missing or outdated:
        detail = "; ".join(
            [
                *(["missing " + ", ".join(missing)] if missing else []),
                *(["not as setup writes it: " + ", ".join(outdated)] if outdated else []),
            ]
        )
        checks.append(Check(name, "wired", "fail", detail, fix))
    elif not unparsed:
        checks.append(Check(name, "wired", "ok", ", ".join(sorted(display(p) for p in by_path))))
    if name == "codex" and not missing and not unparsed:
        hooks_file = next((p for p, g in by_path.items() if any(n.role == "hooks" for n in g)), None)
        if hooks_file is not None:
            checks.append(check_codex_trust(detection, hooks_file))
    if name == "gemini":
        settings = next(iter(by_path), None)
        trust = _gemini_trust(settings, home) if settings else None
        if trust:
            checks.append(trust)
    return checks


def _release(text: str) -> tuple[int, ...] | None:
    """``(2, 1, 332)`` from a version probe's ``2.1.332 (Claude Code)``; None without a version."""
    found = re.search(r"\d+(?:\.\d+)+", text)
    return tuple(int(part) for part in found.group().split(".")) if found else None


def check_tested_version(harness: registry.Harness, detection: Detection) -> list[Check]:
    """Whether the installed harness is newer than the newest version hive was tested with."""
    tested = harness.identity.tested_up_to
    installed = _release(detection.version or "")
    if not tested or installed is None or (newest := _release(tested)) is None:
        return []
    if installed <= newest:
        return [Check(harness.name, "tested version", "ok", f"hive was tested with it up to {tested}")]
    return [
        Check(
            harness.name,
            "tested version",
            "warn",
            f"{detection.version} is newer than {tested}, the newest version hive was tested with: "
            "hive most likely works, but a new release can change how hooks reach the model or "
            "which tools it is offered, and mail may then arrive late, twice or not at all",
            f"update hive; if `hive doctor` still says this and mail goes missing, keep "
            f"{harness.identity.title} at {tested} until a hive release is tested with the newer one",
        )
    ]


def check_service(manifest: Manifest) -> list[Check]:
    if manifest.service is None:
        return [Check("service", "sidecar service", "info", "not installed: the sidecar starts on demand", None)]
    path = Path(manifest.service["path"])
    if not path.exists():
        return [Check("service", "unit file", "fail", f"{display(path)} is missing", "`hive setup --service`")]
    checks = [Check("service", "unit file", "ok", display(path))]
    if manifest.service.get("manager") == "systemd" and service.systemd_available():
        ok, said = service._manager("systemctl", "--user", "is-active", service.UNIT_NAME)
        checks.append(
            Check(
                "service",
                "active",
                "ok" if ok else "fail",
                said or "inactive",
                None if ok else f"`systemctl --user enable --now {service.UNIT_NAME}`",
            )
        )
    return checks


# ---- the command ----------------------------------------------------------------------------------------


def check_install() -> list[Check]:
    broken = integrity.check(registry.BUILTIN)
    if not broken:
        return [Check("install", "complete", "ok", f"hive {__version__}: every module is in place")]
    names = ", ".join(item.module for item in broken)
    first = broken[0].detail
    return [
        Check(
            "install",
            "complete",
            "fail",
            f"this hive installation is broken: missing {names} ({first}{'; …' if len(broken) > 1 else ''}); "
            "the sidecar cannot start without it",
            integrity.reinstall_hint(),
        )
    ]


def run_checks() -> list[Check]:
    home = Path.home()
    manifest = Manifest.load(setup_folder())
    checks = check_install()
    if checks[0].status == "fail":
        # Every later check would fail for this one reason (no sidecar starts, no harness loads).
        return [*checks, Check("sidecar", "running", "info", "not checked: reinstall hive first")]
    more, status = check_sidecar()
    checks += more
    checks += check_team(status)
    checks += check_service(manifest)
    context = install_context("user")
    checks.append(check_mcp(context.mcp_command))
    table = registry.harnesses()
    everyone = [table[name] for name in sorted(table)]
    detections = detect(everyone, home)
    for harness in everyone:
        checks += check_harness(harness, detections[harness.name], manifest, home)
        checks += check_tested_version(harness, detections[harness.name])
    checks += check_projects(manifest, home)
    return checks


def render(checks: list[Check], out: TextIO) -> None:
    width = max(len(c.name) for c in checks)
    area = None
    for check in checks:
        if check.area != area:
            area = check.area
            print(area, file=out)
        mark = {"ok": "ok  ", "info": "--  ", "todo": "TODO", "warn": "warn", "fail": "FAIL"}[check.status]
        print(f"  {mark}  {check.name.ljust(width)}  {check.detail}", file=out)
        if check.fix and check.status != "ok":
            print(f"        {' ' * width}  fix: {check.fix}", file=out)
    todos = [c for c in checks if c.status == "todo"]
    if todos:
        print("\nneeds your action (hive never takes these steps for you):", file=out)
        for check in todos:
            print(f"  - {check.area} {check.name}: {check.fix}", file=out)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        print(f"\n{len(failed)} problem{'s' if len(failed) != 1 else ''} found", file=out)
    else:
        print(
            "\nall good" + (f", {len(todos)} step{'s' if len(todos) != 1 else ''} left for you" if todos else ""),
            file=out,
        )


def main(args: argparse.Namespace) -> int:
    """Entry point of ``hive doctor`` (the parser lives in hive.sidecar.cli)."""
    checks = run_checks()
    failed = any(c.status == "fail" for c in checks)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": not failed,
                    "failures": [asdict(c) for c in checks if c.status == "fail"],
                    "todo": [asdict(c) for c in checks if c.status == "todo"],
                    "checks": [asdict(c) for c in checks],
                },
                indent=2,
                ensure_ascii=False,
            )
        )
    else:
        render(checks, sys.stdout)
    return 1 if failed else 0
