"""``hive setup``: wire every installed harness as its descriptor says, and ``--remove`` to undo it.

A run first plans everything without writing: detect the harnesses, ask each selected one for
its native files, read and parse every file, apply hive's owned parts to a copy in memory. A
harness with any file hive cannot parse, reshape or write is refused as a whole (nothing of it
is written, so it is never half wired) while the others go ahead. Then, unless ``--dry-run``,
each changed file is backed up and replaced atomically and the manifest records what changed.
A file whose new content equals its current content is not touched, which is what makes a
second run a no-op, byte for byte.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from hive.integrations import registry
from hive.integrations.descriptor import NativeFile, Scope
from hive.sidecar.base.paths import state_home
from hive.skills import ROOT as SKILLS_ROOT

from . import documents, fileops, ownership, service, trust
from .commands import install_context
from .detect import Detection, detect
from .documents import Document, Key
from .errors import ConfigShapeError, InstallError, NotWritable, display
from .manifest import Backups, FileEntry, Manifest, locked
from .ownership import Applied, KeyRecord


@dataclass
class Options:
    scope: Scope = "user"
    project: Path | None = None  # the project root, for scope "project"
    only: list[str] | None = None
    dry_run: bool = False
    diff: bool = False  # with dry_run: full unified diffs instead of the summary
    remove: bool = False
    service: bool = False


def setup_folder() -> Path:
    """Where the manifest and backups live: ``setup/`` in the hive state folder."""
    return state_home() / "setup"


def resolve_path(relative: str, scope: Scope, root: Path) -> Path:
    """A descriptor path made absolute. ``.config/…`` honours ``XDG_CONFIG_HOME``, as the harnesses do."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    if scope == "user" and relative.startswith(".config/") and os.path.isabs(xdg):
        return Path(xdg) / relative.removeprefix(".config/")
    return root / relative


def skill_source(native: NativeFile) -> str:
    """A skill file's text: the descriptor's ``content``, else the file of that name shipped in hive.skills."""
    if native.content:
        return native.content
    path = Path(native.path)
    return (SKILLS_ROOT / path.parent.name / path.name).read_text(encoding="utf-8")


# ---- planning -------------------------------------------------------------------------------------


@dataclass
class FilePlan:
    """One native file as this run will leave it."""

    path: Path
    format: str
    roles: list[str] = field(default_factory=list)
    wanted_by: list[str] = field(default_factory=list)  # harnesses whose descriptors list it
    owned: dict[str, dict[Key, Any]] = field(default_factory=dict)  # harness -> its owned parts
    text: str | None = None  # for text files: the whole content
    before: bytes | None = None
    after: bytes | None = None
    writers: list[str] = field(default_factory=list)  # harnesses it is written for (not refused)
    applied: dict[str, Applied] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.after is not None and self.after != self.before


@dataclass
class HarnessPlan:
    name: str
    title: str
    detection: Detection
    selected: bool
    files: list[Path] = field(default_factory=list)
    problems: list[InstallError] = field(default_factory=list)
    done: str = ""  # what happened, once applied

    @property
    def failed(self) -> bool:
        return bool(self.problems)


def _parse(fmt: str, path: Path, data: bytes | None) -> Document:
    try:
        text = "" if data is None else data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigShapeError(path, f"byte {exc.start} is not UTF-8", "save the file as UTF-8") from exc
    return documents.parse(fmt, path, text)


def _known(entry: FileEntry | None, harness: str) -> dict[Key, KeyRecord]:
    if entry is None:
        return {}
    return {record.path: record for owner, record in entry.keys if owner == harness}


def _render(plan: FilePlan, harnesses: list[str], entry: FileEntry | None) -> bytes:
    if plan.format == "text":
        assert plan.text is not None
        return plan.text.encode("utf-8")
    doc = _parse(plan.format, plan.path, plan.before)
    for harness in harnesses:
        plan.applied[harness] = ownership.apply(doc, plan.owned[harness], _known(entry, harness))
    return doc.render().encode("utf-8")


