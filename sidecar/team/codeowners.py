"""Who owns a file: a repository's CODEOWNERS, read the way GitHub reads it, mapped to roster persons.

The gate's security floor sends a finding to the owner of the code, and a project lesson goes to
whoever owns the files in its evidence; both ask :func:`owners_of`.

The file is the first of ``.github/CODEOWNERS``, ``CODEOWNERS`` and ``docs/CODEOWNERS`` that exists
(GitHub's order; only one is read). Each line is a gitignore-style pattern followed by owners
(``@user``, ``@org/team`` or an e-mail address); for a path, the *last* matching line wins, and a
matching line with no owners means the path has none. Patterns:

    ``*.js``         a name at any depth          ``/build/``   a folder at the root, and all in it
    ``docs/*``       direct children only         ``apps/``     a folder ``apps`` at any depth
    ``docs/**/x``    any depth between            ``\\#x``      a literal ``#`` (escapes work)

A pattern with a slash other than a trailing one is anchored at the root; a pattern that matches a
folder covers everything in it, except a last segment ``*``, which matches one level (GitHub's
``docs/*``). ``!`` negation and ``[...]`` ranges are not CODEOWNERS syntax: such lines are skipped,
as are GitLab section headers (``[Section]``), so a GitLab file still reads its plain rules.

Owners become roster persons where that can be known: an explicit alias (``[codeowners]`` in
``config.toml``: ``"@alice-gh" = "alice"``), else ``@name`` whose name is a person's, else an
e-mail whose local part is a person's. Owners that map to nobody are returned as written (they
always contain ``@``, which a person's name never does), so a caller can tell and say who it was.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..base.config import slug

LOCATIONS = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")
MAX_SIZE = 3 * 1024 * 1024  # GitHub ignores a larger CODEOWNERS file; so does hive
_OWNER = re.compile(r"^(@[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)?|[^@\s]+@[^@\s]+)$")


@dataclass(frozen=True)
class Rule:
    """One CODEOWNERS line: its pattern, its owners as written, and the line number (for reports)."""

    pattern: str
    owners: tuple[str, ...]
    line: int
    regex: re.Pattern[str]
    one_level: bool  # the last segment is a lone ``*``: it does not reach into sub-folders
    folder_only: bool  # a trailing slash: only folders (and so what is in them) match


def find(repo_root: str | os.PathLike[str]) -> Path | None:
    """The CODEOWNERS file GitHub would use for the repository at ``repo_root``, or None."""
    root = Path(repo_root)
    for name in LOCATIONS:
        candidate = root / name
        if candidate.is_file():
            return candidate
    return None


def parse(text: str) -> list[Rule]:
    """The rules of a CODEOWNERS text, in file order. Lines that are not rules are skipped, never fatal."""
    rules = []
    for number, raw in enumerate(text.splitlines(), 1):
        tokens = _tokens(raw)
        if not tokens:
            continue
        pattern, owners = tokens[0], tuple(t for t in tokens[1:] if _OWNER.match(t))
        if pattern.startswith(("!", "[", "^[")):  # negation, a GitLab section: not rules GitHub applies
            continue
        compiled = _compile(pattern)
        if compiled is None:
            continue
        regex, one_level, folder_only = compiled
        rules.append(Rule(pattern, owners, number, regex, one_level, folder_only))
    return rules


def _tokens(line: str) -> list[str]:
    """Split a line on unescaped whitespace, up to an unescaped ``#`` that starts a word (a comment)."""
    tokens: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\" and i + 1 < len(line):
            current.append(line[i : i + 2])  # kept escaped; the pattern compiler unescapes
            i += 2
            continue
        if char.isspace():
            if current:
                tokens.append("".join(current))
                current = []
        elif char == "#" and not current:
            break
        else:
            current.append(char)
        i += 1
    if current:
        tokens.append("".join(current))
    return tokens


def _compile(pattern: str) -> tuple[re.Pattern[str], bool, bool] | None:
    folder_only = pattern.endswith("/") and not pattern.endswith("\\/")
    body = pattern.rstrip("/") if folder_only else pattern
    anchored = body.startswith("/") or "/" in body.lstrip("/")
    body = body.lstrip("/")
    if not body:
        return None
    segments = body.split("/")
    parts: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            # ``a/**/b``: zero or more folders between; a trailing ``/**``: everything inside.
            parts.append(".*" if last else "(?:[^/]+/)*")
            continue
        piece = _segment(segment)
        if piece is None:
            return None
        parts.append(piece if last else piece + "/")
    regex = "".join(parts)
    if regex.endswith("/"):
        regex = regex[:-1]
    if not anchored:
        regex = "(?:[^/]+/)*" + regex
    one_level = segments[-1] == "*"
    return re.compile(regex, re.DOTALL), one_level, folder_only


