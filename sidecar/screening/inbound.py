"""Screen an inbound message: which rules of which families it matches, and where.

The rules are data: one YAML file per family under ``rules/``, each rule with an ``id`` (its family,
a slash, its name), a ``severity``, a one-line ``description``, its ``patterns`` (regular
expressions, matched case-insensitively, with ``^`` and ``$`` at line ends) and ``examples``
(``hostile`` strings it must match, ``benign`` ones it must not). A rule may also say:

- ``view: original``: match the message as it came, not the normalized copy (for characters the
  copy drops, such as zero-width runs and direction controls); see :mod:`.normalize` for the copy;
- ``inner: screen`` or ``inner: base64``: each pattern captures a group named ``inner`` (an HTML
  comment's text, a base64 candidate); the rule fires only where that text, as it is or decoded,
  matches a rule of another family.

Patterns are written without nested quantifiers and with bounded gaps, so a 1 MB body costs time
in proportion to its size.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from ..base.defang import defang
from .normalize import View, normalize
from .prefix import openings, trie_pattern

RULES = Path(__file__).with_name("rules")
SEVERITIES = ("high", "medium", "low")  # most severe first
_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}
_KEYS = {"id", "severity", "description", "patterns", "examples", "view", "inner"}
_MAX_DEPTH = 2  # base64 inside a comment inside base64 is read; one level further is not
_MAX_INNER = 64  # candidates read per rule per message: a body of many blobs costs no more
_EXCERPT = 120
_FLAGS = re.IGNORECASE | re.MULTILINE
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]")
_UNSEEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\U000e0000-\U000e007f]"
)
_BLANKS = re.compile(r"\s+")
_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/_-]")


@dataclass(frozen=True)
class Finding:
    rule: str  # e.g. "prompt-injection/ignore-previous-instructions"
    severity: str  # "low" | "medium" | "high"
    description: str  # one line, for the person
    start: int  # span in the text that was screened (the original text, not a normalized copy)
    end: int
    excerpt: str  # the matched span, cut to <= 120 chars, one line, safe to show (defanged)


@dataclass(frozen=True)
class Rule:
    id: str
    family: str
    severity: str
    description: str
    # A plain rule's patterns that open with known words (tried only where one starts), joined, and
    # the rest, joined; an inner rule keeps each pattern apart (each names its own group "inner").
    patterns: tuple[re.Pattern[str], ...]
    anchored: re.Pattern[str] | None
    openings: frozenset[str]
    view: str  # "normalized" or "original"
    inner: str | None  # None, "screen" or "base64"
    hostile: tuple[str, ...]
    benign: tuple[str, ...]


class RuleError(ValueError):
    """A rule file that does not follow the format in this module's docstring."""


def _rule(family: str, raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict) or set(raw) - _KEYS or not {"id", "severity", "description", "patterns"} <= set(raw):
        raise RuleError(f"{where}: a rule is a mapping of {sorted(_KEYS)}, with id, severity, description, patterns")
    rule_id = str(raw["id"])
    if not rule_id.startswith(f"{family}/"):
        raise RuleError(f"{where}: rule {rule_id!r} is not named under its family {family!r}")
    if raw["severity"] not in _RANK:
        raise RuleError(f"{where}: {rule_id}: severity is one of {SEVERITIES}")
    view, inner = raw.get("view", "normalized"), raw.get("inner")
    if view not in ("normalized", "original") or inner not in (None, "screen", "base64"):
        raise RuleError(f"{where}: {rule_id}: view is normalized or original, inner is screen or base64")
    sources = [str(p) for p in raw["patterns"]]
    anchored: re.Pattern[str] | None = None
    starts: set[str] = set()
    try:
        if inner:
            patterns = tuple(re.compile(p, _FLAGS) for p in sources)
            if any("inner" not in p.groupindex for p in patterns):
                raise RuleError(f"{where}: {rule_id}: each pattern of an inner rule names a group 'inner'")
        else:
            free = []
            for source in sources:
                found = openings(source) if view == "normalized" else None
                if found is None:
                    free.append(source)
                else:
                    starts |= found
            known = [p for p in sources if p not in free]
            anchored = _joined(known) if known else None
            patterns = (_joined(free),) if free else ()
    except re.error as exc:
        raise RuleError(f"{where}: {rule_id}: {exc}") from exc
    examples = raw.get("examples") or {}
    description = " ".join(str(raw["description"]).split())
    return Rule(
        rule_id,
        family,
        raw["severity"],
        description,
        patterns,
        anchored,
        frozenset(starts),
        view,
        inner,
        tuple(examples.get("hostile") or ()),
        tuple(examples.get("benign") or ()),
    )


def _joined(sources: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in sources), _FLAGS)


@cache
def rules() -> tuple[Rule, ...]:
    """Every rule of every family, loaded and compiled once.

    Raises:
        RuleError: a rule file is malformed (a packaging fault: the files ship with hive).
    """
    loaded: list[Rule] = []
    for path in sorted(RULES.glob("*.yaml")):
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        family = path.stem
        if not isinstance(data, dict) or data.get("family") != family or not isinstance(data.get("rules"), list):
            raise RuleError(f"{path.name}: a family file is a mapping with family: {family} and a list of rules")
        loaded += [_rule(family, raw, path.name) for raw in data["rules"]]
    ids = [rule.id for rule in loaded]
    if len(set(ids)) != len(ids):
        raise RuleError(f"rule ids are not unique: {sorted(i for i in ids if ids.count(i) > 1)}")
    # Plain rules first: an inner rule reads text with the rules of the other families.
    return tuple(sorted(loaded, key=lambda rule: rule.inner is not None))


