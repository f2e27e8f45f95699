"""Neutralise peer-controlled text so it can never open or close a hive frame.

Agents trust ``<hive-message …>`` frames to mark where a teammate's words begin and end. Any
string a peer controls (a body, a session name, a repo, a branch, a ``doing`` line, an error)
passes through :func:`defang` before it reaches an agent. An opening bracket, or anything an
agent could read as one, is replaced by ``[`` when the word after it could spell ``hive``:
letters read through leetspeak (``h1v3``), separators ignored, and any non-ASCII character in
the tag word treated as suspect. Text without such a bracket is returned unchanged.

What counts is the text as a model may read it, not as it is stored: compatibility forms folded
(NFKC), HTML entities decoded however deeply nested (Gemini CLI shows hook text to its model
entity-escaped, so ``<&#47;hive-message>`` is a closing tag there), and any run of blanks, format
characters or slashes between the bracket and the name skipped, whatever its length. Look-alike
brackets and slashes come from Unicode's confusables table (as shipped by ``confusable_homoglyphs``)
together with every character whose NFKC form or name says it is one.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import re
import sys
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_LEET = str.maketrans(
    {
        "0": "o",
        "1": "i",
        "!": "i",
        "|": "i",
        "3": "e",
        "4": "a",
        "@": "a",
        "5": "s",
        "$": "s",
        "7": "t",
        "#": "h",
        "€": "e",
        "¡": "i",
    }
)
_NOT_LETTER = re.compile("[^a-z]+")
_WINDOW = 48  # visible characters after the gap that are read for "hive"
_TAG_WORD_LIMIT = 64
# Direction overrides, zero-width characters and Unicode tag characters can hide text or
# reorder what a person or agent sees; they never belong in peer text shown to either.
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\U000e0000-\U000e007f]")
# The entity syntax html.unescape reads (numeric, hex, named with or without ';').
_ENTITY = re.compile(r"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")
_NOT_AFTER_AMP = frozenset("\t\n\f <&;")  # no entity starts "&" and then one of these
_ENTITY_SPAN = 40  # longer than any entity the pattern above can match
# Characters that render as nothing or as blank space without being Unicode spaces.
_FILLERS = "\u115f\u1160\u17b4\u17b5\u180e\u2800\u3164\uffa0"


def _confusable_with(target: str) -> set[str]:
    """Single characters Unicode's confusables table lists as look-alikes of ``target``, either way."""
    # Imported here: loading the table takes ~0.1 s, which every CLI command would pay otherwise.
    from confusable_homoglyphs import confusables

    data = confusables.confusables_data
    found = {h["c"] for h in data.get(target, []) if len(h["c"]) == 1}
    found |= {c for c, homoglyphs in data.items() if len(c) == 1 and any(h["c"] == target for h in homoglyphs)}
    return found


def _char_class(chars: set[str]) -> str:
    """A regex character class of ``chars``, as ranges."""
    codes = sorted(map(ord, chars))
    parts, first = [], 0
    for i, code in enumerate(codes):
        if i + 1 == len(codes) or codes[i + 1] != code + 1:
            low, high = re.escape(chr(codes[first])), re.escape(chr(code))
            parts.append(low if codes[first] == code else f"{low}-{high}")
            first = i + 1
    return "[" + "".join(parts) + "]"


# What each character is to the rule, as one of these codes: a reader's view translated through
# the table is matched with patterns over a few ASCII codes, where a class of thousands of
# scattered characters would be matched range by range.
_GAP, _SLASH, _CLOSE, _OPEN, _OTHER = "\x01", "\x02", "\x03", "\x04", "\x05"
_SKIP = re.compile("[\x01\x02]*")  # any run of blanks, invisibles and slashes, any length
_WORD_END = re.compile("[\x01\x03]")
_VISIBLE = re.compile(f"(?:[\x01\x02]*[^\x01\x02]){{1,{_WINDOW}}}")


@dataclass(frozen=True)
class _Tables:
    opening: frozenset[str]
    roles: dict[int, str]  # str.translate table to the codes above
    trigger: re.Pattern[str]  # a character that may start a bracket, or an entity


