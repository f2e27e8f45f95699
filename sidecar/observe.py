"""Observation: every hook becomes normalized events, and the events feed presence and overlap notices.

The ``hook`` op (:mod:`hive.sidecar.hooks`) hands each identified hook here with its normalized
point. :func:`ingest` turns it into records of the append-only ``events`` table (seed Part 2 §3–§5):

- one record per action (``session.started``, ``prompt.submitted``, ``tool.invoked``,
  ``tool.completed``, ``turn.stopped``, ``session.ended``), plus the ones a tool call implies:
  ``file.read`` / ``file.modified`` for the paths in its input, ``command.executed`` for a shell
  command. Provenance: ``method`` is how it was collected (hook, plugin), ``fidelity`` is
  ``observed`` when the harness named the action and ``inferred`` when hive derived it.
- secrets are redacted before anything is stored (:func:`clean`), redaction before the cap so a
  cut never leaves half a secret behind.
- the same tool call reported twice is stored once: a unique index over (session, action,
  call id, path) for records that carry a call id, with ``INSERT OR IGNORE``.

Presence is derived from the same events, in memory (it is rebuilt by the next hook): a state
(busy, idle, waiting_approval), the paths touched in the last 30 minutes (relative to the repo,
at most 32, credential files filtered out by :func:`sensitive`), the HEAD commit (read from the
repository's files) and whether the session is *unmanaged* (found on disk by
:mod:`hive.sidecar.discover`, with no hook or client of hive's). The mesh sends it to peers (it is
poked on every change); ``who`` shows it.

Overlap: when a session modifies a path that another live session (here or on a teammate's
machine) modified in the same normalized repo within 30 minutes, each of the two is told once
per (pair, path) per window, through the gate (source ``overlap``) when it runs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import anyio

from . import doing
from .defang import one_line
from .errors import BadRequest
from .render import Message
from .ulid import new_ulid

if TYPE_CHECKING:
    from hive.integrations.descriptor import HookPoint, Presence

    from .server import Connection, Sidecar
    from .sessions import Session
    from .store import Store

log = logging.getLogger("hive.sidecar.observe")

WINDOW = 30 * 60.0  # files count as touched, and overlaps as live, for half an hour
MAX_FILES = 32
STRING_CAP = 4096  # bytes of one stored string, after redaction
DETAIL_CAP = 2048
OVERLAP_SENDER = "hive/overlap"
REDACTED = "[REDACTED]"

ACTIONS = {
    "session.start": "session.started",
    "prompt.submitted": "prompt.submitted",
    "tool.before": "tool.invoked",
    "tool.after": "tool.completed",
    "turn.stop": "turn.stopped",
    "session.end": "session.ended",
}
BUSY = {"prompt.submitted", "tool.invoked", "tool.completed", "file.read", "file.modified", "command.executed"}
IDLE = {"turn.stopped", "session.started"}
PLUGIN_HARNESSES = {"opencode", "pi"}  # their events come from a plugin, not a hook command

# ---- redaction -------------------------------------------------------------------------------

# Provider token prefixes: the prefix is kept so a reader still sees what kind of secret was there.
_PREFIXES = ("github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "glpat-", "sk-ant-", "sk-proj-", "sk-",
             "xoxb-", "xoxp-", "xoxa-", "xoxr-", "AKIA", "ASIA", "AIza", "npm_", "hf_", "pypi-")
_TOKEN = re.compile("(" + "|".join(re.escape(p) for p in _PREFIXES) + r")[A-Za-z0-9_\-]{8,}")
_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S)
_AUTH = re.compile(r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*|cookie\s*:\s*)"
                   r"(?!(?:(?:bearer|basic|token|digest|negotiate)\s+)?\[REDACTED\])"
                   r"(?:(bearer|basic|token|digest|negotiate)\s+)?[^\s\"',;]+")
_URL_CREDS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@:]+:[^\s/@]+@")
# A shell word as a value: quoted (kept quoted) or bare.
_VALUE = r"(?:\"(?:[^\"\\]|\\.)*\"|'[^']*'|(?![\-\[])[^\s\"'`;&|()<>]+)"
# Names of secrets. Strong words count anywhere in a name (GH_TOKEN, mysecret, clientSecret);
# weak ones only as a whole part of it (DB_PASS, BASIC_AUTH, STRIPE_KEY, but not bypass or PWD).
_STRONG = r"(?:secret|token|passw(?:or)?d|passphrase|credentials?|api[_\-]?key|private[_\-]?key|access[_\-]?key)s?"
_WEAK = {"pass", "pwd", "auth", "key", "cookie", "pw", "pin"}
_NOT_SECRET = {"pwd", "oldpwd", "key", "pass", "auth", "pin"}  # a name alone: the shell's folder, a word
# A last part saying the value is where a secret is, or about it, not the secret (--password-stdin).
_ABOUT = {"stdin", "file", "path", "dir", "env", "prompt", "url", "uri", "endpoint", "host", "port", "user",
          "username", "name", "type", "length", "len", "policy", "reset", "expiry", "expires", "ttl", "id", "count"}
_STRONG_RE = re.compile(f"(?i){_STRONG}(?![a-z])")
_PARTS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_NAME = r"[^\W\d][\w.\-]*"  # any letters: a look-alike that case folding reads as ASCII (ſ) counts
# NAME=value, NAME: value, "name": "value" (JSON, YAML, env files, headers).
_LABELLED = re.compile(r"(?<![\w\-])(" + _NAME + r")(\"?'?\s*[:=]\s*\"?'?)((?<=\")(?:[^\"\\]|\\.)*(?=\")"
                       r"|(?<=')[^']*(?=')|[^\s\"',;&]+)")
# --password=x, --password x, -password x, --db-token "x y".
_OPTION = re.compile(r"(?<![\w\-])(--?" + _NAME + r")(=|\s+)(" + _VALUE + ")")
# `aws configure set aws_secret_access_key V`, `npm config set authToken V`, `gh secret set N --body V`.
_SET = re.compile(r"(?i)\b((?:set|config:set|secret\s+set\s+\S+)\s+)(--body|-b|[^\s=\"']+)(\s+)(" + _VALUE + ")")
# Programs whose short options take a password: -pPW for mysql (a separate word is a database
# there), -p PW for sshpass and registry logins, -a PW for redis-cli, -P PW for zip.
_SHORT = {
    "mysql": ("p", False), "mysqldump": ("p", False), "mysqladmin": ("p", False), "mysqlimport": ("p", False),
    "mysqlshow": ("p", False), "mysqlcheck": ("p", False), "mysqlpump": ("p", False), "mysqlsh": ("p", False),
    "mariadb": ("p", False), "mariadb-dump": ("p", False), "mariadb-admin": ("p", False), "7z": ("p", False),
    "7za": ("p", False), "sshpass": ("p", True), "redis-cli": ("a", True), "mongo": ("p", True),
    "mongosh": ("p", True), "mongodump": ("p", True), "mongorestore": ("p", True), "zip": ("P", True),
    "unzip": ("P", True), "docker login": ("p", True), "podman login": ("p", True), "buildah login": ("p", True),
    "skopeo login": ("p", True), "helm registry login": ("p", True), "oras login": ("p", True),
}
_PROGRAM = re.compile(r"(?<![\w./\-])(?:[\w./\-]*/)?(" + "|".join(re.escape(p) for p in sorted(_SHORT, key=len,
                      reverse=True)) + r")(?![\w\-])([^|;&\n]*)")
_USER_PASS = re.compile(r"(?<![\w\-])((?:-u|--user|--proxy-user)(?:=|\s+)[\"']?[^\s:\"']+:)(?!\[REDACTED\])"
                        r"([^\s\"']+)")
_OPENSSL_PASS = re.compile(r"\bpass:(" + _VALUE + ")")


def _secret_name(name: str) -> bool:
    """Whether ``name`` names a secret (see _STRONG and _WEAK)."""
    parts = _PARTS.findall(name)
    if name.casefold() in _NOT_SECRET or not parts or parts[-1].casefold() in _ABOUT:
        return False
    if _STRONG_RE.search(name):
        return True
    return any(part.casefold() in _WEAK for part in parts)


def _hidden(value: str) -> str:
    """``value`` redacted, its quotes and any provider prefix kept."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[0] + _keep_prefix(value[1:-1]) + value[0]
    return _keep_prefix(value)


