"""Config documents hive edits in place: JSON and TOML, parsed so that the person's own content survives.

A :class:`Document` is addressed by key paths (tuples of keys). A JSON file is edited as text,
only where hive's values go, so the person's formatting of the rest survives byte for byte (a
compact array stays compact); TOML goes through tomlkit, which keeps comments, ordering and
formatting of everything hive does not touch. A file that does not
parse raises :class:`ConfigParseError` naming the file, line and column: hive never rewrites what
it cannot read.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import tomlkit
import tomlkit.exceptions
from tomlkit.container import Container
from tomlkit.items import AoT, InlineTable, Table

from .errors import ConfigParseError

Key = tuple[str, ...]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # the value at a key path that does not exist


class Document(Protocol):
    """One parsed config file, edited through key paths."""

    path: Path  # the file it was read from, named in errors about its shape

    def get(self, path: Key) -> Any:
        """The plain value (dict, list, str, …) at ``path``, or :data:`MISSING`."""

    def is_table(self, path: Key) -> bool:
        """Whether ``path`` holds a mapping that keys can be added to."""

    def add_table(self, path: Key) -> None:
        """Create an empty mapping at ``path`` (its parent must be a mapping)."""

    def set(self, path: Key, value: Any) -> None:
        """Put ``value`` at ``path`` (its parent must be a mapping), replacing what is there."""

    def delete(self, path: Key) -> None:
        """Remove the key at ``path`` if present."""

    def render(self) -> str:
        """The whole file's text."""


# ---- JSON ---------------------------------------------------------------------------------------


_COMMENT = re.compile(r'"(?:\\.|[^"\\])*"|(//[^\n]*|/\*.*?\*/)', re.S)


def _strip_comments(text: str) -> str:
    return _COMMENT.sub(lambda m: m.group(0) if m.group(1) is None else " " * len(m.group(1)), text)


def _indent_of(text: str) -> int | str:
    """The file's indentation step: the leading whitespace of its first indented line."""
    for line in text.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and stripped != line:
            lead = line[: len(line) - len(stripped)]
            return "\t" if lead.startswith("\t") else len(lead)
    return 2


_WS = " \t\n\r"
_DECODER = json.JSONDecoder()
Step = str | int  # a key of an object or an index into an array, on the way to a value


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


@dataclass
class _Item:
    """One member of an object (``key`` set) or element of an array, by where its text lies."""

    key: str | None
    start: int  # its first character: the key's quote, or the element itself
    value_start: int
    value_end: int


@dataclass
class _Container:
    start: int  # the opening bracket
    close: int  # the closing bracket
    items: list[_Item]
    multiline: bool  # whether new content goes on lines of its own, as the rest of it does


def _container(text: str, start: int, parent_multiline: bool) -> _Container:
    """The object or array whose opening bracket is at ``start``. The text is valid JSON (it parsed)."""
    is_object = text[start] == "{"
    closing = "}" if is_object else "]"
    items: list[_Item] = []
    i = _skip(text, start + 1)
    while text[i] != closing:
        first, key = i, None
        if is_object:
            key, i = _DECODER.raw_decode(text, i)
            i = _skip(text, _skip(text, i) + 1)  # past the colon
        end = _DECODER.raw_decode(text, i)[1]
        items.append(_Item(key, first, i, end))
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)
    multiline = "\n" in text[start:i] if items else parent_multiline
    return _Container(start, i, items, multiline)


def _line_indent(text: str, position: int) -> str:
    line = text[text.rfind("\n", 0, position) + 1 :]
    return line[: len(line) - len(line.lstrip(" \t"))]


