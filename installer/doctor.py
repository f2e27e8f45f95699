"""``hive doctor``: check the install, the sidecar, the team and every harness, and print the fix for each problem.

Each check is one :class:`Check` with a status (``ok``, ``info``, ``todo``, ``warn``, ``fail``)
and, for anything not ok, the exact command or step that fixes it. A ``todo`` is a step only the
person can take in a harness (trust hive's hooks in Codex, trust a folder in Gemini CLI, approve a
project's .mcp.json in Claude Code): listed, but a setup that only waits for those is correct and
exits 0. Exit code 1 when any check failed. The install is checked first (every module in
place), since a broken one fails everything else for that one reason.

The harness checks read the same descriptors ``hive setup`` writes from, so "wired" means "what
setup would write is there". The MCP check starts ``hive mcp`` as harnesses do and speaks MCP to
it with the official client. What only one harness knows how to check (Codex's hook trust,
asked of Codex itself; Gemini CLI's folder trust; a project's approval in Claude Code) its own
plugin checks (``hive_doctor_checks``, ``hive_doctor_project``). Doctor writes nothing in the
person's folders.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio

from hive.integrations import registry
from hive.integrations.descriptor import DoctorContext, Status
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

MCP_TIMEOUT = 30.0
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
        for name in table:  # registration order
            if name in names:
                for found in table[name].doctor_project(project, where, home):
                    checks.append(Check("projects", found.name, found.status, found.detail, found.fix))
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
    context = DoctorContext(
        home=home,
        binary=detection.binary,
        files={path: tuple(group) for path, group in by_path.items()},
        complete=not missing and not unparsed,
    )
    for found in harness.doctor_checks(context):
        checks.append(Check(name, found.name, found.status, found.detail, found.fix))
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
    return report(run_checks(), as_json=args.json)


def report(checks: list[Check], as_json: bool) -> int:
    """Print ``checks`` (as JSON, or for a person) and return the command's exit code."""
    failed = any(c.status == "fail" for c in checks)
    if as_json:
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