def plan_setup(options: Options, manifest: Manifest, home: Path) -> tuple[list[HarnessPlan], dict[Path, FilePlan]]:
    """Everything ``hive setup`` would do, computed without writing anything."""
    table = registry.harnesses()
    everyone = [table[name] for name in sorted(table)]
    wanted = _select(options.only)
    detections = detect(everyone, home)
    root = options.project if options.scope == "project" and options.project else home
    context = install_context(options.scope)

    harness_plans: list[HarnessPlan] = []
    files: dict[Path, FilePlan] = {}
    for harness in everyone:
        detection = detections[harness.name]
        selected = harness.name in wanted if wanted is not None else detection.found
        hplan = HarnessPlan(harness.name, harness.identity.title, detection, selected)
        harness_plans.append(hplan)
        if not selected:
            continue
        for native in harness.native_files(context):
            path = resolve_path(native.path, options.scope, root)
            plan = files.setdefault(path, FilePlan(path, native.format))
            if plan.format != native.format:
                raise ValueError(f"{harness.name} describes {path} as {native.format}, another as {plan.format}")
            plan.roles.append(native.role)
            if harness.name not in plan.wanted_by:
                plan.wanted_by.append(harness.name)
            if native.format == "text":
                plan.text = skill_source(native) if native.role == "skill" else native.content
            else:
                plan.owned.setdefault(harness.name, {}).update(native.owned)
            if path not in hplan.files:
                hplan.files.append(path)

    by_name = {h.name: h for h in harness_plans}
    # Read, parse and try every file for every harness that wants it, so any refusal is known
    # before anything is written.
    for plan in files.values():
        try:
            plan.before = fileops.read_or_none(plan.path)
            fileops.check_writable(plan.path, root)
            if plan.format != "text":
                _parse(plan.format, plan.path, plan.before)
        except InstallError as exc:
            for name in plan.wanted_by:
                by_name[name].problems.append(exc)
            continue
        except OSError as exc:
            problem = NotWritable(plan.path, f"cannot read it ({exc.strerror})", "check its permissions")
            for name in plan.wanted_by:
                by_name[name].problems.append(problem)
            continue
        for name in plan.wanted_by:
            if plan.format == "text":
                continue
            try:
                doc = _parse(plan.format, plan.path, plan.before)
                ownership.apply(doc, plan.owned[name])
            except InstallError as exc:
                by_name[name].problems.append(exc)

    for plan in files.values():
        plan.writers = [name for name in plan.wanted_by if not by_name[name].failed]
        if plan.writers:
            plan.after = _render(plan, plan.writers, manifest.files.get(plan.path))
    return harness_plans, files


def _select(only: list[str] | None) -> set[str] | None:
    """Canonical names for ``--only`` (aliases allowed). Raises KeyError naming the unknown one."""
    if only is None:
        return None
    return {registry.harness(name.strip()).name for name in only if name.strip()}


# ---- applying ---------------------------------------------------------------------------------------


def _record(manifest: Manifest, plan: FilePlan, scope: Scope, backup: str | None, dirs: list[Path]) -> None:
    entry = manifest.files.get(plan.path)
    written = fileops.sha256(plan.after)
    keys = [(name, record) for name in plan.writers for record in plan.applied.get(name, Applied()).records]
    containers = [key for name in plan.writers for key in plan.applied.get(name, Applied()).created]
    if entry is None:
        manifest.files[plan.path] = FileEntry(
            path=plan.path,
            format=plan.format,
            scope=scope,
            harnesses=list(plan.writers),
            created=plan.before is None,
            original=backup,
            # Content that already held hive's parts (wired by hand, or a lost manifest) has no
            # hive-free original to go back to: removal takes hive's parts out instead.
            restorable=plan.changed,
            written=written,
            dirs=[str(d) for d in dirs],
            keys=keys,
            containers=containers,
        )
        return
    if entry.written != fileops.sha256(plan.before):
        entry.restorable = False  # the person edited it since hive's last write; their edits must survive
    entry.written = written
    entry.harnesses = sorted(set(entry.harnesses) | set(plan.writers))
    kept = [(owner, record) for owner, record in entry.keys if owner not in plan.writers]
    entry.keys = kept + keys
    entry.containers += [key for key in containers if key not in entry.containers]
    entry.dirs += [str(d) for d in dirs if str(d) not in entry.dirs]