@dataclass(frozen=True)
class _Scan:
    words: re.Pattern[str]  # any rule's opening word, longest first
    rules_for: dict[str, tuple[int, ...]]  # an opening -> indexes of the rules that open with it or a prefix of it


@cache
def _scan() -> _Scan:
    loaded = rules()
    every = {word for rule in loaded for word in rule.openings}
    rules_for = {
        word: tuple(i for i, rule in enumerate(loaded) if any(word.startswith(w) for w in rule.openings))
        for word in every
    }
    words = re.compile(f"(?=({trie_pattern(every)}))")  # every position an opening starts at, overlaps too
    return _Scan(words, rules_for)


def _starts(view: View) -> dict[int, list[int]] | None:
    """For each rule, the positions of the normalized copy where one of its opening words starts."""
    lowered = view.text.lower()
    if len(lowered) != len(view.text):
        return None
    scan = _scan()
    found: dict[int, list[int]] = {}
    rules_for = scan.rules_for
    for match in scan.words.finditer(lowered):
        start = match.start()
        for index in rules_for[match.group(1)]:
            found.setdefault(index, []).append(start)
    return found


def families() -> tuple[str, ...]:
    return tuple(sorted({rule.family for rule in rules()}))


def excerpt(text: str) -> str:
    """``text`` as one printable, defanged line of at most 120 characters; invisible characters shown as escapes."""
    shown = _UNSEEN.sub(lambda m: "\\n" if m.group() == "\n" else f"\\u{ord(m.group()):04x}", text)
    shown = _BLANKS.sub(" ", shown).strip()
    return defang(shown)[:_EXCERPT]


def _decoded(candidate: str) -> str | None:
    """The text a base64 candidate decodes to, if it is mostly printable text."""
    blob = _NOT_BASE64.sub("", candidate)
    if len(blob) % 4 == 1:
        blob = blob[:-1]
    blob += "=" * (-len(blob) % 4)
    try:
        if "-" in blob or "_" in blob:
            raw = base64.urlsafe_b64decode(blob)
        else:
            raw = base64.b64decode(blob)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    sample = text[:4096]
    if not sample.strip() or len(_CONTROL.findall(sample)) > len(sample) // 20:
        return None
    return text


def _inner_hit(rule: Rule, inner: str, depth: int) -> Finding | None:
    text = _decoded(inner) if rule.inner == "base64" else inner
    if text is None:
        return None
    found = [f for f in _screen(text, depth + 1) if f.rule != rule.id]
    return found[0] if found else None


def _first(rule: Rule, view: View, starts: dict[int, list[int]] | None, index: int) -> re.Match[str] | None:
    """A plain rule's leftmost match: its worded patterns tried where their words start, the rest searched."""
    if rule.view == "original":
        # These rules look for characters outside ASCII that the copy drops.
        return None if view.original.isascii() else rule.patterns[0].search(view.original)
    best = rule.patterns[0].search(view.text) if rule.patterns else None
    if rule.anchored is not None:
        if starts is None:
            other = rule.anchored.search(view.text)
            best = other if best is None or (other is not None and other.start() < best.start()) else best
        else:
            for start in starts.get(index, ()):
                if best is not None and start >= best.start():
                    break
                other = rule.anchored.match(view.text, start)
                if other is not None:
                    return other
    return best


def _findings(rule: Rule, view: View, depth: int, starts: dict[int, list[int]] | None, index: int) -> Finding | None:
    target = view.text if rule.view == "normalized" else view.original
    if rule.inner is None:
        match = _first(rule, view, starts, index)
        if match is None:
            return None
        return _finding(rule, view, match.start(), match.end(), rule.severity, rule.description)
    best: tuple[re.Match[str], Finding] | None = None
    for pattern in rule.patterns:
        for count, match in enumerate(pattern.finditer(target)):
            if count >= _MAX_INNER or (best is not None and match.start() >= best[0].start()):
                break
            hit = _inner_hit(rule, match.group("inner"), depth)
            if hit is not None:
                severity = min(rule.severity, hit.severity, key=_RANK.__getitem__)
                description = f"{rule.description} (it reads as {hit.rule})"
                best = match, _finding(rule, view, match.start(), match.end(), severity, description)
                break
    return best[1] if best else None


def _finding(rule: Rule, view: View, start: int, end: int, severity: str, description: str) -> Finding:
    if rule.view == "normalized":
        start, end = view.span(start, end)
    return Finding(rule.id, severity, description, start, end, excerpt(view.original[start:end]))


def _screen(text: str, depth: int, family: str | None = None) -> list[Finding]:
    view = normalize(text)
    starts = _starts(view)
    found = []
    for index, rule in enumerate(rules()):
        if (rule.inner is not None and depth >= _MAX_DEPTH) or (family is not None and rule.family != family):
            continue
        finding = _findings(rule, view, depth, starts, index)
        if finding is not None:
            found.append(finding)
    return sorted(found, key=lambda f: (_RANK[f.severity], f.start))


def screen(text: str, family: str | None = None) -> list[Finding]:
    """Every rule ``text`` matches (one finding each, at its first match), most severe first; ``[]`` if
    none. ``family``: only that family's rules.

    Raises:
        RuleError: a rule file is malformed (a packaging fault: the files ship with hive).
    """
    return _screen(text, 0, family)
