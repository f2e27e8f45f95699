"""Promotion: a verified lesson written into a project as an Agent Skill, ``.agents/skills/hive-<slug>/SKILL.md``.

Codex, Gemini CLI, opencode and pi read ``.agents/skills``; a harness that reads only a folder of
its own names it in its descriptor (``Identity.project_skills``: Claude Code's ``.claude/skills``,
``../shared/notes/skills-and-popups.md`` A.5), so each skill also gets a relative symlink there, or a
copy where the file system refuses links. The frontmatter holds only the fields the reference
validator (``skills-ref``) allows; provenance (lesson id, kind, scope, reviewer, author) goes under
``metadata``, whose values are strings.

A generated file carries ``metadata.hive-digest``: the SHA-256 of the file with that value blanked.
A file whose digest no longer matches was edited by someone, and is never overwritten without
``force``. Superseding a promoted lesson re-renders its skill in the same folder with the new text;
retracting it removes the folder (and those links or copies), edited or not: a retraction
deletes the lesson everywhere.

The files are written 0644, unlike hive's state (0600): they are meant to be committed and read by
every harness and teammate.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from hive.integrations import registry
from hive.integrations.descriptor import SkillsLink

from ..base.config import slug
from ..base.defang import defang
from ..base.errors import Conflict, Refused

SKILLS_DIR = Path(".agents") / "skills"
PREFIX = "hive-"
NAME_LIMIT = 64
DESCRIPTION_LIMIT = 1024
DIGEST_KEY = "hive-digest"
_DIGEST_LINE = re.compile(r'^(  hive-digest: ")([0-9a-f]{64})(")$', re.M)
_LESSON_LINE = re.compile(r'^  hive-lesson: "([0-9a-f]+)"$', re.M)
_PLACEHOLDER = "0" * 64
_STOP = {
    "a",
    "an",
    "the",
    "to",
    "of",
    "and",
    "or",
    "in",
    "on",
    "for",
    "is",
    "are",
    "be",
    "it",
    "its",
    "with",
    "when",
    "that",
    "this",
    "by",
    "as",
    "at",
    "from",
    "not",
    "never",
    "always",
    "use",
    "do",
}

KIND_HEADINGS = {
    "convention": "Convention",
    "correction": "Correction",
    "gotcha": "Gotcha",
    "decision": "Decision",
    "routing": "Routing",
    "preference": "Preference",
    "workflow": "Workflow",
    "debugging_pattern": "Debugging pattern",
}


@dataclass(frozen=True)
class SkillSource:
    """What a skill is rendered from: a verified lesson and its provenance."""

    id: str
    kind: str
    text: str
    applicability: str
    scope: str
    reviewer: str
    author: str
    tags: tuple[str, ...] = ()
    project: str = ""
    quote: str = ""
    evidence: tuple[str, ...] = ()
    supersedes: str = ""


@dataclass
class Written:
    """Where one promotion went."""

    lesson: str
    skill: str  # the skill name, which is also its folder's name
    path: Path  # SKILL.md
    # How the skill got into each harness's own folder, by SkillsLink.key: "link", "copy", "shared"
    # (that folder already is .agents/skills) or "" (none).
    links: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "lesson": self.lesson,
            "skill": self.skill,
            "path": str(self.path),
            **self.links,
            "notes": list(self.notes),
        }


def skills_links() -> list[SkillsLink]:
    """The harnesses' own project skills folders, in registration order, each once."""
    found: dict[str, SkillsLink] = {}
    for harness in registry.harnesses().values():
        link = harness.identity.project_skills
        if link is not None:
            found.setdefault(link.folder, link)
    return list(found.values())


# ---- rendering -------------------------------------------------------------------------


def skill_name(source: SkillSource) -> str:
    """``hive-`` and a few content words of the lesson: ASCII, lower case, single dashes, at most 64."""
    words = [w for w in re.findall(r"[a-z0-9]+", source.text.lower()) if w not in _STOP][:6]
    base = slug("-".join(words), NAME_LIMIT - len(PREFIX) - 9) or "lesson"
    return PREFIX + base


