"""The standard reply shapes, as the fallback implementation of ``hive_reply``.

Most harnesses copied Claude Code's hook contract, so a harness plugin names a shape in its
``HookPoint.inject`` and implements ``hive_reply`` only for something of its own.
"""

from __future__ import annotations

import json
from typing import Any

from .descriptor import HookPoint
from .hookspecs import hookimpl


def render(point: HookPoint, text: str) -> str | None:
    """The stdout for ``point.inject`` carrying ``text``, or None for an unknown shape."""
    if point.inject == "additional_context":
        return json.dumps({"hookSpecificOutput": {"hookEventName": point.native, "additionalContext": text}})
    if point.inject == "stop_block":
        return json.dumps({"decision": "block", "reason": text})
    if point.inject == "stderr_block":  # the hook client writes it to stderr and exits 2
        return text
    if point.inject == "followup_message":
        return json.dumps({"followup_message": text})
    return None


@hookimpl(trylast=True)
def hive_reply(harness: str, point: HookPoint, text: str, payload: dict[str, Any]) -> str | None:
    if not text:
        return point.no_opinion
    return render(point, text)