def _named(match: re.Match[str], name: int, value: int) -> str:
    if not _secret_name(match.group(name).lstrip("-")) or match.group(value).startswith(REDACTED):
        return match.group(0)
    start, end = match.span(value)
    base = match.start()
    return match.group(0)[:start - base] + _hidden(match.group(value)) + match.group(0)[end - base:]


def _short_option(match: re.Match[str]) -> str:
    letter, separate = _SHORT[match.group(1)]
    rule = rf"(?<!\S)(-{letter})" + (r"(\s*)" if separate else "()") + "(" + _VALUE + ")"
    rest = re.sub(rule, lambda m: m.group(1) + m.group(2) + _hidden(m.group(3)) if m.group(3) != REDACTED
                  else m.group(0), match.group(2))
    # The rest of the line may run another such program (`mysql -pX; ...` has no separator in
    # `mysql -pX sshpass -p Y`): its options follow its own rule.
    rest = _PROGRAM.sub(_short_option, rest)
    return match.group(0)[: match.start(2) - match.start()] + rest


def _keep_prefix(value: str) -> str:
    if value.startswith(REDACTED):
        return value
    for prefix in _PREFIXES:
        if value.startswith(prefix):
            return prefix + REDACTED
    return REDACTED


# One cheap pass that every rule below needs to match first: most strings skip the rules.
# Plain words searched in the case-folded text: a case-insensitive alternation costs ~0.6 µs per
# character, this about 0.03 (casefold, unlike lower, also maps the look-alikes that re's
# IGNORECASE matches, such as "ſ" for "s").
_WORDS = ("private_key", "private-key", "private key", "privatekey", "authorization", "://", "secret", "token",
          "passw", "api_key", "api-key", "apikey", "access_key", "access-key", "accesskey", "credential",
          "pass", "pwd", "auth", "key", "cookie", "pw", "pin", *_SHORT, "-u", "--user", "--proxy-user",
          *(p.casefold() for p in _PREFIXES))