_SETS = ("opening", "closing", "slashes", "gaps", "ampersands")
# The scan's result, shipped with hive for the Unicode data it was made with (regenerate it with
# ``python -m hive.sidecar.base.defang``; tests/sidecar/test_defang.py checks it is current).
SHIPPED_TABLE = Path(__file__).with_name("defang_table.json")


@cache
def _tables() -> _Tables:
    """The bracket set and the role of every character, made once (the server builds it at start).

    Reading all of Unicode takes a second or more on every sidecar start; the result depends only
    on this file, the interpreter's Unicode data and the confusables table, so hive ships it under
    a key of those three and scans only when the key differs (another Python, an edited rule)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        shipped = json.loads(SHIPPED_TABLE.read_text())
        if shipped["key"] == table_key():
            return _made(*(set(map(chr, shipped[name])) for name in _SETS))
    return _made(*_scan())


def table_key() -> str:
    from importlib.metadata import version

    key = hashlib.sha256(Path(__file__).read_bytes())
    key.update(f"{unicodedata.unidata_version}/{version('confusable-homoglyphs')}".encode())
    return key.hexdigest()[:16]


def table_json() -> str:
    """What :data:`SHIPPED_TABLE` holds: the key and each set as sorted code points."""
    sets = dict(zip(_SETS, _scan(), strict=True))
    return json.dumps({"key": table_key(), **{name: sorted(map(ord, chars)) for name, chars in sets.items()}}) + "\n"


def _scan() -> tuple[set[str], set[str], set[str], set[str], set[str]]:
    opening, closing, slashes, gaps, ampersands = {"<"}, {">"}, {"/", "\\"}, set(_FILLERS), {"&"}
    for code in range(0x80, sys.maxunicode + 1):
        char = chr(code)
        category = unicodedata.category(char)
        if category in ("Cn", "Co", "Cs"):  # unassigned, private or surrogate: no form or name to read
            continue
        folded = unicodedata.normalize("NFKC", char)
        name = unicodedata.name(char, "")
        if (
            "<" in folded
            or "LESS-THAN" in name
            or ("LEFT" in name and ("ANGLE" in name or "CHEVRON" in name))
            or ("ANGLE BRACKET" in name and "RIGHT" not in name)
        ):
            opening.add(char)
        elif ">" in folded or "GREATER-THAN" in name or ("RIGHT" in name and ("ANGLE" in name or "CHEVRON" in name)):
            closing.add(char)
        elif "/" in folded or "\\" in folded or "SOLIDUS" in name:
            slashes.add(char)
        elif "&" in folded:
            ampersands.add(char)
        elif category in ("Zs", "Zl", "Zp", "Cf", "Mn", "Me") or folded.isspace():
            gaps.add(char)
    opening |= _confusable_with("<")
    closing |= _confusable_with(">") - opening
    slashes |= (_confusable_with("/") | _confusable_with("\\")) - opening - closing
    gaps = (gaps | set(" \t\r\n\x0b\x0c")) - opening - closing - slashes
    return opening, closing, slashes, gaps, ampersands


def _made(opening: set[str], closing: set[str], slashes: set[str], gaps: set[str], ampersands: set[str]) -> _Tables:
    roles = {ord(c): _OTHER for c in (_GAP, _SLASH, _CLOSE, _OPEN, _OTHER)}
    for chars, role in ((gaps, _GAP), (slashes, _SLASH), (closing, _CLOSE), (opening, _OPEN)):
        roles.update(dict.fromkeys(map(ord, chars), role))
    return _Tables(frozenset(opening), roles, re.compile(_char_class(opening | ampersands)))


def brackets() -> frozenset[str]:
    """Every character an agent could read as an opening ``<``."""
    return _tables().opening


# ---- the text as a model reads it ---------------------------------------------------------------


def _nfkc_view(text: str) -> tuple[str, list[int] | None]:
    """NFKC of each character, with the index of the original character each one came from."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text, None
    chars: list[str] = []
    origin: list[int] = []
    for i, char in enumerate(text):
        folded = char if char.isascii() else unicodedata.normalize("NFKC", char)
        chars.append(folded)
        origin.extend([i] * len(folded))
    return "".join(chars), origin


