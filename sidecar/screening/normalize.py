"""The copy of a message that the rules read, and the way back from it to the message.

Rules match a normalized copy: compatibility forms folded and HTML entities decoded (as
:func:`hive.sidecar.base.defang.reader_view` reads text), zero-width and other format characters
dropped, runs of blanks collapsed to one space (one newline when the run held a line break),
markdown emphasis at word edges dropped, letter-spaced words (``i g n o r e``) joined, and Latin
look-alikes inside mixed-script words (a Cyrillic ``о`` in ``ignоre``) read as Latin. Each step
keeps the index, in the text before it, of every character it emits, so a span of the copy maps
back to a span of the original message.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from ..base.defang import reader_view

# Blanks and characters that render as nothing. A run of them is one separator, or none.
_FORMAT = (
    r"\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    r"\u3164\ufeff\uffa0\U000e0000-\U000e007f"
)
_FORMAT_CHARS = re.compile(f"[{_FORMAT}]")
# A run of blanks and format characters that is not already one plain space or one lone newline.
_SQUEEZE = re.compile(f"[ \\n](?=[\\s{_FORMAT}])[\\s{_FORMAT}]*|[^\\S \\n][\\s{_FORMAT}]*|[{_FORMAT}][\\s{_FORMAT}]*")
_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
# Emphasis and code marks hugging a word (``**ignore**``, ``_all_``, `` `rules` ``), and words
# spelled one letter at a time with one separator between letters (at least four letters).
_MARKUP = re.compile(r"[*_`]+|~~")
_MARKUP_AFTER = frozenset(" \n.,:;!?)]")
_SPACED = re.compile(r"(?<!\w)(?:[^\W\d_][ .*_-]){3,}[^\W\d_](?!\w)")
_WORD = re.compile(r"[^\W\d_]{2,}")
_LATIN = re.compile("[a-zA-Z]")
# Cyrillic and Greek letters that look like Latin ones, read as Latin inside a word that mixes scripts.
_LOOKALIKES = str.maketrans(
    {
        **dict(zip("аеорсухіјѕԁһԛԝѵ", "aeopcyxijsdhqwv", strict=True)),
        **dict(zip("АВЕКМНОРСТХІЈЅ", "ABEKMHOPCTXIJS", strict=True)),
        **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧονρτχι", "ABEZHIKMNOPTYXovptxi", strict=True)),
    }
)


@dataclass(frozen=True)
class Marks:
    """Where a rewritten text came from, as marks: ``view[k]`` in the new text began at ``source[k]``
    of the old one, and the characters after a mark follow it one for one up to the next mark."""

    view: list[int]
    source: list[int]

    def __getitem__(self, index: int) -> int:
        k = bisect_right(self.view, index) - 1
        return self.source[k] + index - self.view[k]


@dataclass(frozen=True)
class View:
    """The normalized copy of ``original`` and, for each step that changed it, where each of its
    characters came from in the step before (``None``: that step changed nothing)."""

    original: str
    text: str
    steps: tuple[list[int] | Marks | None, ...]

    def _origin(self, index: int) -> int:
        for step in reversed(self.steps):
            if step is not None:
                index = step[index]
        return index

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that ``text[start:end]`` (not empty) was made from."""
        first = self._origin(start)
        if end >= len(self.text):
            return first, len(self.original)
        return first, max(self._origin(end), self._origin(end - 1) + 1)


def _rewrite(
    text: str, pattern: re.Pattern[str], emit: Callable[[re.Match[str]], tuple[str, list[int]] | None]
) -> tuple[str, Marks | None]:
    """``text`` with each match of ``pattern`` replaced by what ``emit`` returns (the new text and,
    for each of its characters, its offset in the match; ``None`` leaves it), and where the new
    text came from (``None``: nothing changed)."""
    pieces: list[str] = []
    marks = Marks([0], [0])
    done = length = 0
    for match in pattern.finditer(text):
        replaced = emit(match)
        if replaced is None:
            continue
        start = match.start()
        pieces.append(text[done:start])
        length += start - done
        new, offsets = replaced
        pieces.append(new)
        for offset in offsets:
            marks.view.append(length)
            marks.source.append(start + offset)
            length += 1
        done = match.end()
        marks.view.append(length)
        marks.source.append(done)
    if not done:
        return text, None
    pieces.append(text[done:])
    return "".join(pieces), marks


def _squeezed(match: re.Match[str]) -> tuple[str, list[int]]:
    run = match.group()
    if _LINE_BREAK.search(run):
        return "\n", [0]
    for offset, char in enumerate(run):
        if not _FORMAT_CHARS.match(char):
            return " ", [offset]
    return "", []


def _unmarked(match: re.Match[str]) -> tuple[str, list[int]] | None:
    """Nothing for marks that open a word after a blank, or close one before a blank or punctuation."""
    text, start, end = match.string, match.start(), match.end()
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    if (before.isspace() and (after.isalnum() or after == "_")) or (before.isalnum() and after in _MARKUP_AFTER):
        return "", []
    return None


def _joined(match: re.Match[str]) -> tuple[str, list[int]]:
    return match.group()[::2], list(range(0, len(match.group()), 2))


def _latin(match: re.Match[str]) -> str:
    word = match.group()
    return word.translate(_LOOKALIKES) if not word.isascii() and _LATIN.search(word) else word


def normalize(text: str) -> View:
    """The copy of ``text`` that the rules read (see the module docstring)."""
    view, first = reader_view(text)
    if not view.isascii():
        view = view.replace("\u0130", "I")  # the one letter whose lowercase is longer than itself
    view, squeezed = _rewrite(view, _SQUEEZE, _squeezed)
    view, unmarked = (
        _rewrite(view, _MARKUP, _unmarked)
        if ("*" in view or "_" in view or "`" in view or "~" in view)
        else (view, None)
    )
    view, joined = _rewrite(view, _SPACED, _joined)
    if not view.isascii():
        view = _WORD.sub(_latin, view)
    return View(text, view, (first, squeezed, unmarked, joined))
