"""Bounded JSON decoding and text checks for everything that arrives from outside the process.

Both edges use :func:`decode`: a line on the local socket (``server``) and a frame on a mesh
link (``transport``); what other programs write (a harness's files, a hook's stdin) is read with
:func:`parse` and :func:`json_objects`. The stdlib parser recurses once per nesting level and raises
``RecursionError`` around a thousand levels, which nothing above it expected; an integer of
thousands of digits raises a plain ``ValueError``; ``"\\ud800"`` decodes to a lone surrogate
that later fails to encode (sqlite, the reply writer). Every one of those becomes one
:class:`WireError` here, with a reason meant for the sender.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from .errors import BadRequest

MAX_DEPTH = 32  # the deepest object hive itself sends is under ten levels
# What other programs write (a harness's transcript, a hook's stdin with a model's tool input) may
# nest deeper than hive's own documents; the stdlib parser fails near 1,000 levels.
FILE_DEPTH = 200
MAX_KEYS = 100_000  # object members and array items in one document, all levels together

_SURROGATE = re.compile("[\ud800-\udfff]")


class WireError(BadRequest):
    """Input that is not bounded, well-formed JSON text; ``reason`` says which rule it broke."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class OverLimit(WireError):
    """JSON nested too deep or with too many members: a sender that means no good, or a bug."""


class BadText(WireError):
    """Well-formed JSON whose strings are not proper Unicode (a lone UTF-16 surrogate)."""

    def __init__(self, reason: str, value: Any) -> None:
        super().__init__(reason)
        self.value = value  # the decoded document, for a caller that can still answer its sender


def proper_text(value: str) -> bool:
    """Whether ``value`` encodes to UTF-8: no lone surrogate, which JSON escapes can smuggle in."""
    return _SURROGATE.search(value) is None


def decode(data: bytes | str, *, max_depth: int = MAX_DEPTH, max_keys: int = MAX_KEYS) -> Any:
    """The JSON document in ``data`` (UTF-8 bytes, or text), checked for depth, size and proper text.

    Raises :class:`OverLimit` (depth, size), :class:`BadText` for lone surrogates (the document
    is attached) and :class:`WireError` for anything else; never another exception.
    """
    try:
        text = data if isinstance(data, str) else data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(f"the input is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise OverLimit(f"JSON nested deeper than {max_depth} levels is refused") from None
    except json.JSONDecodeError as exc:
        raise WireError(f"not valid JSON ({exc.msg} at character {exc.pos})") from None
    except ValueError as exc:  # e.g. an integer over the interpreter's digit limit
        raise WireError(f"not acceptable JSON ({exc})") from None
    bad = check(value, max_depth=max_depth, max_keys=max_keys)
    if bad:
        raise BadText(bad, value)
    return value


def parse(data: bytes | str) -> Any:
    """The JSON document another program wrote (a file, a hook's stdin), or None when :func:`decode`
    refuses it (at :data:`FILE_DEPTH`): what cannot be read is passed over, never raised."""
    try:
        return decode(data, max_depth=FILE_DEPTH)
    except WireError:
        return None


def json_objects(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects among the lines of a JSON Lines file another program writes; a line that
    is no object, or that :func:`parse` passes over, is skipped."""
    for line in lines:
        value = parse(line)
        if isinstance(value, dict):
            yield value


def check(value: Any, *, max_depth: int = MAX_DEPTH, max_keys: int = MAX_KEYS) -> str:
    """Walk a decoded document without recursion: raises OverLimit for depth or size, returns a
    reason (or ``""``) for improper text, which the caller may still want to answer."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    items = 0
    bad_text = ""
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            if not bad_text and not proper_text(node):
                bad_text = "a string holds a lone UTF-16 surrogate, which is not Unicode text; send proper UTF-8"
            continue
        if isinstance(node, dict):
            children: Any = node.items()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > max_depth:
            raise OverLimit(f"JSON nested deeper than {max_depth} levels is refused")
        items += len(node)
        if items > max_keys:
            raise OverLimit(f"JSON with more than {max_keys} members and items is refused")
        for child in children:
            if isinstance(child, tuple):
                stack.append((child[0], depth + 1))
                stack.append((child[1], depth + 1))
            else:
                stack.append((child, depth + 1))
    return bad_text


def encode_line(payload: Any) -> bytes:
    """One JSON line in UTF-8 that cannot fail on text: a lone surrogate that slipped into stored
    data (written before these checks existed) goes out as ``?`` rather than stopping the writer."""
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return (text + "\n").encode("utf-8", errors="replace")
