"""The records a harness plugin returns: one plain data class per plane of the descriptor.

See :mod:`hive.integrations.hookspecs` for which hook returns which record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Tier = Literal["push", "turn", "pull"]
Scope = Literal["user", "project"]

# Normalized events every harness's native hook events map onto.
EVENTS = (
    "session.start",  # a session began, resumed or was cleared into a new one
    "prompt.submitted",  # the person sent a prompt; the turn begins
    "tool.before",  # a tool is about to run
    "tool.after",  # a tool finished (its result is on its way to the model)
    "turn.stop",  # the agent ended its turn
    "session.end",  # the session is over
)


@dataclass(frozen=True)
class Identity:
    """Who a harness is and how to find it on a machine."""

    name: str  # canonical, a-z0-9-: "claude-code"
    title: str  # for people: "Claude Code"
    aliases: tuple[str, ...] = ()  # accepted on the command line: "claude", "claude_code"
    binaries: tuple[str, ...] = ()  # looked up on PATH to detect it
    config_dirs: tuple[str, ...] = ()  # relative to the home folder: ".claude"
    version_args: tuple[str, ...] = ("--version",)
    # The newest version hive's end-to-end tests ran against ("" when not stated); `hive doctor`
    # says when the installed one is newer. Kept equal to the tests' newest pin by a test.
    tested_up_to: str = ""
    stdin_session: str = "session_id"  # the hook stdin field holding the session id
    stdin_cwd: str = "cwd"  # the hook stdin field holding the working folder
    session_env: tuple[str, ...] = ()  # env vars that carry the session id to hooks
    caller_env: tuple[str, ...] = ()  # env vars whose presence proves this harness runs the hook
    # Env vars the harness puts in every process it starts (tool calls, MCP servers, hooks): a
    # process that carries one descends from the harness, however it was cut loose since. Only
    # measured ones (shared/notes/mcp-session-identity.md); none is ever set in a person's shell.
    agent_env: tuple[str, ...] = ()
    mcp_client_names: tuple[str, ...] = ()  # MCP clientInfo.name values it sends
    # How an MCP tool call names its session (hive.sidecar.mcp.identity), for a server shared
    # between sessions: ``_meta`` keys holding the session id, and ``_meta`` keys holding an object
    # (or its JSON text) with the session id under a field, as (key, field).
    mcp_session_meta: tuple[str, ...] = ()
    mcp_session_meta_objects: tuple[tuple[str, str], ...] = ()
    # Env vars the harness (or hive's bridge in it) sets in the MCP server it starts, naming the
    # session at spawn time: only a hint, stale once the harness rotates the session in place.
    mcp_session_env: tuple[str, ...] = ()
    # Env vars that name this harness as the MCP client when its initialize carries no clientInfo
    # (optional from protocol 2026-07-28 on): markers the server inherits from it.
    mcp_client_env: tuple[str, ...] = ()
    transcript_field: str = "transcript_path"
    # The project folder of Agent Skills it reads instead of ``.agents/skills``, if any: a lesson
    # promoted into a project is linked (or copied) there too (hive.sidecar.lessons.promote).
    project_skills: SkillsLink | None = None


@dataclass(frozen=True)
class SkillsLink:
    """A harness's own project skills folder, which promotion mirrors ``.agents/skills`` into.

    ``lesson_promote`` answers how each skill got there under ``key``: "link", "copy", "shared"
    (the folder already is ``.agents/skills``) or "" (none: a hand-edited copy was left alone).
    """

    folder: str  # relative to the project root: ".claude/skills"
    key: str  # the key of lesson_promote's answer that reports it: "claude"


@dataclass(frozen=True)
class HookPoint:
    """One native hook event hive listens to, and what it may answer there."""

    native: str  # the harness's own event name: "PostToolUse", "afterMCPExecution"
    event: str  # one of EVENTS
    # How text reaches the model from here: "additional_context" (hookSpecificOutput),
    # "stop_block" ({"decision": "block", "reason"}), "stderr_block" (the text alone on stderr
    # with exit status 2, Claude Code's blocking exit), "followup_message" (Cursor), or None.
    inject: str | None = None
    wakes_only: bool = False  # mid-turn: only waking (non-fyi) mail is injected here
    matcher: str | None = None  # the matcher written into the hooks file, if the harness uses one
    no_opinion: str = ""  # the exact stdout that means "nothing to say"
    timeout: int = 5  # seconds the harness gives the hook, written into its config


@dataclass(frozen=True)
class Presence:
    """What a harness's events say about its session, and where it writes what it does."""

    busy: tuple[str, ...] = ("prompt.submitted", "tool.before", "tool.after")
    idle: tuple[str, ...] = ("turn.stop",)
    waiting_approval: tuple[str, ...] = ()
    transcripts: tuple[str, ...] = ()  # glob patterns relative to the home folder
    todos: tuple[str, ...] = ()  # task files; the first ``*`` is the session id
    titles: tuple[str, ...] = ()  # JSON-lines files naming sessions (id -> thread name)
    running: tuple[str, ...] = ()  # one JSON file per running session ({pid, sessionId, cwd, status})
    # How what the harness does reaches hive, and how soon. "hook": a command the harness runs and
    # waits for, so the event is stored before the harness goes on; "plugin": code inside the
    # harness that tells the sidecar without holding it up (milliseconds later). Either way the
    # actions are observed (the harness names them) and files and commands are inferred from a
    # tool call's arguments (observe.normalize).
    via: str = "hook"
    # What says the session is over. Whatever it is, the process hive recorded at registration is
    # watched too (procs.exited: a pidfd on Linux, so at once; a 2 s timer elsewhere).
    ends: str = "its session-end hook"