def apply_setup(
    options: Options,
    manifest: Manifest,
    harness_plans: list[HarnessPlan],
    files: dict[Path, FilePlan],
    backups: Backups,
) -> None:
    by_name = {h.name: h for h in harness_plans}
    written: dict[Path, tuple[FilePlan, list[Path], str | None]] = {}
    unchanged: list[FilePlan] = []
    for plan in files.values():
        if not plan.writers or any(by_name[name].failed for name in plan.writers):
            continue
        if not plan.changed:
            unchanged.append(plan)
            continue
        try:
            backup = backups.save(plan.path, plan.before) if plan.before is not None else None
            assert plan.after is not None
            dirs = fileops.write_atomic(plan.path, plan.after)
        except OSError as exc:
            problem = NotWritable(plan.path, f"writing it failed ({exc.strerror})", "check the folder's permissions")
            for name in plan.writers:
                by_name[name].problems.append(problem)
            _roll_back(written, by_name, backups)
            continue
        backups.note(plan.path, "created" if plan.before is None else "changed", backup, plan.writers)
        written[plan.path] = (plan, dirs, backup)
    # Recorded only now: a harness refused half-way must leave no trace in the manifest either.
    for plan, dirs, backup in written.values():
        plan.writers = [name for name in plan.writers if not by_name[name].failed]
        _record(manifest, plan, options.scope, backup, dirs)
    for plan in unchanged:
        plan.writers = [name for name in plan.writers if not by_name[name].failed]
        entry = manifest.files.get(plan.path)
        if plan.writers and (entry is None or not set(plan.writers) <= set(entry.harnesses)):
            _record(manifest, plan, options.scope, None, [])
    for hplan in harness_plans:
        if not hplan.selected or hplan.failed:
            continue
        changed = [p for p in hplan.files if p in written]
        hplan.done = f"wired ({len(changed)} of {len(hplan.files)} files changed)" if changed else "up to date"


def _roll_back(
    written: dict[Path, tuple[FilePlan, list[Path], str | None]], by_name: dict[str, HarnessPlan], backups: Backups
) -> None:
    """Put back the files only refused harnesses got in this run, so none is left half wired."""
    for path, (plan, dirs, _) in list(written.items()):
        if not all(by_name[name].failed for name in plan.writers):
            continue  # still wanted by a harness that is fine
        if plan.before is None:
            fileops.remove_file(path)
            fileops.remove_empty_dirs(dirs)
        else:
            fileops.write_atomic(path, plan.before)
        backups.note(path, "rolled back", None, plan.writers)
        del written[path]


# ---- removal ----------------------------------------------------------------------------------------


@dataclass
class Removal:
    entry: FileEntry
    before: bytes | None
    after: bytes | None  # None: delete the file
    action: str
    partial: set[str]  # harnesses removed when others keep using the file; empty: the whole entry goes
    problem: InstallError | None = None


def plan_remove(options: Options, manifest: Manifest) -> list[Removal]:
    wanted = _select(options.only)
    project = options.project.resolve() if options.project else None
    removals: list[Removal] = []
    for path, entry in sorted(manifest.files.items()):
        if entry.harnesses == ["service"]:
            continue  # the service has its own removal (it must be stopped first)
        if entry.scope != options.scope or (project is not None and not path.is_relative_to(project)):
            continue
        gone = set(entry.harnesses) if wanted is None else set(entry.harnesses) & wanted
        if not gone:
            continue
        remaining = set(entry.harnesses) - gone
        before = fileops.read_or_none(path)
        removal = Removal(entry, before, before, "", gone if remaining else set())
        removals.append(removal)
        if before is None:
            removal.action = "already gone"
            continue
        try:
            _plan_one(removal, gone, remaining, manifest)
        except InstallError as exc:
            removal.problem = exc
    return removals