_MAYBE = re.compile("|".join(re.escape(w) for w in sorted(set(_WORDS), key=len, reverse=True)))


def redact(text: str) -> str:
    """Secrets in ``text`` replaced by ``[REDACTED]`` (provider prefixes kept: ``ghp_[REDACTED]``).

    Redacting what is already redacted changes nothing, so a value may safely pass twice."""
    if not text or not _MAYBE.search(text.casefold()):
        return text
    text = _PEM.sub(lambda m: f"-----BEGIN {m.group(1)}PRIVATE KEY-----{REDACTED}", text)
    text = _AUTH.sub(lambda m: m.group(1) + (m.group(2) + " " if m.group(2) else "") + REDACTED, text)
    text = _URL_CREDS.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _LABELLED.sub(lambda m: _named(m, 1, 3), text)
    text = _OPTION.sub(lambda m: _named(m, 1, 3), text)
    text = _SET.sub(lambda m: _named(m, 2, 4) if m.group(2) not in ("--body", "-b") else
                    m.group(1) + m.group(2) + m.group(3) + _hidden(m.group(4)), text)
    text = _PROGRAM.sub(_short_option, text)
    text = _USER_PASS.sub(lambda m: m.group(1) + _hidden(m.group(2)), text)
    text = _OPENSSL_PASS.sub(lambda m: "pass:" + _hidden(m.group(1)), text)
    return _TOKEN.sub(lambda m: m.group(1) + REDACTED, text)


# What is read past the cut: longer than any secret the rules match whole, so one that starts
# before the cut is redacted whole (a private key block with no end is redacted to the end).
_CUT_MARGIN = 4096


def clean(text: str, cap: int = STRING_CAP) -> str:
    """Redacted, then cut to ``cap`` bytes (never the other way round)."""
    text = redact(text[: cap + _CUT_MARGIN])  # the rest is cut anyway: never redact a megabyte for 4 KB
    if len(text) * 4 <= cap:  # no character takes more than 4 bytes: short enough without encoding
        return text
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text
    return data[:cap].decode("utf-8", "ignore") + "…"


def scrub(value: Any, key: str = "") -> Any:
    """A JSON value with every string cleaned, and values under secret-looking keys redacted whole."""
    if key and _secret_name(key) and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return _keep_prefix(str(value))
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {str(k)[:200]: scrub(v, str(k)) for k, v in list(value.items())[:100]}
    if isinstance(value, list):
        return [scrub(v) for v in value[:100]]
    return value