def _segment(segment: str) -> str | None:
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "\\" and i + 1 < len(segment):
            out.append(re.escape(segment[i + 1]))
            i += 2
            continue
        if char == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":  # ``**`` inside a name is a ``*``
                i += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            return None  # character ranges are not CODEOWNERS syntax
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _normal(path: str) -> str:
    return str(PurePosixPath(path.replace("\\", "/"))).lstrip("/").removeprefix("./")


def matches(rule: Rule, path: str) -> bool:
    """Does ``rule`` cover ``path`` (relative to the repository root, ``/``-separated)?"""
    path = _normal(path)
    if not rule.folder_only and rule.regex.fullmatch(path):
        return True
    if rule.one_level:
        return False
    # A pattern that names a folder covers everything in it.
    parts = path.split("/")
    return any(rule.regex.fullmatch("/".join(parts[:n])) for n in range(len(parts) - 1, 0, -1))


def rule_for(rules: list[Rule], path: str) -> Rule | None:
    """The rule that decides ``path``: the last one that matches."""
    for rule in reversed(rules):
        if matches(rule, path):
            return rule
    return None


def person_for(owner: str, people: Iterable[str], aliases: Mapping[str, str] | None = None) -> str | None:
    """The roster person an owner (``@user``, ``@org/team``, ``a@b.c``) stands for, if that can be known."""
    known = set(people)
    alias = {k.lower(): v for k, v in (aliases or {}).items()}.get(owner.lower())
    if alias is not None:
        return alias if slug(alias) == alias and (not known or alias in known) else None
    if owner.startswith("@"):
        name = owner[1:]
        if "/" in name:
            return None  # a team is not one person
    else:
        name = owner.split("@", 1)[0]
    person = slug(name)
    return person if person and person == name.lower() and person in known else None


def aliases_from_config(config: str | os.PathLike[str]) -> dict[str, str]:
    """The ``[codeowners]`` table of ``config.toml``: owner as written -> roster person."""
    try:
        data = tomllib.loads(Path(config).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    table = data.get("codeowners")
    if not isinstance(table, dict):
        return {}
    return {str(k): slug(v) for k, v in table.items() if isinstance(v, str) and slug(v)}


@functools.lru_cache(maxsize=64)
def _rules_cached(path: str, mtime_ns: int, size: int) -> tuple[Rule, ...]:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return tuple(parse(handle.read(MAX_SIZE)))


def rules_of(repo_root: str | os.PathLike[str]) -> list[Rule]:
    """The repository's rules (cached until the file changes); none when it has no CODEOWNERS."""
    found = find(repo_root)
    if found is None:
        return []
    try:
        stat = found.stat()
    except OSError:
        return []
    if stat.st_size > MAX_SIZE:
        return []
    return list(_rules_cached(str(found), stat.st_mtime_ns, stat.st_size))


def owners_of(
    repo_root: str | os.PathLike[str],
    paths: Iterable[str],
    *,
    people: Iterable[str] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> list[str]:
    """The owners of ``paths`` (relative to ``repo_root``) by its CODEOWNERS, first seen first, no repeats.

    With ``people`` (the roster's person names), an owner that stands for one of them is given as
    that person's name; the others stay as written. Without ``people``, only ``aliases`` map.
    A path may also be absolute under ``repo_root``. No CODEOWNERS, or no matching rule: [].
    """
    rules = rules_of(repo_root)
    if not rules:
        return []
    root = Path(repo_root).resolve()
    people_list = list(people) if people is not None else []
    found: list[str] = []
    for path in paths:
        relative = _relative(root, path)
        if relative is None:
            continue
        rule = rule_for(rules, relative)
        for owner in rule.owners if rule else ():
            mapped = person_for(owner, people_list, aliases) if (people_list or aliases) else None
            name = mapped or owner
            if name not in found:
                found.append(name)
    return found


def _relative(root: Path, path: str) -> str | None:
    candidate = PurePosixPath(path.replace("\\", "/"))
    if candidate.is_absolute():
        try:
            return str(Path(path).resolve().relative_to(root))
        except ValueError:
            return None
    normal = _normal(path)
    if normal in ("", ".") or normal.startswith("../"):
        return None
    return normal