def _plan_one(removal: Removal, gone: set[str], remaining: set[str], manifest: Manifest) -> None:
    entry, before = removal.entry, removal.before
    untouched = entry.restorable and fileops.sha256(before) == entry.written
    if remaining:
        if entry.format == "text":
            removal.action = f"kept (still used by {', '.join(sorted(remaining))})"
            return
        doc = _parse(entry.format, entry.path, before)
        ownership.strip(doc, entry.records(gone), [])
        removal.after = doc.render().encode("utf-8")
        removal.action = "hive's parts removed" if removal.after != before else "nothing of hive's left"
        return
    if untouched:
        if entry.created:
            removal.after, removal.action = None, "deleted (hive created it)"
        else:
            assert entry.original is not None
            removal.after = (manifest.folder / entry.original).read_bytes()
            removal.action = "restored to its content before setup"
        return
    if entry.format == "text":
        if entry.original is not None:
            removal.after = (manifest.folder / entry.original).read_bytes()
            removal.action = "restored to its content before setup (your later edits are in the backup)"
        else:
            removal.after, removal.action = None, "deleted (changed since setup; a copy is in the backup)"
        return
    doc = _parse(entry.format, entry.path, before)
    ownership.strip(doc, entry.records(), entry.containers)
    if entry.created and _empty(doc):
        removal.after, removal.action = None, "deleted (hive created it; nothing else is in it)"
        return
    removal.after = doc.render().encode("utf-8")
    removal.action = "hive's parts removed (you changed the file since setup; your changes stay)"


def _empty(doc: Document) -> bool:
    return doc.render().strip() in ("", "{}")


def apply_remove(removals: list[Removal], manifest: Manifest, backups: Backups) -> None:
    emptied: list[Path] = []  # folders hive created; removed at the end, when all their files are gone
    for removal in removals:
        entry = removal.entry
        if removal.problem is not None:
            continue
        if removal.before is not None and removal.after != removal.before:
            backup = backups.save(entry.path, removal.before)
            try:
                if removal.after is None:
                    fileops.remove_file(entry.path)
                else:
                    fileops.write_atomic(entry.path, removal.after)
            except OSError as exc:
                removal.problem = NotWritable(
                    entry.path,
                    f"cannot change it ({exc.strerror})",
                    "check its permissions, then run `hive setup --remove` again",
                )
                continue
            backups.note(
                entry.path,
                "removed" if removal.after is None else "restored",
                backup,
                sorted(removal.partial or entry.harnesses),
            )
        if removal.partial:
            if fileops.sha256(removal.before) != entry.written:
                entry.restorable = False  # edited since setup: a later full removal must keep the edits
            entry.harnesses = sorted(set(entry.harnesses) - removal.partial)
            entry.keys = [(owner, record) for owner, record in entry.keys if owner not in removal.partial]
            entry.written = fileops.sha256(removal.after)
            continue
        if removal.after is None:
            emptied += [Path(d) for d in entry.dirs]
        del manifest.files[entry.path]
    fileops.remove_empty_dirs(emptied)


# ---- the command ----------------------------------------------------------------------------------------