@dataclass
class JsonDocument:
    """A JSON file edited as text: each change replaces only the characters of the values it changes.

    Everything hive does not touch keeps its bytes (a compact array stays on its line, spacing
    and key order stay the person's); new content takes the indentation of its neighbours, and
    is compact where they are. ``data`` is the parsed form, kept in step after every edit.
    """

    path: Path
    text: str
    data: dict[str, Any]
    indent: int | str = 2

    @classmethod
    def parse(cls, path: Path, text: str) -> JsonDocument:
        if not text.strip():
            return cls(path, "{}\n", {})
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            hint = "fix the JSON there (a missing or extra comma, quote or bracket is the usual cause)"
            try:
                json.loads(_strip_comments(text))
            except json.JSONDecodeError:
                pass
            else:
                hint = (
                    "the file has comments (// or /* */), which hive's JSON writer would lose; remove them, "
                    "or add hive's entry by hand (`hive setup --dry-run` shows it)"
                )
            raise ConfigParseError(path, exc.lineno, exc.colno, exc.msg, hint) from exc
        if not isinstance(data, dict):
            raise ConfigParseError(
                path,
                1,
                1,
                f"the top level is a JSON {type(data).__name__}, not an object",
                "the file must hold one JSON object ({ ... })",
            )
        return cls(path, text, data, _indent_of(text))

    # -- reading ------------------------------------------------------------------------------

    def _parent(self, path: Key) -> dict[str, Any] | None:
        node: Any = self.data
        for key in path[:-1]:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node if isinstance(node, dict) else None

    def get(self, path: Key) -> Any:
        parent = self._parent(path)
        if parent is None or path[-1] not in parent:
            return MISSING
        return parent[path[-1]]

    def is_table(self, path: Key) -> bool:
        return isinstance(self.get(path), dict) if path else True

    # -- locating text --------------------------------------------------------------------------

    def _locate(self, steps: tuple[Step, ...]) -> _Container:
        """The container at ``steps`` (which must exist and be an object or array)."""
        node = _container(self.text, _skip(self.text, 0), True)
        for step in steps:
            item = self._item(node, step)
            assert item is not None, f"nothing at {steps}"
            node = _container(self.text, item.value_start, node.multiline)
        return node

    @staticmethod
    def _item(node: _Container, step: Step) -> _Item | None:
        if isinstance(step, int):
            return node.items[step] if step < len(node.items) else None
        # The last of duplicate keys is the one json.loads keeps.
        return next((item for item in reversed(node.items) if item.key == step), None)

    def _render(self, value: Any, line_indent: str, multiline: bool) -> str:
        if not multiline:
            return json.dumps(value, ensure_ascii=False)
        return json.dumps(value, indent=self.indent, ensure_ascii=False).replace("\n", "\n" + line_indent)

    def _splice(self, start: int, end: int, text: str) -> None:
        self.text = self.text[:start] + text + self.text[end:]
        self.data = json.loads(self.text)

    # -- editing --------------------------------------------------------------------------------

    def _insert(self, steps: tuple[Step, ...], index: int, key: str | None, value: Any) -> None:
        """Put a member (``key``) or element before item ``index`` of the container at ``steps``."""
        node = self._locate(steps)
        items, text = node.items, self.text
        label = "" if key is None else json.dumps(key, ensure_ascii=False) + ": "
        if not items:
            if not node.multiline:
                self._splice(node.start + 1, node.close, label + self._render(value, "", False))
                return
            base = _line_indent(text, node.start)
            inner = base + (self.indent if isinstance(self.indent, str) else " " * self.indent)
            self._splice(
                node.start + 1, node.close, "\n" + inner + label + self._render(value, inner, True) + "\n" + base
            )
            return
        # The whitespace that separates items here, so the new one lines up with its neighbours.
        if len(items) > 1:
            between = text[items[-2].value_end : items[-1].start]
            sep = between[between.index(",") + 1 :]
        else:
            sep = text[node.start + 1 : items[0].start]
        if "\n" not in sep:
            sep = " "
        indent = sep.rsplit("\n", 1)[-1]
        rendered = label + self._render(value, indent, "\n" in sep)
        if index >= len(items):
            position = items[-1].value_end
            self._splice(position, position, "," + sep + rendered)
        else:
            position = items[index].start
            self._splice(position, position, rendered + "," + sep)

    def _remove(self, steps: tuple[Step, ...], index: int) -> None:
        node = self._locate(steps)
        items = node.items
        if index > 0:
            self._splice(items[index - 1].value_end, items[index].value_end, "")
        elif len(items) > 1:
            self._splice(items[0].start, items[1].start, "")
        else:
            self._splice(node.start + 1, node.close, "")

    def _morph(self, steps: tuple[Step, ...], new: Any) -> None:
        """Turn the value at ``steps`` into ``new`` with the smallest edits: recursing into objects and
        arrays, so the parts that stay the same keep their text."""
        parent = self._locate(steps[:-1])
        item = self._item(parent, steps[-1])
        assert item is not None
        old = json.loads(self.text[item.value_start : item.value_end])
        if old == new:
            return
        if isinstance(old, dict) and isinstance(new, dict):
            for key in [k for k in old if k not in new]:
                self._remove(steps, self._index(steps, key))
            for key, value in new.items():
                if key in old:
                    self._morph((*steps, key), value)
                else:
                    self._insert(steps, len(self._locate(steps).items), key, value)
            return
        if isinstance(old, list) and isinstance(new, list):
            canon = [json.dumps(x, sort_keys=True) for x in old], [json.dumps(x, sort_keys=True) for x in new]
            opcodes = difflib.SequenceMatcher(None, *canon, autojunk=False).get_opcodes()
            for tag, i1, i2, j1, j2 in reversed(opcodes):  # from the end: earlier indices stay valid
                if tag == "equal":
                    continue
                if tag == "replace" and i2 - i1 == j2 - j1:
                    for offset in range(i2 - i1):
                        self._morph((*steps, i1 + offset), new[j1 + offset])
                    continue
                for index in reversed(range(i1, i2)):
                    self._remove(steps, index)
                for offset, j in enumerate(range(j1, j2)):
                    self._insert(steps, i1 + offset, None, new[j])
            return
        multiline = parent.multiline or "\n" in self.text[item.value_start : item.value_end]
        self._splice(
            item.value_start, item.value_end, self._render(new, _line_indent(self.text, item.value_start), multiline)
        )

    def _index(self, steps: tuple[Step, ...], key: str) -> int:
        items = self._locate(steps).items
        return max(i for i, item in enumerate(items) if item.key == key)

    def add_table(self, path: Key) -> None:
        self.set(path, {})

    def set(self, path: Key, value: Any) -> None:
        parent = self._parent(path)
        assert parent is not None, f"no table at {path[:-1]}"
        value = json.loads(json.dumps(value))  # plain JSON values only, as they will read back
        if path[-1] in parent:
            self._morph(path, value)
        else:
            self._insert(path[:-1], len(self._locate(path[:-1]).items), path[-1], value)

    def delete(self, path: Key) -> None:
        parent = self._parent(path)
        if parent is not None and path[-1] in parent:
            self._remove(path[:-1], self._index(path[:-1], path[-1]))

    def render(self) -> str:
        return self.text


