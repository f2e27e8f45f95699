"""Config documents hive edits in place: JSON and TOML, parsed so that the person's own content survives.

A :class:`Document` is addressed by key paths (tuples of keys). JSON keeps key order (Python
dicts do) and is written back in the file's own indentation; TOML goes through tomlkit, which
keeps comments, ordering and formatting of everything hive does not touch. A file that does not
parse raises :class:`ConfigParseError` naming the file, line and column: hive never rewrites what
it cannot read.
"""

from __future__ import annotations

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


@dataclass
class JsonDocument:
    path: Path
    data: dict[str, Any]
    indent: int | str = 2
    final_newline: bool = True

    @classmethod
    def parse(cls, path: Path, text: str) -> JsonDocument:
        if not text.strip():
            return cls(path, {})
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            hint = "fix the JSON there (a missing or extra comma, quote or bracket is the usual cause)"
            try:
                json.loads(_strip_comments(text))
            except json.JSONDecodeError:
                pass
            else:
                hint = ("the file has comments (// or /* */), which hive's JSON writer would lose; remove them, "
                        "or add hive's entry by hand (`hive setup --dry-run` shows it)")
            raise ConfigParseError(path, exc.lineno, exc.colno, exc.msg, hint) from exc
        if not isinstance(data, dict):
            raise ConfigParseError(path, 1, 1, f"the top level is a JSON {type(data).__name__}, not an object",
                                   "the file must hold one JSON object ({ ... })")
        indent = _indent_of(text)
        return cls(path, data, indent, text.endswith("\n"))

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

    def add_table(self, path: Key) -> None:
        self.set(path, {})

    def set(self, path: Key, value: Any) -> None:
        parent = self._parent(path)
        assert parent is not None, f"no table at {path[:-1]}"
        parent[path[-1]] = json.loads(json.dumps(value))  # a private copy: later edits never alias the owned value

    def delete(self, path: Key) -> None:
        parent = self._parent(path)
        if parent is not None:
            parent.pop(path[-1], None)

    def render(self) -> str:
        text = json.dumps(self.data, indent=self.indent, ensure_ascii=False)
        return text + "\n" if self.final_newline else text


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
            raise ConfigParseError(path, exc.line, exc.col, message,
                                   "fix the TOML there (an unclosed string or table header, or a key set twice, "
                                   "is the usual cause)") from exc
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
        parent[path[-1]] = tomlkit.table(is_super_table=True) if isinstance(parent, Container) or isinstance(
            parent, Table) else tomlkit.inline_table()

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