def _shortened(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "…"
    if isinstance(value, dict):
        return {k: _shortened(v, limit) for k, v in list(value.items())[:limit]}
    if isinstance(value, list):
        return [_shortened(v, limit) for v in value[:limit]]
    return value


def detail_json(value: Any, cap: int = DETAIL_CAP) -> str:
    """``value`` scrubbed and written as JSON of at most ``cap`` bytes: always valid JSON, since the
    strings are cut before writing (never the text after), and redacted before they are cut."""
    value = scrub(value)
    text = json.dumps(value, ensure_ascii=False)
    for limit in (512, 128, 32, 8):
        if len(text.encode("utf-8")) <= cap:
            return text
        text = json.dumps(_shortened(value, limit), ensure_ascii=False)
    return text if len(text.encode("utf-8")) <= cap else '{"cut": true}'


def _stored_detail(detail: str) -> str:
    """A detail as stored: JSON is scrubbed value by value (redacting its text would break its escapes)."""
    if not detail:
        return detail
    try:
        value = json.loads(detail)
    except ValueError:
        return clean(detail, DETAIL_CAP)
    return detail_json(value)


# ---- the path filter -------------------------------------------------------------------------

_SENSITIVE_NAMES = {".env", ".netrc", ".pgpass", ".git-credentials", "credentials", "id_rsa", "id_dsa",
                    "id_ecdsa", "id_ed25519", ".npmrc", ".pypirc"}
_SENSITIVE_SUFFIXES = (".pem", ".key", ".p12", ".pfx")


def sensitive(path: str) -> bool:
    """A credential file: never in presence, never sent to a peer."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if not parts:
        return False
    name = parts[-1].lower()
    if name in _SENSITIVE_NAMES or name.startswith(".env."):
        return True
    if name.endswith(_SENSITIVE_SUFFIXES):
        return True
    lowered = [p.lower() for p in parts]
    # Anything under ~/.ssh, ~/.aws, ~/.gnupg, and git's credential stores.
    if any(p in (".ssh", ".aws", ".gnupg") for p in lowered):
        return True
    return "git" in lowered and "credentials" in name


# ---- normalizing -----------------------------------------------------------------------------

_CALL_ID = ("tool_use_id", "call_id", "callId", "toolCallId", "tool_call_id", "toolUseId", "id")
_INPUT = ("tool_input", "args", "input", "toolInput", "arguments")
_PATH_KEYS = ("file_path", "filePath", "path", "absolute_path", "notebook_path", "target_file", "file")
_PATCH_LINE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$|^\*\*\* Move to: (.+)$", re.M)
_COMMAND_TOOLS = {"bash", "shell", "run_shell_command", "exec_command", "run_terminal_cmd", "local_shell"}
_READ_TOOLS = {"read", "read_file", "read_many_files", "view", "notebookread"}


@dataclass(frozen=True)
class Event:
    """One normalized record, as stored."""

    at: float
    session: str
    harness: str
    action: str
    tool: str = ""
    call_id: str = ""
    path: str = ""
    command: str = ""
    exit_code: int | None = None
    cwd: str = ""
    method: str = "hook"
    fidelity: str = "observed"
    detail: str = ""

    def row(self) -> tuple[Any, ...]:
        return (self.at, self.session, self.harness, self.action, clean(self.tool, 200), clean(self.call_id, 200),
                clean(self.path, 1024), clean(self.command), self.exit_code, clean(self.cwd, 1024), self.method,
                self.fidelity, _stored_detail(self.detail))


def _first_str(payload: dict[str, Any], keys: Iterable[str]) -> str:
    for key in keys:
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _tool_input(payload: dict[str, Any]) -> dict[str, Any]:
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


def _exit_code(payload: dict[str, Any]) -> int | None:
    for holder in (payload.get("tool_response"), payload.get("tool_output"), payload):
        if isinstance(holder, dict):
            for key in ("exit_code", "exitCode", "returncode"):
                value = holder.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
    return None


def _failed_without_result(payload: dict[str, Any]) -> bool:
    """A call reported as failed, with only its error (Claude Code's PostToolUseFailure): it changed
    none of the files it names, and its exit code is unknown, so no file or command record follows
    from it (a failed Edit is no overlap; a failed ``git commit`` is no commit)."""
    return isinstance(payload.get("error"), str) and not any(
        k in payload for k in ("tool_response", "tool_output", "toolResult", "result"))


def normalize(harness: str, event: str, payload: dict[str, Any], session: str, cwd: str,
              at: float | None = None) -> list[Event]:
    """The records one hook call stands for."""
    action = ACTIONS.get(event)
    if action is None:
        return []
    at = time.time() if at is None else at
    method = "plugin" if harness in PLUGIN_HARNESSES else "hook"
    tool = _first_str(payload, ("tool_name", "tool", "toolName"))
    call_id = _first_str(payload, _CALL_ID) if tool else ""
    base = Event(at=at, session=session, harness=harness, action=action, tool=tool, call_id=call_id, cwd=cwd,
                 method=method)
    if not tool:
        return [base]
    tool_input = _tool_input(payload)
    detail = detail_json(tool_input)
    out = [Event(**{**base.__dict__, "detail": detail, "exit_code": _exit_code(payload)})]
    if event != "tool.after" or _failed_without_result(payload):
        return out  # what a call did is known once it ran: derived records come from tool.after only
    for kind, path in tool_paths(tool, tool_input):
        out.append(Event(**{**base.__dict__, "action": kind, "path": path, "fidelity": "inferred"}))
    command = _command(tool, tool_input)
    if command:
        out.append(Event(**{**base.__dict__, "action": "command.executed", "command": command,
                            "exit_code": _exit_code(payload), "fidelity": "inferred"}))
    return out


# ---- storage ---------------------------------------------------------------------------------

COLUMNS = ("at", "session", "harness", "action", "tool", "call_id", "path", "command", "exit_code", "cwd",
           "method", "fidelity", "detail")


MAX_ROWS = 32766 // len(COLUMNS)  # SQLite's bound on parameters in one statement


@dataclass
class _Batch:
    events: list[Event]
    done: anyio.Event
    error: BaseException | None = None


class _Writer:
    """Group insert: whoever writes while no write runs becomes the flusher, and every event that
    arrives meanwhile goes into the next single multi-row insert and commit, so a burst of hooks
    costs a few statements and fsyncs, not one each. No task of its own, so nothing polls."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.next = _Batch([], anyio.Event())
        self.flushing = False

    async def add(self, events: Sequence[Event]) -> None:
        mine = self.next
        mine.events.extend(events)
        if not self.flushing:
            self.flushing = True
            try:
                while self.next.events:
                    batch, self.next = self.next, _Batch([], anyio.Event())
                    try:
                        await self._insert(batch.events)
                    except Exception as exc:
                        batch.error = exc
                    finally:
                        batch.done.set()
            finally:
                self.flushing = False
        await mine.done.wait()
        if mine.error is not None:
            raise mine.error

    async def _insert(self, events: list[Event]) -> None:
        statements = []
        for start in range(0, len(events), MAX_ROWS):
            chunk = events[start:start + MAX_ROWS]
            marks = ", ".join(["(" + ", ".join("?" * len(COLUMNS)) + ")"] * len(chunk))
            params = [value for e in chunk for value in e.row()]
            # A call already stored under the same (session, action, call id, path) is ignored: dedupe.
            statements.append((f"INSERT OR IGNORE INTO events ({', '.join(COLUMNS)}) VALUES {marks}", params))
        await self.store.write(statements)


_writers: dict[int, _Writer] = {}


async def store_events(store: Store, events: Sequence[Event]) -> None:
    """Append ``events``; committed (group insert and group commit) when this returns."""
    if not events:
        return
    writer = _writers.get(id(store))
    if writer is None or writer.store is not store:
        writer = _writers[id(store)] = _Writer(store)
    await writer.add(events)


# ---- presence --------------------------------------------------------------------------------


@dataclass
class Observed:
    """What the events say about one session right now."""

    state: str = ""
    since: float = 0.0
    head: str = ""
    files: dict[str, tuple[float, bool]] | None = None  # repo-relative path -> (last touched, modified)
    newest: str = ""  # the path touched last


OBSERVED: dict[str, Observed] = {}
# Sessions found on disk (hive.sidecar.discover) that no hook or client has spoken for yet.
UNMANAGED: set[str] = set()
# (session key, other session's address, path) -> when it was told; once per window.
_TOLD: dict[tuple[str, str, str], float] = {}


@functools.lru_cache(maxsize=4096)
def _presentable(rel: str, path: str) -> bool:
    """A path that may show in presence: inside the repo and not a credential file (hooks name the
    same few paths over and over, so the answer is cached)."""
    return not (sensitive(rel) or sensitive(path) or os.path.isabs(rel))


@functools.lru_cache(maxsize=4096)
def _relative(path: str, cwd: str, root: str) -> str:
    full = path if os.path.isabs(path) else os.path.normpath(os.path.join(cwd or root or "/", path))
    if root and (full == root or full.startswith(root.rstrip("/") + "/")):
        return os.path.relpath(full, root)
    return full


def recent_files(key: str, now: float | None = None, *, modified_only: bool = False) -> dict[str, float]:
    """Paths the session touched within the window, newest first, at most 32."""
    seen = OBSERVED.get(key)
    if seen is None or not seen.files:
        return {}
    now = time.time() if now is None else now
    items = [(p, at) for p, (at, mod) in seen.files.items() if now - at <= WINDOW and (mod or not modified_only)]
    items.sort(key=lambda item: -item[1])
    return dict(items[:MAX_FILES])


def presence_of(key: str) -> dict[str, Any]:
    """The fields this session adds to presence: state, files (with when, and whether modified), head."""
    seen = OBSERVED.get(key)
    unmanaged = key in UNMANAGED
    if seen is None:
        return {"state": "", "files": [], "head": "", "unmanaged": unmanaged}
    files = recent_files(key)
    return {"state": seen.state, "head": seen.head, "unmanaged": unmanaged,
            "files": [{"path": p, "at": round(at, 3), "edit": bool(seen.files and seen.files[p][1])}
                      for p, at in files.items() if not sensitive(p)]}


def sanitise_extra(item: dict[str, Any]) -> dict[str, Any]:
    """A peer's presence fields for one session, cut to shape; credential paths dropped here too."""
    state = str(item.get("state") or "")
    head = str(item.get("head") or "")
    files = []
    for f in (item.get("files") or [])[:MAX_FILES] if isinstance(item.get("files"), list) else []:
        if not isinstance(f, dict) or not isinstance(f.get("path"), str):
            continue
        path = one_line(f["path"], 300)
        at = f.get("at")
        if path and not sensitive(path) and isinstance(at, (int, float)):
            files.append({"path": path, "at": float(at), "edit": bool(f.get("edit"))})
    return {"state": state if state in ("busy", "idle", "waiting_approval") else "",
            "head": head if re.fullmatch(r"[0-9a-f]{7,64}", head) else "", "files": files,
            "unmanaged": item.get("unmanaged") is True}


_HEX = re.compile(r"[0-9a-f]{40,64}")


def read_head(root: str) -> str | None:
    """HEAD's commit read from the repository's files (a few small reads, no process): None when
    the files do not say (a reftable repository, a ref only git can resolve), and git is asked."""
    try:
        dotgit = Path(root, ".git")
        gitdir = dotgit
        if dotgit.is_file():  # a worktree or submodule: "gitdir: <path>"
            gitdir = (Path(root) / dotgit.read_text(encoding="utf-8").split(":", 1)[1].strip()).resolve()
        head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
        if _HEX.fullmatch(head):
            return head  # detached
        if not head.startswith("ref: refs/"):
            return None
        ref = head[5:]
        common = gitdir
        if (gitdir / "commondir").is_file():
            common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
        for folder in dict.fromkeys((gitdir, common)):
            with contextlib.suppress(FileNotFoundError):
                value = (folder / ref).read_text(encoding="utf-8").strip()
                return value if _HEX.fullmatch(value) else None
            with contextlib.suppress(FileNotFoundError):
                for line in (folder / "packed-refs").read_text(encoding="utf-8").splitlines():
                    sha, _, name = line.partition(" ")
                    if name == ref and _HEX.fullmatch(sha):
                        return sha
        # A branch with no commit yet has no ref anywhere; refs in a reftable only git reads.
        return None if (common / "reftable").exists() else ""
    except (OSError, IndexError, UnicodeDecodeError):
        return None


async def _git_head(root: str) -> str:
    if not root:
        return ""
    found = read_head(root)
    if found is not None:
        return found
    try:
        done = await anyio.run_process(["git", "-C", root, "rev-parse", "HEAD"], check=False)
    except OSError:
        return ""
    value = done.stdout.decode("ascii", "ignore").strip()
    return value if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", value) else ""


_ROOTS: dict[str, str] = {}


def _root(session: Session) -> str:
    """The repository folder around the session's cwd ("" outside one); cached, as hooks run often."""
    cwd = session.cwd
    if not cwd or not os.path.isabs(cwd):
        return ""
    if cwd not in _ROOTS:
        folder = Path(cwd)
        _ROOTS[cwd] = next((str(f) for f in (folder, *folder.parents) if (f / ".git").exists()), "")
    return _ROOTS[cwd]


async def ingest(sidecar: Sidecar, harness: str, point: HookPoint, payload: dict[str, Any], session: Session,
                 presence: Presence | None = None) -> list[Event]:
    """Store what one hook call says, update the session's presence, and look for overlaps.

    ``presence`` is the harness descriptor's: a point it lists under ``waiting_approval`` means an
    approval was asked (recorded as ``approval.requested``) and the session waits until the next
    busy or idle event answers it.
    """
    events = normalize(harness, point.event, payload, session.key, session.cwd)
    if not events:
        return []
    approval = ""
    if presence is not None and point.event in presence.waiting_approval:
        approval = "requested"
        events.append(Event(at=events[0].at, session=session.key, harness=harness, action="approval.requested",
                            tool=events[0].tool, call_id=events[0].call_id, cwd=session.cwd,
                            method=events[0].method, fidelity="inferred"))
    await store_events(sidecar.store, events)
    UNMANAGED.discard(session.key)  # a hook speaks for it: hive manages it now
    seen = OBSERVED.setdefault(session.key, Observed(files={}))
    before = (seen.state, seen.head)
    now = events[0].at
    actions = {e.action for e in events}
    if approval == "requested":
        seen.state, seen.since = "waiting_approval", now
    elif actions & BUSY:
        seen.state, seen.since = "busy", now
    elif actions & IDLE:
        seen.state, seen.since = "idle", now
    root = _root(session) or session.cwd
    modified: list[str] = []
    assert seen.files is not None
    # Presence changes with a new path, an edit flag, or a path moving to the front of the list
    # (files are listed newest first); touching the newest path again changes nothing to send.
    files_changed = False
    for e in events:
        if e.action in ("file.read", "file.modified") and e.path:
            rel = _relative(e.path, session.cwd, root)
            if not _presentable(rel, e.path):
                continue  # credentials, and files outside the repo: recorded locally, never in presence
            had = seen.files.get(rel)
            edit = e.action == "file.modified" or (had is not None and had[1])
            files_changed = files_changed or had is None or had[1] != edit or seen.newest != rel
            seen.files[rel] = (now, edit)
            seen.newest = rel
            if e.action == "file.modified":
                modified.append(rel)
    if point.event in ("session.start", "prompt.submitted", "turn.stop") or "command.executed" in actions:
        seen.head = await _git_head(root if _root(session) else "")
    if point.event == "session.end":
        OBSERVED.pop(session.key, None)
        doing.doing_of(sidecar).forget(session.key)
    else:
        doing.doing_of(sidecar).follow(session)
        if events[0].tool:
            await doing.from_tool_call(sidecar, session, [_tool_input(payload)])
    if files_changed or (seen.state, seen.head) != before:
        sidecar.mesh.poke()  # the mesh sends presence when it changed
    if modified:
        await _overlaps_for_local(sidecar, session, modified, now)
    if "command.executed" in actions:
        from .gate import observed  # test runs and commits: records and breakpoints for the gate

        try:
            await observed(sidecar, session, events)
        except Exception:  # the gate's trouble must not cost the hook its reply
            log.exception("the gate could not take the commands of %s", session.key)
    return events


# ---- overlap ---------------------------------------------------------------------------------


def _repo_of(session: Session) -> str:
    return session.repo or _root(session)


async def _overlaps_for_local(sidecar: Sidecar, session: Session, paths: list[str], now: float) -> None:
    repo = _repo_of(session)
    if not repo:
        return
    me = sidecar.sessions.address(session)
    for other in list(sidecar.sessions.by_key.values()):
        if other.key == session.key or not sidecar.sessions.is_live(other, now) or _repo_of(other) != repo:
            continue
        theirs = recent_files(other.key, now, modified_only=True)
        them = sidecar.sessions.address(other)
        for path in paths:
            if path in theirs:
                await _notice(sidecar, session, them, path, theirs[path], repo, now)
                await _notice(sidecar, other, me, path, now, repo, now)
    for who, files in _remote_sessions(sidecar, session.repo):
        for path in paths:
            if path in files:
                await _notice(sidecar, session, who, path, files[path], repo, now)


def _remote_sessions(sidecar: Sidecar, repo: str) -> list[tuple[str, dict[str, float]]]:
    """Teammates' live sessions in ``repo`` (a normalized remote, so it means the same everywhere)."""
    if not repo:
        return []
    mesh = sidecar.mesh
    out = []
    now = time.time()
    for peer, presence in mesh.presence.items():
        member = mesh.team.member(peer)
        if member is None or not member.active or peer not in mesh.links:
            continue
        for s in presence.get("sessions", []):
            if s.get("repo") != repo:
                continue
            files = {f["path"]: f["at"] for f in s.get("files", []) if f.get("edit") and now - f["at"] <= WINDOW}
            if files:
                out.append((f"{member.person}/{s['name']}", files))
    return out


async def on_peer_presence(sidecar: Sidecar, peer: str) -> None:
    """A teammate's presence arrived: tell local sessions that modified a path one of theirs modified."""
    try:
        now = time.time()
        for session in list(sidecar.sessions.by_key.values()):
            if not session.repo or not sidecar.sessions.is_live(session, now):
                continue
            mine = recent_files(session.key, now, modified_only=True)
            if not mine:
                continue
            for who, files in _remote_sessions(sidecar, session.repo):
                for path in mine.keys() & files.keys():
                    await _notice(sidecar, session, who, path, files[path], session.repo, now)
    except Exception:
        log.exception("overlap check on peer presence failed")


async def _notice(sidecar: Sidecar, session: Session, other: str, path: str, when: float, repo: str,
                  now: float) -> None:
    told = _TOLD.get((session.key, other, path))
    if told is not None and now - told < WINDOW:
        return
    _TOLD[(session.key, other, path)] = now
    address = sidecar.sessions.address(session)
    ago = max(0, int((now - when) // 60))
    title = f"{one_line(other, 80)} also modified {one_line(path, 200)} ({ago} min ago)"
    body = (f"hive noticed that {one_line(other, 80)} modified {one_line(path, 200)} in {one_line(repo, 200)} "
            f"{ago} min ago, and this session modified it too. Coordinate with send_message to "
            f"\"{one_line(other, 80)}\" before the edits collide.")
    event = Event(at=now, session=session.key, harness=session.agent, action="overlap.noticed", path=path,
                  method="hook", fidelity="inferred", detail=json.dumps({"other": other, "repo": repo, "at": when}))
    await store_events(sidecar.store, [event])
    try:
        from .gate import Evidence, Item, gate_of

        gate = gate_of(sidecar)
    except Exception:  # no gate in this sidecar: deliver directly
        await deliver_notice(sidecar, session.key, address, title, body, other, path)
        return
    if "overlap" not in gate.deliverers:
        gate.register("overlap", lambda item, decision: _gate_deliver(sidecar, item))
    # The overlap is a record hive itself observed (both sessions' modify events), which is what
    # lets the gate rate it above info without taking the proposer's word for it.
    await gate.record("overlap", f"{repo}:{path}", "open")
    decision = await gate.offer(Item(
        source="overlap", person=sidecar.settings.person, session=address, title=title, body=body,
        evidence=(Evidence("overlap", f"{repo}:{path}"), Evidence("file", f"{repo}:{path}")),
        key=f"overlap:{repo}:{path}:{other}",
        proposer=OVERLAP_SENDER, data={"session": session.key, "other": other, "path": path},
    ))
    await store_events(sidecar.store, [Event(at=time.time(), session=session.key, harness=session.agent,
                                       action="overlap.offered", path=path, method="hook", fidelity="inferred",
                                       detail=json.dumps({"other": other, "outcome": decision.outcome,
                                                          "rule": decision.rule, "item": decision.item_id}))])


async def _gate_deliver(sidecar: Sidecar, item: Any) -> None:
    data = dict(item.data)
    await deliver_notice(sidecar, str(data.get("session") or ""), item.session, item.title, item.body,
                         str(data.get("other") or ""), str(data.get("path") or ""))


async def deliver_notice(sidecar: Sidecar, key: str, address: str, title: str, body: str, other: str,
                         path: str) -> None:
    """Put the notice in the session's mailbox (turn tier: shown at its next hook, recorded injected then)."""
    from .ask import deliver_local

    message = Message(id=new_ulid(), sender=OVERLAP_SENDER, sender_kind="hive", sender_agent="hive",
                      sender_repo="", recipient=address, reply_to=None, body=f"{title}\n{body}", wake=True,
                      sent_at=time.time())
    await deliver_local(sidecar, message, None)


async def injected(sidecar: Sidecar, key: str, ids: Sequence[str], channel: str, point: str) -> None:
    """Record that messages entered a session's model context: ``team.message.injected``, one event
    per message with its id, the session's tier and how it went in (``channel``: hook, push,
    plugin, mcp; ``point``: the hook event, or the push's way), so ``hive events`` answers what a
    model was shown. Recorded when the text left hive for the harness, never on deposit."""
    session = sidecar.sessions.by_key.get(key)
    if not ids or session is None:
        return
    now = time.time()
    await store_events(sidecar.store, [Event(
        at=now, session=key, harness=session.agent, action="team.message.injected", method=channel,
        fidelity="observed", detail=json.dumps({"id": i, "tier": session.tier, "channel": channel, "point": point}))
        for i in ids])


# ---- who ---------------------------------------------------------------------------------------


def describe_extra(sidecar: Sidecar, key: str | None, person: str, machine: str, name: str) -> dict[str, Any]:
    """``state``, ``files`` (paths) and ``head`` for one directory entry, local or a teammate's."""
    if key is not None:
        extra = presence_of(key)
        session = sidecar.sessions.by_key.get(key)
        extra["unmanaged"] = extra["unmanaged"] and not (session is not None and session.holders)
    else:
        extra = {"state": "", "files": [], "head": "", "unmanaged": False}
        mesh = sidecar.mesh
        for member in mesh.team.members():
            if member.person == person and member.machine == machine:
                for s in mesh.presence.get(member.key, {}).get("sessions", []):
                    if s.get("name") == name:
                        extra = {"state": s.get("state", ""), "files": s.get("files", []), "head": s.get("head", ""),
                                 "unmanaged": s.get("unmanaged") is True}
    return {"state": extra["state"], "head": extra["head"], "files": [f["path"] for f in extra["files"]],
            "unmanaged": extra["unmanaged"]}


# ---- ops ---------------------------------------------------------------------------------------


async def op_events(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Read the newest observed events (tool calls, files, commands) of this machine's sessions.

    Request: ``session`` (str, optional): a key, name or address; ``action`` (str, optional): one
    kind of event; ``limit`` (int, optional): how many, default 100, at most 10,000. Returns
    ``{"events": [{"id", "at", "session", "harness", "action", "tool", "call_id", "path", "command",
    "exit_code", "cwd", "method", "fidelity", "detail"}]}``, oldest first. Raises ``bad_request``
    for a ``limit`` that is not a number.
    """
    try:
        limit = min(max(int(request.get("limit") or 100), 1), 10_000)
    except (TypeError, ValueError) as exc:
        raise BadRequest("limit is a number") from exc
    where, params = [], []
    ref = request.get("session")
    if isinstance(ref, str) and ref:
        session = sidecar.sessions.by_key.get(ref) or sidecar.sessions.by_name(ref.rpartition("/")[2])
        where.append("session = ?")
        params.append(session.key if session else ref)
    action = request.get("action")
    if isinstance(action, str) and action:
        where.append("action = ?")
        params.append(action)
    sql = (f"SELECT id, {', '.join(COLUMNS)} FROM events {'WHERE ' + ' AND '.join(where) if where else ''} "
           "ORDER BY id DESC LIMIT ?")
    rows = await sidecar.store.fetchall(sql, (*params, limit))
    return {"events": [dict(row) for row in reversed(rows)]}


OPS = {"events": op_events}