@dataclass(frozen=True)
class Tiers:
    """The delivery tiers a harness offers. ``push`` names the mechanism, if any."""

    default: Tier
    push: str | None = None  # "async_rewake", "app_server", "plugin"
    turn: bool = True
    pull: bool = True
    note: str = ""  # told to senders when the tier has a caveat
    # Mail hive puts into the model's context unasked (a hook's reply, a push), in characters: at
    # most this much at once, and this much per session per hour; the rest waits for a pull.
    inject_cap: int = 8_000
    inject_hour: int = 40_000


@dataclass(frozen=True)
class InstallContext:
    """What the install plane needs to know to produce native files."""

    scope: Scope
    hook_command: Callable[[str, str], str]  # (harness, native event) -> command line
    mcp_command: tuple[str, ...]  # argv that starts `hive mcp`
    hive_command: tuple[str, ...]  # argv that runs the hive CLI (for plugins)
    skills: tuple[str, ...] = ("hive",)  # names of skills shipped in hive.skills


@dataclass(frozen=True)
class NativeFile:
    """One file hive writes for a harness: the part of it hive owns.

    For ``json`` and ``toml`` files, ``owned`` maps key paths (tuples) to the value hive puts
    there; the writer merges them into whatever the user has and can remove them again. For
    ``text`` files (plugins, skills) ``content`` is the whole file, which hive owns outright.
    """

    role: Literal["mcp", "hooks", "plugin", "skill"]
    path: str  # relative to the home folder (user scope) or the project root (project scope)
    format: Literal["json", "toml", "text"]
    owned: dict[tuple[str, ...], Any] = field(default_factory=dict)
    content: str = ""


# Hook entries live in arrays the user shares with hive; an entry is hive's when its command
# line contains one of these (the installed hook client's file name, or the portable form
# used in the generated reference files).
HOOK_MARKERS = ("hive_hook.py", "hive hook ")


# A ``hive doctor`` check's status. "todo": hive is set up right, and a step only the person can take
# remains (trusting hooks or a folder in a harness). Listed, never a failure: a fresh, correct setup exits 0.
Status = Literal["ok", "info", "todo", "warn", "fail"]


@dataclass(frozen=True)
class DoctorContext:
    """What ``hive doctor`` found of a harness's user-scope wiring, for the checks only it knows."""

    home: Path
    binary: Path | None  # its program on PATH, None when not found
    files: dict[Path, tuple[NativeFile, ...]]  # hive's user-scope files for it, resolved, in descriptor order
    complete: bool  # every one of those files is there and parses


@dataclass(frozen=True)
class DoctorCheck:
    """One line of ``hive doctor``: ``todo`` is a step only the person can take in the harness."""

    name: str
    status: Status
    detail: str
    fix: str | None = None
