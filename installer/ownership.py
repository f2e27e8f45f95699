"""Hive's parts of a shared config file: putting them in, finding them again, taking them out.

A descriptor states which key paths hive owns in a file and the value it puts there. Two kinds:

- a **value** (an MCP server entry, a version number): set at its key path; on removal it goes
  back to what was there before, unless the person changed it since, in which case it is theirs;
- a **list** (hook arrays the person shares with hive): hive's entries are appended after the
  person's and recognised again by ``HOOK_MARKERS`` in their command lines (or by being equal to
  what hive wrote), so removal takes out exactly those and leaves the person's entries in order.

Every change is recorded as a :class:`KeyRecord`, kept in the setup manifest, so that removal
knows what was there before hive. Containers hive had to create (``"hooks": {}``, a
``[mcp_servers]`` table) are removed again when hive's removal leaves them empty.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from hive.integrations.descriptor import HOOK_MARKERS

from .documents import MISSING, Document, Key
from .errors import ConfigShapeError


@dataclass
class KeyRecord:
    """One key path hive set in a file, and what it found there the first time."""

    path: Key
    kind: Literal["value", "list"]
    value: Any  # what hive put there (for a list: hive's entries)
    had: bool  # whether the key existed before hive first set it
    previous: Any = None  # its value then (kind "value" only)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = list(self.path)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KeyRecord:
        return cls(
            path=tuple(data["path"]),
            kind=data["kind"],
            value=data["value"],
            had=data["had"],
            previous=data.get("previous"),
        )


@dataclass
class Applied:
    """What applying hive's parts to one document did."""

    records: list[KeyRecord] = field(default_factory=list)
    created: list[Key] = field(default_factory=list)  # containers hive added, outermost first


def _mentions_marker(command: Any) -> bool:
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    return isinstance(command, str) and any(marker in command for marker in HOOK_MARKERS)


def _is_hive_handler(item: Any) -> bool:
    return isinstance(item, dict) and _mentions_marker(item.get("command"))


def is_hive_item(item: Any, ours: list[Any]) -> bool:
    """Whether a list entry is wholly hive's: one hive wrote, or a hook (group) running only hive."""
    if item in ours or _is_hive_handler(item):
        return True
    if isinstance(item, dict) and isinstance(item.get("hooks"), list) and item["hooks"]:
        return all(_is_hive_handler(inner) for inner in item["hooks"])
    return False


def strip_list(items: list[Any], ours: list[Any]) -> list[Any]:
    """``items`` without hive's entries; a group the person shares with hive keeps their handlers."""
    kept: list[Any] = []
    for item in items:
        if is_hive_item(item, ours):
            continue
        if isinstance(item, dict) and isinstance(item.get("hooks"), list):
            inner = [handler for handler in item["hooks"] if not _is_hive_handler(handler)]
            if len(inner) != len(item["hooks"]):
                item = {**item, "hooks": inner}
        kept.append(item)
    return kept


def merge_list(current: list[Any], ours: list[Any]) -> list[Any]:
    """The person's entries in their order, then hive's. Hive's entries already in place stay put."""
    stripped = strip_list(current, ours)
    hive_part = [item for item in current if is_hive_item(item, ours)]
    if hive_part == ours and len(stripped) + len(hive_part) == len(current):
        return current  # up to date, wherever the person's own entries sit around hive's
    return stripped + ours


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a value")


def apply(doc: Document, owned: dict[Key, Any], known: dict[Key, KeyRecord] | None = None) -> Applied:
    """Put hive's ``owned`` parts into ``doc``. ``known`` are records from an earlier setup, kept as
    they are so removal still restores what was there before hive first came.

    Raises:
        ConfigShapeError: a key on the way holds something other than an object, or a hook array
            is not a list. Nothing in ``doc`` has been changed for that key.
    """
    known = known or {}
    result = Applied()
    for path, value in owned.items():
        for depth in range(1, len(path)):
            parent = path[:depth]
            if doc.get(parent) is MISSING:
                doc.add_table(parent)
                result.created.append(parent)
            elif not doc.is_table(parent):
                raise ConfigShapeError(
                    doc.path,
                    f"'{'.'.join(parent)}' is {_kind(doc.get(parent))}",
                    "hive needs an object there; fix or remove that key",
                )
        current = doc.get(path)
        if isinstance(value, list):
            if current is not MISSING and not isinstance(current, list):
                raise ConfigShapeError(
                    doc.path,
                    f"'{'.'.join(path)}' is {_kind(current)}",
                    "hive needs a list there; fix or remove that key",
                )
            new = list(value) if current is MISSING else merge_list(current, value)
            record = KeyRecord(path, "list", value, had=current is not MISSING)
        else:
            new = value
            record = KeyRecord(
                path, "value", value, had=current is not MISSING, previous=None if current is MISSING else current
            )
        if current is MISSING or new != current:
            doc.set(path, new)
        earlier = known.get(path)
        if earlier is not None:
            record.had, record.previous = earlier.had, earlier.previous
        elif record.had and (
            current == value
            if isinstance(value, dict)
            else isinstance(value, list) and bool(current) and not strip_list(current, value)
        ):
            # Already exactly hive's (wired before this manifest existed): hive's to take out again.
            # Scalars are exempt: a "version": 1 the person had is theirs; so is an empty list.
            record.had, record.previous = False, None
        result.records.append(record)
    return result


def strip(doc: Document, records: list[KeyRecord], created: list[Key]) -> None:
    """Take hive's parts out of ``doc``: the inverse of :func:`apply`, minus what the person changed."""
    for record in records:
        current = doc.get(record.path)
        if current is MISSING:
            continue
        if record.kind == "list":
            if not isinstance(current, list):
                continue
            kept = strip_list(current, record.value)
            if not kept and not record.had:
                doc.delete(record.path)
            elif kept != current:
                doc.set(record.path, kept)
        elif current == record.value:
            if record.had:
                doc.set(record.path, record.previous)
            else:
                doc.delete(record.path)
        # A value the person changed since is theirs now: left alone.
    for container in sorted(created, key=len, reverse=True):
        if doc.get(container) == {}:
            doc.delete(container)


def has_parts(doc: Document, owned: dict[Key, Any]) -> bool:
    """Whether every one of hive's ``owned`` parts is in ``doc`` exactly as hive would write it."""
    for path, value in owned.items():
        current = doc.get(path)
        if isinstance(value, list):
            if not isinstance(current, list) or [i for i in current if is_hive_item(i, value)] != value:
                return False
        elif current != value:
            return False
    return True


def any_parts(doc: Document, owned: dict[Key, Any]) -> bool:
    """Whether any of hive's ``owned`` parts (in any version) is in ``doc``."""
    for path, value in owned.items():
        current = doc.get(path)
        if isinstance(value, list):
            if isinstance(current, list) and any(is_hive_item(item, value) for item in current):
                return True
        elif isinstance(value, dict) and current is not MISSING:
            return True  # hive's own key (an MCP entry named hive), whatever it holds now
    return False
