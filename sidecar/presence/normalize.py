"""Normalizing: what one hook call reports becomes the records of the ``events`` table.

One record per action (``session.started``, ``prompt.submitted``, ``tool.invoked``,
``tool.completed``, ``turn.stopped``, ``session.ended``), plus the ones a tool call implies:
``file.read`` / ``file.modified`` for the paths in its input, ``command.executed`` for a shell
command. Provenance: ``method`` is how it was collected (``hook``, or ``plugin`` for a harness whose
descriptor says its events come from a plugin: ``Presence.via``), ``fidelity`` is ``observed`` when
the harness named the action and ``inferred`` when hive derived it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

from hive.integrations import registry

from .events import Event
from .redaction import detail_json

ACTIONS = {
    "session.start": "session.started",
    "prompt.submitted": "prompt.submitted",
    "tool.before": "tool.invoked",
    "tool.after": "tool.completed",
    "turn.stop": "turn.stopped",
    "session.end": "session.ended",
}

_CALL_ID = ("tool_use_id", "call_id", "callId", "toolCallId", "tool_call_id", "toolUseId", "id")
_INPUT = ("tool_input", "args", "input", "toolInput", "arguments")
_PATH_KEYS = ("file_path", "filePath", "path", "absolute_path", "notebook_path", "target_file", "file")
_PATCH_LINE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$|^\*\*\* Move to: (.+)$", re.M)
_COMMAND_TOOLS = {"bash", "shell", "run_shell_command", "exec_command", "run_terminal_cmd", "local_shell"}
_READ_TOOLS = {"read", "read_file", "read_many_files", "view", "notebookread"}


def _first_str(payload: dict[str, Any], keys: Iterable[str]) -> str:
    for key in keys:
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def tool_input_of(payload: dict[str, Any]) -> dict[str, Any]:
    """The arguments of the tool call a payload reports ({} when none)."""
    for key in _INPUT:
        value = payload.get(key)
        if isinstance(value, dict):
            return value
    return {}


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def tool_paths(tool: str, tool_input: dict[str, Any]) -> list[tuple[str, str]]:
    """``(action, path)`` for the files a tool call reads or modifies, as its input names them."""
    name = tool.lower().rsplit("__", 1)[-1].rsplit(":", 1)[-1]
    if "apply_patch" in name or any("*** Begin Patch" in s for s in _strings(tool_input)):
        found = [a or b for s in _strings(tool_input) for a, b in _PATCH_LINE.findall(s)]
        return [("file.modified", p.strip()) for p in dict.fromkeys(found) if p.strip()]
    path = _first_str(tool_input, _PATH_KEYS)
    if not path:
        return []
    if name in _READ_TOOLS or name.startswith("read"):
        return [("file.read", path)]
    if any(word in name for word in ("edit", "write", "replace", "create", "patch", "delete", "multiedit")):
        return [("file.modified", path)]
    return []


def _command(tool: str, tool_input: dict[str, Any]) -> str:
    if tool.lower() not in _COMMAND_TOOLS:
        return ""
    value = tool_input.get("command") or tool_input.get("cmd")
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return value if isinstance(value, str) else ""


_OUTPUT = ("tool_response", "tool_output", "toolResult", "result", "output")
OUTPUT_SCANNED = 65_536  # characters of a command's output looked at for secrets (hive.sidecar.presence.observe)


def command_output(payload: dict[str, Any]) -> str:
    """What a shell command printed, as the harness reported it after the call (its first
    :data:`OUTPUT_SCANNED` characters); "" when it reported none."""
    parts: list[str] = []
    size = 0
    for key in _OUTPUT:
        for text in _strings(payload.get(key)):
            parts.append(text[: OUTPUT_SCANNED - size])
            size += len(parts[-1])
            if size >= OUTPUT_SCANNED:
                return "\n".join(parts)
    return "\n".join(parts)


def _exit_code(payload: dict[str, Any]) -> int | None:
    for holder in (payload.get("tool_response"), payload.get("tool_output"), payload):
        if isinstance(holder, dict):
            for key in ("exit_code", "exitCode", "returncode"):
                value = holder.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
    return None


def _method(harness: str) -> str:
    """How ``harness``'s events reach hive, as its descriptor says (``Presence.via``): ``plugin`` or ``hook``."""
    try:
        return "plugin" if registry.harness(harness).presence().via == "plugin" else "hook"
    except KeyError:  # not a registered harness: nothing says a plugin reports for it
        return "hook"


def _failed_without_result(payload: dict[str, Any]) -> bool:
    """A call reported as failed, with only its error (Claude Code's PostToolUseFailure): it changed
    none of the files it names, and its exit code is unknown, so no file or command record follows
    from it (a failed Edit is no overlap; a failed ``git commit`` is no commit)."""
    return isinstance(payload.get("error"), str) and not any(
        k in payload for k in ("tool_response", "tool_output", "toolResult", "result")
    )


def normalize(
    harness: str, event: str, payload: dict[str, Any], session: str, cwd: str, at: float | None = None
) -> list[Event]:
    """The records one hook call stands for."""
    action = ACTIONS.get(event)
    if action is None:
        return []
    at = time.time() if at is None else at
    method = _method(harness)
    tool = _first_str(payload, ("tool_name", "tool", "toolName"))
    call_id = _first_str(payload, _CALL_ID) if tool else ""
    base = Event(
        at=at, session=session, harness=harness, action=action, tool=tool, call_id=call_id, cwd=cwd, method=method
    )
    if not tool:
        return [base]
    tool_input = tool_input_of(payload)
    detail = detail_json(tool_input)
    out = [Event(**{**base.__dict__, "detail": detail, "exit_code": _exit_code(payload)})]
    if event != "tool.after" or _failed_without_result(payload):
        return out  # what a call did is known once it ran: derived records come from tool.after only
    for kind, path in tool_paths(tool, tool_input):
        out.append(Event(**{**base.__dict__, "action": kind, "path": path, "fidelity": "inferred"}))
    command = _command(tool, tool_input)
    if command:
        out.append(
            Event(
                **{
                    **base.__dict__,
                    "action": "command.executed",
                    "command": command,
                    "exit_code": _exit_code(payload),
                    "fidelity": "inferred",
                }
            )
        )
    return out
