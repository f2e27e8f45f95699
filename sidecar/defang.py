"""Neutralise peer-controlled text so it can never open or close a hive frame.

Agents trust ``<hive-message …>`` frames to mark where a teammate's words begin and end. Any
string a peer controls (a body, a session name, a repo, a branch, a ``doing`` line, an error)
passes through :func:`defang` before it reaches an agent. An opening bracket, or anything an
agent could read as one (Unicode look-alikes, HTML entities), is replaced by ``[`` when the
word after it could spell ``hive``: letters read through leetspeak (``h1v3``), separators
ignored, and any non-ASCII character in the tag word treated as suspect. Text without such a
bracket is returned unchanged.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import cache

_LEET = str.maketrans({
    "0": "o", "1": "i", "!": "i", "|": "i", "3": "e", "4": "a", "@": "a",
    "5": "s", "$": "s", "7": "t", "#": "h", "€": "e", "¡": "i",
})
_ENTITY = re.compile(r"&(?:lt|#0*60|#x0*3c);?", re.IGNORECASE)
_WINDOW = 48
_TAG_WORD_LIMIT = 64
# Direction overrides, zero-width characters and Unicode tag characters can hide text or
# reorder what a person or agent sees; they never belong in peer text shown to either.
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\U000e0000-\U000e007f]")


@cache
def _brackets() -> frozenset[str]:
    found = {"<"}
    for code in range(0x80, sys.maxunicode + 1):
        char = chr(code)
        if "<" in unicodedata.normalize("NFKC", char):
            found.add(char)
            continue
        name = unicodedata.name(char, "")
        if "LESS-THAN" in name or ("LEFT" in name and ("ANGLE" in name or "CHEVRON" in name)):
            found.add(char)
        elif "ANGLE BRACKET" in name and "RIGHT" not in name:
            found.add(char)
    return frozenset(found)


def brackets() -> frozenset[str]:
    """Every character an agent could read as an opening ``<``."""
    return _brackets()


def _spells_hive(window: str) -> bool:
    text = unicodedata.normalize("NFKC", window).casefold().replace("\\/", "v").replace("|-|", "h")
    letters = "".join(c for c in text.translate(_LEET) if "a" <= c <= "z")
    return letters.startswith("hiv")


def _suspect_tag(after: str) -> bool:
    stripped = after.lstrip(" \t\r\n/\\")
    word = re.split(r"[\s>]", stripped, maxsplit=1)[0] if stripped else ""
    if len(word) > _TAG_WORD_LIMIT:
        return True
    if any(ord(c) > 0x7E or ord(c) < 0x20 for c in word) and word:
        return True
    return _spells_hive(after[:_WINDOW])


def defang(text: str) -> str:
    """Return ``text`` with every bracket that could open or close a hive frame replaced by ``[``."""
    text = _INVISIBLE.sub("", text)
    text = _ENTITY.sub(
        lambda m: "[" if _suspect_tag(m.string[m.end() : m.end() + 1 + _TAG_WORD_LIMIT]) else m.group(0), text
    )
    marks = brackets()
    if not any(c in marks for c in text):
        return text
    out = list(text)
    for i, char in enumerate(text):
        if char in marks and _suspect_tag(text[i + 1 : i + 2 + _TAG_WORD_LIMIT]):
            out[i] = "["
    return "".join(out)


def strip_invisible(text: str) -> str:
    return _INVISIBLE.sub("", text)


def one_line(text: object, limit: int = 200) -> str:
    """A peer field as one printable, defanged line of at most ``limit`` characters."""
    value = "" if text is None else str(text)
    value = "".join(c if c.isprintable() else " " for c in strip_invisible(value))
    value = " ".join(value.split())
    return defang(value)[:limit]


_ATTR_SAFE = re.compile(r"[^A-Za-z0-9._/@:+*-]")


def attr(value: object, limit: int = 128) -> str:
    """A frame attribute value: only characters that cannot end the attribute or the tag."""
    return _ATTR_SAFE.sub("_", "" if value is None else str(value))[:limit]