def _diff(path: Path, before: bytes | None, after: bytes | None) -> str:
    def lines(data: bytes | None) -> list[str]:
        return [] if data is None else data.decode("utf-8", errors="replace").splitlines(keepends=True)

    name = display(path)
    diff = difflib.unified_diff(
        lines(before),
        lines(after),
        fromfile="/dev/null" if before is None else f"a/{name}",
        tofile="/dev/null" if after is None else f"b/{name}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in diff)
    return text


def _what(plan: FilePlan, harness: str) -> str | None:
    """What this run does to ``plan``'s file for ``harness``, in a few words (None: nothing of its own)."""
    created = plan.before is None
    if plan.format == "text":
        return f"{'create' if created else 'replace'} {display(plan.path)} ({', '.join(sorted(set(plan.roles)))})"
    assert plan.after is not None
    before = _parse(plan.format, plan.path, plan.before)
    after = _parse(plan.format, plan.path, plan.after)
    kinds: dict[str, list[str]] = {"add": [], "add hive's entries to": [], "update": []}
    for key, value in plan.owned.get(harness, {}).items():
        old, new = before.get(key), after.get(key)
        if old != new:
            kind = (
                "add" if old is documents.MISSING else "add hive's entries to" if isinstance(value, list) else "update"
            )
            kinds[kind].append(".".join(key))
    parts = [f"{kind} {', '.join(keys)}" for kind, keys in kinds.items() if keys]
    if not parts:
        return None
    return f"{'create' if created else 'edit'} {display(plan.path)}: {'; '.join(parts)}"


def _summary(harness_plans: list[HarnessPlan], files: dict[Path, FilePlan], out: TextIO) -> int:
    """Per harness, each file the run would change and what in it; returns how many lines it printed."""
    printed = 0
    for hplan in harness_plans:
        if not hplan.selected or hplan.failed:
            continue
        lines = [
            what for path in hplan.files if files[path].changed for what in [_what(files[path], hplan.name)] if what
        ]
        if not lines:
            continue
        print(f"{hplan.name}:", file=out)
        for line in lines:
            print(textwrap.fill(line, width=100, initial_indent="  ", subsequent_indent="      "), file=out)
            printed += 1
    return printed


TABLE_WIDTH = 100
MIN_LAST_COLUMN = 30


def _table(rows: Iterable[tuple[str, ...]], out: TextIO) -> None:
    rows = list(rows)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    indent = sum(widths) + 2 * len(widths)
    # The last column (the plan: a list of files) is wrapped under itself to fit a terminal.
    last = max(TABLE_WIDTH - indent, MIN_LAST_COLUMN)
    for row in rows:
        lead = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  "
        lines = textwrap.wrap(row[-1], width=last, break_long_words=False, break_on_hyphens=False) or [""]
        print(lead + lines[0], file=out)
        for line in lines[1:]:
            print(" " * indent + line, file=out)


def _intent(hplan: HarnessPlan, files: dict[Path, FilePlan], scope: Scope) -> str:
    if not hplan.selected:
        return "skip: not installed" if not hplan.detection.found else "skip: not in --only"
    if hplan.failed:
        return f"refuse: {len(hplan.problems)} problem{'s' if len(hplan.problems) > 1 else ''} (below)"
    changed = [p for p in hplan.files if files[p].changed]
    if not changed:
        return "nothing to change"
    verb = "wire" if scope == "user" else "wire project"
    return f"{verb}: " + ", ".join(display(p) for p in changed)


def run(options: Options, out: TextIO = sys.stdout) -> int:
    """``hive setup`` with ``options``; returns the exit code (1 if any harness was refused)."""
    home = Path.home()
    folder = setup_folder()
    if options.remove:
        return _run_remove(options, folder, out)
    try:
        manifest = Manifest.load(folder)
        harness_plans, files = plan_setup(options, manifest, home)
    except KeyError as exc:
        print(f"hive setup: {exc.args[0]}", file=sys.stderr)
        return 1
    where = display(home) if options.scope == "user" else str(options.project)
    print(f"hive setup{' --dry-run' if options.dry_run else ''}: {options.scope} scope ({where})\n", file=out)
    rows = [("HARNESS", "VERSION", "FOUND", "PLAN")]
    for hplan in harness_plans:
        detection = hplan.detection
        version = detection.version or ("?" if detection.binary else "-")
        rows.append(
            (
                hplan.name,
                version,
                detection.where() if detection.found else "not found",
                _intent(hplan, files, options.scope),
            )
        )
    _table(rows, out)
    for hplan in harness_plans:
        if hplan.detection.version_problem:
            print(f"  ({hplan.name}: version unknown: {hplan.detection.version_problem})", file=out)

    if options.dry_run:
        diffs = [_diff(plan.path, plan.before, plan.after) for plan in files.values() if plan.changed]
        unit_change = ""
        if options.service:
            unit, text = service.unit_path(), service.unit_text().encode("utf-8")
            before = fileops.read_or_none(unit)
            if before != text:
                diffs.append(_diff(unit, before, text))
                unit_change = f"  {'create' if before is None else 'replace'} {display(unit)}"
        if options.diff:
            print("\n" + ("".join(diffs) if diffs else "no changes\n"), end="", file=out)
        elif diffs:
            print("\nwould change (nothing is written; `--dry-run --diff` shows every line):", file=out)
            _summary(harness_plans, files, out)
            if unit_change:
                print(f"service:\n{unit_change}", file=out)
        else:
            print("\nno changes", file=out)
    else:
        with locked(folder):
            manifest = Manifest.load(folder)  # re-read under the lock
            backups = Backups(folder)
            apply_setup(options, manifest, harness_plans, files, backups)
            if options.service:
                service.install(manifest, backups, out)
            manifest.save()
            backups.finish()
        if backups.changes:
            print(f"\nbackups of every file changed: {display(backups.folder)}", file=out)
    _report(harness_plans, options, out)
    return 1 if any(h.failed for h in harness_plans) else 0


def _report(harness_plans: list[HarnessPlan], options: Options, out: TextIO) -> None:
    wired = [h for h in harness_plans if h.selected and not h.failed]
    if not options.dry_run:
        for hplan in wired:
            print(f"{hplan.name}: {hplan.done}", file=out)
    steps = [(h.name, step) for h in wired for step in trust.steps(h.name, options.scope)]
    if wired and not options.dry_run:
        print(f"\nnext steps (hive never skips a harness's own approvals):\n  - {trust.RESTART}", file=out)
        for name, step in steps:
            print(f"  - {name}: {step}", file=out)
    failed = [h for h in harness_plans if h.failed]
    if failed:
        print("\nrefused (nothing of these was changed; the others were wired):", file=out)
        for hplan in failed:
            for problem in hplan.problems:
                print(f"  {hplan.name}: {problem}", file=out)
    if not any(h.selected for h in harness_plans):
        print(
            "\nno harness found; `hive setup --only NAME` wires one anyway "
            f"({', '.join(h.name for h in harness_plans)})",
            file=out,
        )


def _run_remove(options: Options, folder: Path, out: TextIO) -> int:
    try:
        with locked(folder):
            manifest = Manifest.load(folder)
            removals = plan_remove(options, manifest)
            service_removal = options.service or (options.only is None and options.scope == "user")
            if options.dry_run and options.diff:
                for removal in removals:
                    if removal.problem is None and removal.after != removal.before:
                        print(_diff(removal.entry.path, removal.before, removal.after), end="", file=out)
            else:
                backups = Backups(folder)
                apply_remove(removals, manifest, backups)
                if service_removal:
                    service.remove(manifest, backups, out)
                manifest.save()
                backups.finish()
    except KeyError as exc:
        print(f"hive setup: {exc.args[0]}", file=sys.stderr)
        return 1
    if not removals:
        print("hive setup --remove: nothing of hive's is recorded for this scope", file=out)
    elif options.dry_run:
        print("\nhive setup --remove --dry-run: nothing was changed; this would happen:", file=out)
    for removal in removals:
        state = f"refused: {removal.problem}" if removal.problem else removal.action
        print(f"  {display(removal.entry.path)}: {state}", file=out)
    return 1 if any(r.problem for r in removals) else 0


def main(args: argparse.Namespace) -> int:
    """Entry point of ``hive setup`` (the parser lives in hive.sidecar.cli)."""
    project = Path(args.project).resolve() if args.project else None
    if project is not None and not project.is_dir():
        print(f"hive setup: the project folder {project} does not exist", file=sys.stderr)
        return 1
    options = Options(
        scope="project" if project else "user",
        project=project,
        only=args.only.split(",") if args.only else None,
        dry_run=args.dry_run,
        diff=getattr(args, "diff", False),
        remove=args.remove,
        service=args.service,
    )
    return run(options)