def _quoted(value: str) -> str:
    """A YAML double-quoted scalar on one line (strictyaml reads it; no flow style, no tags)."""
    value = " ".join(value.split())
    # The reference validator finds the frontmatter's end by the first "---" anywhere in it.
    value = re.sub(r"-{3,}", "—", value)
    return json.dumps(defang(value), ensure_ascii=False)


def _first_sentence(text: str, limit: int = 300) -> str:
    one = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", one)
    sentence = match.group(1) if match else one
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rstrip() + "…"


def description(source: SkillSource) -> str:
    """What the skill says and when to use it: the applicability first (what a harness matches on)."""
    when = " ".join(source.applicability.split()).rstrip(".")
    heading = KIND_HEADINGS.get(source.kind, source.kind)
    lead = f"Use when {when[0].lower() + when[1:]}." if when else "Use when the task touches what this lesson covers."
    text = f"{lead} Team {heading.lower()} reviewed by {source.reviewer}: {_first_sentence(source.text)}"
    return text if len(text) <= DESCRIPTION_LIMIT else text[: DESCRIPTION_LIMIT - 1].rstrip() + "…"


def render(source: SkillSource, name: str, at: float | None = None) -> str:
    """The SKILL.md text for ``source`` in a folder called ``name``, with its digest filled in."""
    at = time.time() if at is None else at
    metadata = {
        "hive-lesson": source.id,
        "hive-kind": source.kind,
        "hive-scope": source.scope,
        "hive-reviewer": source.reviewer,
        "hive-author": source.author,
        "hive-promoted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)),
    }
    if source.project:
        metadata["hive-project"] = source.project
    if source.tags:
        metadata["hive-tags"] = ",".join(source.tags)
    if source.supersedes:
        metadata["hive-supersedes"] = source.supersedes
    lines = ["---", f"name: {name}", f"description: {_quoted(description(source))}", "metadata:"]
    lines += [f"  {key}: {_quoted(value)}" for key, value in metadata.items()]
    lines += [f'  {DIGEST_KEY}: "{_PLACEHOLDER}"', "---", ""]
    heading = KIND_HEADINGS.get(source.kind, source.kind)
    # Lesson text is peer-written and every harness reads this file: defanged like any peer text.
    body = [f"# {heading}: {defang(_first_sentence(source.text, 120))}", "", defang(source.text.strip()), ""]
    if source.applicability.strip():
        body += ["## When this applies", "", defang(source.applicability.strip()), ""]
    if source.quote.strip():
        body += ["## In their words", "", "> " + defang(" ".join(source.quote.split())), ""]
    if source.evidence:
        body += ["## Evidence", ""] + [f"- {defang(e)}" for e in source.evidence] + [""]
    body += [
        "## Provenance",
        "",
        f"A {source.scope} lesson from hive's team memory, proposed by {source.author} and reviewed by "
        f"{source.reviewer} (lesson `{source.id}`). It follows the lesson: superseding it rewrites this "
        "file and retracting it removes it. Edit the lesson with `hive lessons`, not this file.",
        "",
    ]
    text = "\n".join(lines + body)
    return _with_digest(text, _digest_of(text))


def _digest_of(text: str) -> str:
    blank = _DIGEST_LINE.sub(lambda m: m.group(1) + _PLACEHOLDER + m.group(3), text, count=1)
    return hashlib.sha256(blank.encode("utf-8")).hexdigest()


def _with_digest(text: str, digest: str) -> str:
    return _DIGEST_LINE.sub(lambda m: m.group(1) + digest + m.group(3), text, count=1)


def generated_lesson(text: str) -> str | None:
    """The lesson id of a SKILL.md hive wrote, or None for any other file."""
    match = _LESSON_LINE.search(text)
    return match.group(1) if match and _DIGEST_LINE.search(text) else None


