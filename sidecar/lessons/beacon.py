"""Import: lessons from a Beacon ``memory.db`` (``beacon.learning.v1`` records), as proposals with their evidence.

Beacon keeps memory in an SQLite file, ``~/.beacon/endpoint/memory.db`` in user mode, with tables
``evaluations``, ``candidates`` and ``memories``: a few denormalised columns and the full record as
JSON (seed Part 2 §7.2, §7.5). The exact columns are not a contract, so every text column of those
two tables is tried and a record counts when it is a JSON object whose ``schema_version`` names
``beacon.learning.v1``.

What comes in:

- approved memories that nothing superseded, and candidates still waiting for review; a candidate
  that was approved is its memory, and rejected or superseded ones stay out;
- never a scored candidate whose body is still the evaluator's placeholder: Beacon's own skill
  says not to approve it, and it holds no lesson;
- never as verified: Beacon records neither who approved nor a signature (§7.6), so every import
  is a proposal that goes to hive's reviewer like any other.

The file is opened read-only, and nothing in it is changed.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.errors import BadRequest, NotFound
from ..base.wire import parse

SCHEMA = "beacon.learning.v1"
TABLES = ("memories", "candidates")
KINDS = {"workflow", "correction", "debugging_pattern", "gotcha", "convention"}
PLACEHOLDER = "The evaluator returned scores with no rationale"
TEXT_LIMIT = 1200
MAX_RECORDS = 10_000
CUT = " […]"


def default_path() -> Path:
    return Path.home() / ".beacon" / "endpoint" / "memory.db"


@dataclass(frozen=True)
class Imported:
    """One Beacon record, as the fields of a hive proposal."""

    beacon_id: str
    source: str  # "memory" or "candidate"
    kind: str
    text: str
    applicability: str
    tags: tuple[str, ...]
    evidence: tuple[dict[str, str], ...]
    remote_url: str = ""
    project_path: str = ""
    created_at: str = ""


@dataclass
class Report:
    found: list[Imported] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # {"id", "reason"}


def _get(record: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in record:
            return record[name]
    return None


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(CUT)].rstrip() + CUT


def _records(db: sqlite3.Connection) -> list[tuple[str, dict[str, Any]]]:
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    found: list[tuple[str, dict[str, Any]]] = []
    for table in TABLES:
        if table not in tables:
            continue
        for row in db.execute(f'SELECT * FROM "{table}" LIMIT ?', (MAX_RECORDS,)):  # the table names are constants
            for value in row:
                if not isinstance(value, str) or not value.lstrip().startswith("{"):
                    continue
                record = parse(value)
                if not isinstance(record, dict):
                    continue
                version = _get(record, "schema_version", "SchemaVersion", "schemaVersion")
                if isinstance(version, str) and SCHEMA in version:
                    found.append((table, record))
                    break
    return found


def _evidence(record: dict[str, Any]) -> tuple[dict[str, str], ...]:
    out = []
    for item in _get(record, "evidence", "Evidence") or []:
        if not isinstance(item, dict):
            continue
        trace = _text(_get(item, "trace_id", "TraceID", "traceId"))
        if not trace:
            continue
        events = [e for e in (_get(item, "event_ids", "EventIDs", "eventIds") or []) if isinstance(e, str)]
        ref = f"beacon:{trace}" + (f"#{','.join(events[:20])}" if events else "")
        summary = _text(_get(item, "summary", "Summary"))
        out.append({"kind": "trace", "ref": ref[:500], "summary": summary[:300]})
    return tuple(out)


def convert(table: str, record: dict[str, Any]) -> tuple[Imported | None, str]:
    """A Beacon record as a proposal, or None and the reason it stays out."""
    record_id = _text(_get(record, "id", "ID")) or "?"
    if table == "memories":
        if _text(_get(record, "superseded_by", "SupersededBy", "supersededBy")):
            return None, "superseded in Beacon"
        source = "memory"
    else:
        state = _text(_get(record, "state", "State"))
        if state != "candidate":
            return None, f"a {state or 'stateless'} candidate (approved ones come in as their memory)"
        source = "candidate"
    kind = _text(_get(record, "kind", "Kind"))
    if kind not in KINDS:
        return None, f"unknown kind {kind!r}"
    title = _text(_get(record, "title", "Title"))
    body = _text(_get(record, "body", "Body"))
    if PLACEHOLDER in body:
        return None, "the evaluator's placeholder body: no lesson text was ever written"
    if not (title or body):
        return None, "no text"
    evidence = _evidence(record)
    if not evidence:
        return None, "no evidence"
    text = body if not title or body.startswith(title) else f"{title.rstrip('.')}. {body}".strip()
    tags = tuple(t.strip()[:40] for t in (_get(record, "tags", "Tags") or []) if isinstance(t, str) and t.strip())
    project = _get(record, "project", "Project")
    project = project if isinstance(project, dict) else {}
    return Imported(
        beacon_id=record_id,
        source=source,
        kind=kind,
        text=_clip(text, TEXT_LIMIT),
        applicability=_clip(_text(_get(record, "applicability", "Applicability")), 500),
        tags=tags[:20],
        evidence=evidence,
        remote_url=_text(_get(project, "remote_url", "RemoteURL", "remoteUrl")),
        project_path=_text(_get(project, "path", "Path")),
        created_at=_text(_get(record, "created_at", "CreatedAt", "createdAt")),
    ), ""


def read(path: str | Path | None = None) -> Report:
    """Every Beacon record in ``path`` that can come in as a proposal, and why the others cannot."""
    db_path = Path(path) if path else default_path()
    if not db_path.is_file():
        raise NotFound(f"no Beacon memory.db at {db_path}")
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise BadRequest(f"{db_path} cannot be opened as SQLite: {exc}") from exc
    report = Report()
    try:
        records = _records(db)
    except sqlite3.DatabaseError as exc:
        raise BadRequest(f"{db_path} is not a Beacon memory.db: {exc}") from exc
    finally:
        db.close()
    seen: set[str] = set()
    for table, record in records:
        imported, reason = convert(table, record)
        if imported is None:
            report.skipped.append({"id": _text(_get(record, "id", "ID")) or "?", "reason": reason})
        elif imported.text not in seen:
            seen.add(imported.text)
            report.found.append(imported)
    return report
