"""The TypeScript plugins hive puts inside harnesses that run plugins instead of hooks (opencode, pi).

Each is its template with the one sidecar client both share (``sidecar_client.ts``) written in
place of the template's ``// __SIDECAR_CLIENT__`` line, and each ``__NAME__`` placeholder
replaced by a value written as JSON (the hive argv, pi's tool table). One client, so a fix to how a plugin
talks to the sidecar reaches both harnesses.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

CLIENT = Path(__file__).with_name("sidecar_client.ts")
CLIENT_LINE = "// __SIDECAR_CLIENT__"


def render(template: Path, values: Mapping[str, Any], tables: Collection[str] = ()) -> str:
    """``template`` with the sidecar client written in and ``__NAME__`` replaced by ``values[NAME]``
    as JSON: on one line, or for the names in ``tables`` indented, for a person to read.

    Raises:
        ValueError: the client line or a placeholder is not in the text exactly once.
    """
    text = template.read_text(encoding="utf-8")
    if text.splitlines().count(CLIENT_LINE) != 1:
        raise ValueError(f"{template.name} must hold the line {CLIENT_LINE!r} exactly once")
    text = text.replace(CLIENT_LINE, CLIENT.read_text(encoding="utf-8").rstrip("\n"))
    for name, value in values.items():
        placeholder = f"__{name}__"
        if text.count(placeholder) != 1:
            raise ValueError(f"{template.name} and {CLIENT.name} must hold {placeholder} exactly once")
        text = text.replace(placeholder, json.dumps(value, ensure_ascii=False, indent=2 if name in tables else None))
    return text