def _entity_view(text: str, origin: list[int] | None) -> tuple[str, list[int] | None]:
    """``text`` with HTML entities decoded to a fixed point (``&amp;#60;`` is ``<``), right to left
    so that an entity a decoded one spells is decoded too, in one pass."""
    if "&" not in text or not _ENTITY.search(text):
        return text, origin
    rev_chars: list[str] = []  # the decoded text so far, reversed (its start is at the end)
    rev_origin: list[int] = []
    end = len(text)
    while end > 0:
        amp = text.rfind("&", 0, end)
        if amp < 0:
            amp = -1
        rev_chars.extend(reversed(text[amp + 1 : end]))
        rev_origin.extend(range(end - 1, amp, -1) if origin is None else reversed(origin[amp + 1 : end]))
        if amp < 0:
            break
        start = amp if origin is None else origin[amp]
        rev_chars.append("&")
        rev_origin.append(start)
        while rev_chars and rev_chars[-1] == "&" and len(rev_chars) > 1 and rev_chars[-2] not in _NOT_AFTER_AMP:
            ahead = "".join(reversed(rev_chars[-_ENTITY_SPAN:]))
            match = _ENTITY.match(ahead)
            decoded = html.unescape(match.group()) if match else ""
            if not match or decoded == match.group():
                break
            del rev_chars[len(rev_chars) - len(match.group()) :]
            del rev_origin[len(rev_origin) - len(match.group()) :]
            rev_chars.extend(reversed(decoded))
            rev_origin.extend([start] * len(decoded))
        end = amp
    return "".join(reversed(rev_chars)), rev_origin[::-1]


def reader_view(text: str) -> tuple[str, list[int] | None]:
    """What a model may read (NFKC, entities decoded, NFKC again) and where each character came
    from (``None``: the text as it is)."""
    view, origin = _nfkc_view(text)
    view, origin = _entity_view(view, origin)
    if origin is not None and not view.isascii():
        again, inner = _nfkc_view(view)
        if inner is not None:
            origin = [origin[i] for i in inner]
        view = again
    return view, origin


# ---- the rule ----------------------------------------------------------------------------------


def _spells_hive(window: str) -> bool:
    text = window.casefold().replace("\\/", "v").replace("|-|", "h")
    return _NOT_LETTER.sub("", text.translate(_LEET)).startswith("hiv")


def _suspect_tag(view: str, roles: str, start: int) -> bool:
    """Whether what follows a bracket at ``start - 1`` of the reader's view could be a hive tag."""
    skipped = _SKIP.match(roles, start)
    assert skipped is not None  # a starred pattern matches anywhere, if only the empty string
    start = skipped.end()
    end = _WORD_END.search(roles, start, start + 1 + _TAG_WORD_LIMIT)
    word = view[start : end.start() if end else start + 1 + _TAG_WORD_LIMIT]
    if len(word) > _TAG_WORD_LIMIT:
        return True
    if word and not (word.isascii() and word.isprintable()):
        return True
    visible = _VISIBLE.match(roles, start)
    return visible is not None and _spells_hive(view[start : visible.end()])


def _suspects(text: str) -> set[int]:
    """Indices in ``text`` of the characters that open a suspect tag as a model reads it."""
    view, origin = reader_view(text)
    roles = view.translate(_tables().roles)
    found = set()
    for match in re.finditer(_OPEN, roles):
        if _suspect_tag(view, roles, match.end()):
            found.add(match.start() if origin is None else origin[match.start()])
    return found


def defang(text: str) -> str:
    """Return ``text`` with every bracket that could open or close a hive frame replaced by ``[``."""
    text = _INVISIBLE.sub("", text)
    trigger = _tables().trigger
    # Each round replaces at least one bracket or '&' by '[': it ends, and usually after one.
    while trigger.search(text):
        found = _suspects(text)
        if not found:
            break
        out = list(text)
        for i in found:
            out[i] = "["
        text = "".join(out)
    return text


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


if __name__ == "__main__":
    SHIPPED_TABLE.write_text(table_json())