def untouched(text: str) -> bool:
    """A SKILL.md exactly as hive wrote it (its digest still matches)."""
    match = _DIGEST_LINE.search(text)
    return match is not None and match.group(2) == _digest_of(text)


# ---- writing ---------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError):
        return ""  # there, but not ours to read as a skill: treated as someone's own file


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with open(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o644)  # committed and read by every harness: not private state
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def pick_folder(root: Path, source: SkillSource, previous: str | None = None) -> str:
    """The skill's folder name: the one it had, else its slug, else the slug with the id (taken by another)."""
    if previous:
        return previous
    name = skill_name(source)
    existing = _read(root / SKILLS_DIR / name / "SKILL.md")
    if existing is None or generated_lesson(existing) == source.id:
        return name
    return f"{name}-{source.id[:8]}"


def write_skill(
    root: Path, source: SkillSource, *, folder: str | None = None, force: bool = False, replaces: str | None = None
) -> Written:
    """Write (or re-render) the skill for ``source`` under ``root``; refuse to overwrite a person's edit.

    ``replaces`` is the lesson id the existing file may hold instead of ``source.id`` (supersession).
    """
    if source.scope == "personal":
        raise Refused(
            "a personal lesson stays on its person's machines; a skill in the repository would share it. "
            "Ask its reviewer to widen its scope first"
        )
    name = pick_folder(root, source, folder)
    path = root / SKILLS_DIR / name / "SKILL.md"
    existing = _read(path)
    if existing is not None and not force:
        owner = generated_lesson(existing)
        if owner not in (source.id, replaces) or not untouched(existing):
            raise Conflict(f"{path} was edited by hand or is not hive's; promote with --force to overwrite it")
    _write(path, render(source, name))
    written = Written(lesson=source.id, skill=name, path=path)
    for link in skills_links():
        written.links[link.key] = _mirror(root, Path(link.folder), name, written.notes, force)
    return written


def _mirror(root: Path, folder: Path, name: str, notes: list[str], force: bool) -> str:
    """Make the skill visible in a harness's own skills ``folder``: a relative link, else a copy."""
    agents = root / SKILLS_DIR
    mirror = root / folder
    with contextlib.suppress(OSError):
        if mirror.exists() and mirror.resolve() == agents.resolve():
            return "shared"
    target = mirror / name
    source_dir = agents / name
    relative = os.path.relpath(source_dir, mirror)
    if target.is_symlink():
        if os.readlink(target) == relative:
            return "link"
        target.unlink()
    elif target.exists():
        copied = _read(target / "SKILL.md")
        if copied is not None and not force and (generated_lesson(copied) is None or not untouched(copied)):
            notes.append(f"{target} was edited by hand; left as it is (use --force to replace it)")
            return ""
        shutil.rmtree(target)
    mirror.mkdir(parents=True, exist_ok=True)
    try:
        target.symlink_to(relative, target_is_directory=True)
        return "link"
    except OSError:
        shutil.copytree(source_dir, target)
        return "copy"


def remove_skill(root: Path, folder: str, lesson_ids: tuple[str, ...]) -> bool:
    """Remove a skill folder hive wrote for one of ``lesson_ids``, and its links or copies in harnesses' own folders."""
    path = root / SKILLS_DIR / folder / "SKILL.md"
    existing = _read(path)
    removed = False
    if existing is not None and generated_lesson(existing) in lesson_ids:
        path.unlink()
        removed = True
        with contextlib.suppress(OSError):
            (root / SKILLS_DIR / folder).rmdir()  # only when nothing else was put beside it
    for link in skills_links():
        target = root / link.folder / folder
        if target.is_symlink():
            target.unlink()
        elif target.is_dir():
            copied = _read(target / "SKILL.md")
            if copied is not None and generated_lesson(copied) in lesson_ids:
                shutil.rmtree(target)
    return removed