# ---- TOML ---------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


def _is_mapping(node: Any) -> bool:
    return isinstance(node, (Container, Table, InlineTable, dict))


def _toml_value(value: Any) -> Any:
    """A tomlkit item for ``value``: dicts become ``[tables]`` (sub-dicts their own sections)."""
    if isinstance(value, dict):
        table = tomlkit.table()
        scalars = {k: v for k, v in value.items() if not isinstance(v, dict)}
        nested = {k: v for k, v in value.items() if isinstance(v, dict)}
        for key, item in scalars.items():
            table.add(key, _toml_value(item))
        for key, item in nested.items():
            table.add(key, _toml_value(item))
        return table
    return value


def _last_table(table: Table) -> Table:
    nested = [value for value in table.value.values() if isinstance(value, Table)]
    return _last_table(nested[-1]) if nested else table


def _trailing_newlines(text: str) -> int:
    return len(text) - len(text.rstrip("\n"))


@dataclass
class TomlDocument:
    path: Path
    doc: tomlkit.TOMLDocument
    trailing: int = 1  # newlines the file ended with: tomlkit's own blank-line bookkeeping may add some

    @classmethod
    def parse(cls, path: Path, text: str) -> TomlDocument:
        try:
            doc = tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as exc:
            message = str(exc).split(" at line ")[0]
            raise ConfigParseError(
                path,
                exc.line,
                exc.col,
                message,
                "fix the TOML there (an unclosed string or table header, or a key set twice, is the usual cause)",
            ) from exc
        return cls(path, doc, _trailing_newlines(text) if text.strip() else 1)

    def _node(self, path: Key) -> Any:
        node: Any = self.doc
        for key in path:
            if not _is_mapping(node) or key not in node:
                return MISSING
            node = node[key]
        return node

    def get(self, path: Key) -> Any:
        node = self._node(path)
        return node if node is MISSING else _plain(node)

    def is_table(self, path: Key) -> bool:
        node = self._node(path)
        return node is not MISSING and _is_mapping(node) and not isinstance(node, AoT)

    def add_table(self, path: Key) -> None:
        parent = self._node(path[:-1])
        # A super table renders no header of its own: "[mcp_servers.hive]" instead of an empty
        # "[mcp_servers]" section, which is how people write these files.
        parent[path[-1]] = (
            tomlkit.table(is_super_table=True)
            if isinstance(parent, Container) or isinstance(parent, Table)
            else tomlkit.inline_table()
        )

    def set(self, path: Key, value: Any) -> None:
        parent = self._node(path[:-1])
        item = _toml_value(value)
        if isinstance(item, Table) and isinstance(parent, InlineTable):
            inline = tomlkit.inline_table()
            inline.update(value)
            item = inline
        if path[-1] in parent:
            parent[path[-1]] = item
            return
        if isinstance(item, Table):
            # A blank line after the new table keeps it apart from a table that follows it; at the
            # end of the file render() trims it again.
            _last_table(item).add(tomlkit.nl())
        parent.add(path[-1], item)

    def delete(self, path: Key) -> None:
        parent = self._node(path[:-1])
        if parent is not MISSING and _is_mapping(parent) and path[-1] in parent:
            del parent[path[-1]]

    def render(self) -> str:
        text = tomlkit.dumps(self.doc)
        body = text.rstrip("\n")
        return body + "\n" * self.trailing if body else ""


def parse(fmt: str, path: Path, text: str) -> Document:
    """Parse ``text`` (the content of ``path``) as ``fmt`` ("json" or "toml")."""
    if fmt == "json":
        return JsonDocument.parse(path, text)
    if fmt == "toml":
        return TomlDocument.parse(path, text)
    raise ValueError(f"no document type for format {fmt!r}")
