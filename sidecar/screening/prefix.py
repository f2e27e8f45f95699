"""Where a rule's match can start: the literal words its patterns open with, read from their source.

Screening a message with every rule from every position costs milliseconds; most rules open with a
word (``ignore``, ``curl``, ``cat``), so the screen finds those words once and tries a rule only
where one of its words starts. :func:`openings` reads a pattern conservatively: zero-width
assertions at its start are skipped, a group's alternatives are read one by one, and anything it
does not understand (a class, an optional group, a backreference) means "anywhere" (``None``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_META = set(".^$*+?{}[]()|\\")
_ZERO_WIDTH = ("(?<!", "(?<=", "(?!", "(?=")
_ESCAPED = {
    "\\.": ".",
    "\\-": "-",
    "\\/": "/",
    "\\|": "|",
    "\\(": "(",
    "\\)": ")",
    "\\[": "[",
    "\\$": "$",
    "\\{": "{",
    "\\*": "*",
    "\\+": "+",
    "\\?": "?",
    "\\<": "<",
    "\\:": ":",
    "\\~": "~",
}


def _syntax(source: str) -> Iterator[tuple[int, str, int]]:
    """Each character of ``source`` that is regex syntax rather than a literal (not escaped, not in
    a class), with the depth of groups around it before it."""
    depth, i, in_class = 0, 0, False
    while i < len(source):
        char = source[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if source[i + 1 : i + 2] == "]" or source[i + 1 : i + 3] == "^]":  # a ``]`` first is literal
                i += 2 if source[i + 1] == "]" else 3
                continue
        else:
            yield i, char, depth
            depth += (char == "(") - (char == ")")
        i += 1


def _close(source: str, start: int) -> int:
    """The index just past the group that opens at ``start``."""
    for i, char, depth in _syntax(source[start:]):
        if char == ")" and depth == 1:
            return start + i + 1
    raise ValueError("unbalanced")


def _close_class(source: str) -> int:
    end = source.index("]", 2)
    return end + 1


def _alternatives(body: str) -> list[str]:
    cuts = [i for i, char, depth in _syntax(body) if char == "|" and depth == 0]
    return [body[start + 1 : end] for start, end in zip([-1, *cuts], [*cuts, len(body)], strict=True)]


def _optional_after(source: str, end: int) -> bool:
    return source[end : end + 1] in ("?", "*") or source[end : end + 3] in ("{0,", "{0}")


def openings(source: str) -> frozenset[str] | None:
    """The lowercase strings every match of ``source`` starts with one of, or ``None`` if unknown."""
    try:
        found: set[str] = set()
        for alternative in _alternatives(source):
            inner = _openings(alternative)
            if inner is None:
                return None
            found |= inner
        return frozenset(found)
    except (ValueError, IndexError):
        return None


def _useful(literal: str) -> bool:
    """Whether finding ``literal`` first is worth it: a word of two letters, or one rarer character."""
    return len(literal) >= 2 or (len(literal) == 1 and not literal.isalnum())


def _openings(source: str) -> frozenset[str] | None:
    i = 0
    while True:  # zero-width assertions at the start do not move the match
        if source.startswith("\\b", i):
            i += 2
        elif source.startswith(_ZERO_WIDTH, i):
            i = _close(source, i)
        else:
            break
    source = source[i:]
    if source.startswith("[") and not source.startswith("[^"):
        end = _close_class(source)
        chars = source[1 : end - 1]
        if (
            "\\" in chars
            or "-" in chars
            or _optional_after(source, end)
            or any(c.isascii() and c.isalnum() for c in chars)
        ):
            return None
        return frozenset(chars.lower())
    if source.startswith("(?:") or (source.startswith("(") and not source.startswith("(?")):
        end = _close(source, 0)
        if _optional_after(source, end):
            return None
        body = source[3 if source.startswith("(?:") else 1 : end - 1]
        found: set[str] = set()
        for alternative in _alternatives(body):
            inner = _openings(alternative + source[end:]) if not alternative else _openings(alternative)
            if inner is None:
                return None
            found |= inner
        return frozenset(found)
    literal, i = "", 0
    while i < len(source):
        two = source[i : i + 2]
        if two in _ESCAPED:
            char, step = _ESCAPED[two], 2
        elif source[i] in _META:
            break
        else:
            char, step = source[i], 1
        if _optional_after(source, i + step):
            break
        literal += char.lower()
        i += step
    rest = source[i:]
    if literal and (rest.startswith("(?:") or (rest.startswith("(") and not rest.startswith("(?"))):
        if not _optional_after(rest, _close(rest, 0)):
            following = _openings(rest)
            if following is not None:
                return frozenset(literal + tail for tail in following)
    if _useful(literal) or (literal and not literal.isascii()):
        return frozenset({literal})
    return None


_Trie = dict[str, "_Trie"]


def trie_pattern(words: set[str]) -> str:
    """One regular expression for ``words`` as a trie (``ab|ac`` is ``a(?:b|c)``): at each position
    the engine tries one branch per next character, not every word."""
    tree: _Trie = {}
    for word in words:
        node = tree
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}
    return _branch(tree)


def _branch(node: _Trie) -> str:
    ends = "" in node
    parts = [re.escape(char) + _branch(child) for char, child in sorted(node.items()) if char]
    if not parts:
        return ""
    body = parts[0] if len(parts) == 1 and not ends else "(?:" + "|".join(parts) + ")"
    return body + ("?" if ends else "")
