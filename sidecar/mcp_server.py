"""``hive mcp``: the stdio MCP server that gives an agent hive's tools.

It is a thin client of the sidecar: one connection, multiplexed, carries every call of every
session this process serves (opencode shares one server between sessions, Claude Code keeps one
across ``/clear``). So each tool call is first tied to a session, in this order:

1. the call's ``_meta`` (Codex sends ``sessionId``/``threadId``; our pi bridge ``pi/sessionId``);
2. a ``_hook_session_id`` argument a pre-tool hook stamped into the call, removed before the
   tool sees its arguments;
3. the session id the harness put in this process's environment at spawn time, which goes
   stale when a harness rotates sessions in place, so the sidecar confirms it (op ``attach``);
4. the session a hook registered under one of this process's ancestors (op ``attach``);
5. otherwise one session of this process's own, with a generated key.

Each session is registered (and held: it is live while this process runs) with the agent named
by the client's ``clientInfo``; the tier stays whatever the hooks set. Sidecar errors become
tool errors that carry their code (``structuredContent.error.code``), and every result ends
with a notice when mail waits for the session.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import Field

from hive import skills

from . import __version__
from .errors import BadRequest, HiveError, NotFound, Unreachable
from .paths import StatePaths, state_paths
from .peer import ancestor_pids

if TYPE_CHECKING:
    from .client import Client

# A harness waits only a few seconds for ``initialize`` and ``tools/list`` (Claude Code: 5 s
# before the first turn), and the MCP SDK alone takes most of that on a loaded machine. So what
# only a tool call needs (the sidecar client, defang, the desktop dialog, config) is imported
# by the functions below when first called, not here.

MAX_WAIT = 600.0
HOOK_ARGUMENT = "_hook_session_id"
META_SESSION_KEYS = ("sessionId", "threadId", "pi/sessionId")
CODEX_TURN_META = "x-codex-turn-metadata"
ENV_SESSION_HINTS = ("CLAUDE_CODE_SESSION_ID", "GEMINI_SESSION_ID", "PI_SESSION_ID")
MAX_KEY = 200
STOP_WAITING_GRACE = 2.0

log = logging.getLogger("hive.mcp")

# clientInfo.name as each harness sends it (measured) -> hive's agent name.
CLIENT_AGENTS = {
    "claude-code": "claude-code",
    "codex-mcp-client": "codex",
    "gemini-cli-mcp-client": "gemini",
    "opencode": "opencode",
    "cursor": "cursor",
    "pi": "pi",  # hive's own pi extension, which runs this server for its tools
}
# When a client does not identify itself (clientInfo is optional from protocol 2026-07-28 on),
# the markers harnesses put in their children's environment still name the agent.
ENV_AGENTS = (("CLAUDECODE", "claude-code"), ("GEMINI_CLI", "gemini"), ("OPENCODE", "opencode"),
              ("PI_CODING_AGENT", "pi"))


def defang(text: str) -> str:
    """:func:`hive.sidecar.defang.defang`, imported on first use (see above)."""
    from .defang import defang as clean

    return clean(text)


def desktop_env(environ: Mapping[str, str]) -> dict[str, str]:
    """:func:`hive.sidecar.dialog.desktop_env`, imported on first use (see above)."""
    from .dialog import desktop_env as env

    return env(environ)


def behaviour_rules() -> str:
    """The "How to behave" section of the bundled hive skill: the server's instructions."""
    text = (skills.ROOT / "hive" / "SKILL.md").read_text(encoding="utf-8")
    section: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            if section is not None:
                break
            if line[3:].strip().lower() == "how to behave":
                section = []
            continue
        if section is not None:
            section.append(line)
    if not section:
        raise RuntimeError(f"{skills.ROOT / 'hive' / 'SKILL.md'} has no '## How to behave' section")
    return "\n".join(section).strip()


def agent_name(client_name: str | None, environ: Mapping[str, str]) -> str:
    if client_name:
        from .config import slug

        return CLIENT_AGENTS.get(client_name) or slug(client_name) or "agent"
    for variable, agent in ENV_AGENTS:
        if environ.get(variable):
            return agent
    return "agent"


def _key(value: Any) -> str | None:
    if isinstance(value, str) and 0 < len(value.strip()) <= MAX_KEY:
        return value.strip()
    return None


def session_from_meta(meta: Mapping[str, Any] | None) -> str | None:
    if not meta:
        return None
    for name in META_SESSION_KEYS:
        if key := _key(meta.get(name)):
            return key
    turn = meta.get(CODEX_TURN_META)
    if isinstance(turn, str):
        with contextlib.suppress(ValueError):
            turn = json.loads(turn)
    if isinstance(turn, dict):
        return _key(turn.get("session_id"))
    return None


@dataclass(frozen=True)
class Identity:
    key: str
    via: str  # meta, hook, env, ancestry or process
    agent: str


@dataclass(frozen=True)
class Reply:
    text: str
    data: dict[str, Any]


class SidecarLink:
    """One connection to the sidecar, opened on first use and reopened after it drops.

    Reopening goes through :meth:`Client.open`, which starts a sidecar when none answers. It
    happens only when a call needs it, so a sidecar someone stopped stays stopped until an
    agent actually uses a tool.
    """

    def __init__(self, paths: StatePaths, tg: TaskGroup) -> None:
        self._paths = paths
        self._tg = tg
        self._lock = anyio.Lock()
        self._client: Client | None = None
        self._scope: anyio.CancelScope | None = None
        self.generation = 0  # bumped per connection: sessions are held per connection

    async def _hold(self, *, task_status: TaskStatus[Client]) -> None:
        from .client import Client

        held: Client | None = None
        try:
            with anyio.CancelScope() as scope:
                async with Client.open(self._paths) as client:
                    held = client
                    self._client, self._scope = client, scope
                    self.generation += 1
                    task_status.started(client)
                    # Nothing is pushed to an MCP connection, so this stream ends only when the
                    # connection does; then the next call reconnects.
                    async for _event in client.events:
                        pass
        except Exception:
            if held is None:
                raise  # not connected yet: start() hands this to the caller
            log.warning("the connection to the sidecar failed", exc_info=True)
        finally:
            if held is not None and self._client is held:
                self._client = self._scope = None

    async def _connected(self) -> Client:
        async with self._lock:
            if self._client is not None:
                return self._client
            try:
                client: Client = await self._tg.start(self._hold)
            except OSError as exc:  # e.g. a state folder that cannot be created
                raise Unreachable(f"cannot reach or start the sidecar for {self._paths.home}: {exc}") from exc
            return client

    def _drop(self, client: Client) -> None:
        if self._client is client and self._scope is not None:
            self._scope.cancel()
            self._client = self._scope = None

    async def call(self, op: str, *, idempotent: bool = True, **args: Any) -> dict[str, Any]:
        """Call an op, reconnecting once if the connection turns out to be dead.

        A call that may have reached the sidecar before the link broke is retried only when
        repeating it is harmless; a ``send`` is not, so that one reports ``unreachable``.
        """
        client = await self._connected()
        try:
            return await client.call(op, **args)
        except Unreachable as exc:
            self._drop(client)
            if not idempotent and not _never_sent(exc):
                raise Unreachable(
                    f"the link to the sidecar broke during {op}; it may or may not have been done, "
                    "so check before repeating it"
                ) from exc
        return await (await self._connected()).call(op, **args)


def _never_sent(exc: Unreachable) -> bool:
    # Client.call chains a write failure; a reply that never came chains EndOfStream.
    return isinstance(exc.__cause__, anyio.BrokenResourceError | anyio.ClosedResourceError | OSError)


ToolBody = Callable[[Identity], Awaitable[Reply]]
ToolFunction = Callable[..., Awaitable[CallToolResult]]


class HiveTools:
    """What the tools do, given a link to the sidecar; the MCP plumbing is in :func:`build_server`."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self.link: SidecarLink | None = None
        self.cwd = os.getcwd()
        self.ancestors = ancestor_pids()
        self.harness_pid = os.getppid()
        self.env_hint = next((k for v in ENV_SESSION_HINTS if (k := _key(self.environ.get(v)))), None)
        self.process_key = f"mcp-{os.getpid()}-{secrets.token_hex(4)}"
        self._registered: dict[str, int] = {}  # session key -> link generation that holds it

    @contextlib.asynccontextmanager
    async def connected(self, paths: StatePaths) -> AsyncIterator[HiveTools]:
        async with anyio.create_task_group() as tg:
            self.link = SidecarLink(paths, tg)
            try:
                yield self
            finally:
                self.link = None
                tg.cancel_scope.cancel()

    async def call(self, op: str, *, idempotent: bool = True, **args: Any) -> dict[str, Any]:
        if self.link is None:
            raise Unreachable("the MCP server is not connected to a sidecar")
        return await self.link.call(op, idempotent=idempotent, **args)

    # ---- identity --------------------------------------------------------------------

    async def identify(self, ctx: Context) -> Identity:
        request = ctx.request_context
        params = request.params or {}
        client = request.session.client_params
        agent = agent_name(client.client_info.name if client is not None else None, self.environ)
        arguments = params.get("arguments")
        stamped = _key(arguments.get(HOOK_ARGUMENT)) if isinstance(arguments, Mapping) else None
        if key := session_from_meta(request.meta or params.get("_meta")):
            identity = Identity(key, "meta", agent)
        elif stamped:
            identity = Identity(stamped, "hook", agent)
        else:
            identity = await self._attach(agent)
        await self._register(identity)
        return identity

    async def _attach(self, agent: str) -> Identity:
        try:
            found = await self.call("attach", pids=self.ancestors, cwd=self.cwd, hint=self.env_hint)
        except NotFound:
            if self.env_hint:
                return Identity(self.env_hint, "env", agent)
            return Identity(self.process_key, "process", agent)
        return Identity(found["key"], "env" if found.get("via") == "hint" else "ancestry", agent)

    async def _register(self, identity: Identity) -> None:
        assert self.link is not None
        if self._registered.get(identity.key) == self.link.generation:
            return
        info: dict[str, Any] = {"key": identity.key, "agent": identity.agent}
        if identity.via != "ancestry":  # the hook that registered an attached session knows better
            info["cwd"] = self.cwd
        if identity.via in ("meta", "hook", "env"):
            # Hooks register a session under its harness's pid; so does this, so that process
            # ancestry finds it. A generated session is this process's own and gets no pid.
            info["pid"] = self.harness_pid
        await self.call("register", session=info, hold=True)
        self._registered[identity.key] = self.link.generation

    # ---- results ---------------------------------------------------------------------

    async def run(self, ctx: Context, body: ToolBody) -> CallToolResult:
        identity: Identity | None = None
        try:
            identity = await self.identify(ctx)
            reply = await body(identity)
        except HiveError as exc:
            notice = await self._unread_notice(identity) if identity is not None else None
            return _failure(exc, notice)
        notice = await self._unread_notice(identity)
        content: list[ContentBlock] = [TextContent(type="text", text=reply.text)]
        data = dict(reply.data)
        if notice is not None:
            content.append(TextContent(type="text", text=notice[0]))
            data["unread"] = notice[1]
        return CallToolResult(content=content, structured_content=data)

    async def _unread_notice(self, identity: Identity) -> tuple[str, dict[str, Any]] | None:
        try:
            unread = await self.call("unread", session=identity.key)
        except HiveError:
            return None  # the tool's own answer matters more than the notice
        count = int(unread.get("count") or 0)
        if not count:
            return None
        senders = [defang(str(s)) for s in unread.get("from") or []]
        plural = "message" if count == 1 else "messages"
        text = (f"[hive] {count} unread {plural} from {', '.join(senders) or 'a teammate'}: "
                "read them with check_inbox at the next natural point.")
        return text, {"count": count, "from": senders}

    # ---- tools -----------------------------------------------------------------------

    async def list_team(self, identity: Identity, filter: str | None, all: bool) -> Reply:
        result = await self.call("who", session=identity.key, filter=filter, all=all)
        me = result.get("me")
        lines = []
        for s in result["sessions"]:
            where = s["repo"] or s["folder"]
            if s["branch"]:
                where = f"{where}@{s['branch']}"
            line = f"- {s['address']} ({s['agent']}) {where}".rstrip() + f", tier {s['tier']}"
            if not s["live"]:
                line += ", gone"
            if s["address"] == me:
                line += ", this is you"
            if s.get("unmanaged"):
                line += ", unmanaged (found on disk; no hive hooks or tools)"
            if s.get("state"):
                line += f", {s['state'].replace('_', ' ')}"
            if s.get("head"):
                line += f", HEAD {s['head'][:12]}"
            if s["doing"]:
                line += f": {s['doing']}"
            if s.get("files"):
                shown = s["files"][:8]
                more = f" and {len(s['files']) - len(shown)} more" if len(s["files"]) > len(shown) else ""
                line += f"\n  files touched in the last 30 min: {', '.join(defang(str(f)) for f in shown)}{more}"
            lines.append(line)
        if not lines:
            scope = "" if all else " live"
            lines = [f"No{scope} session matches." if filter else f"No{scope} sessions."]
        header = f"You are {me}. Sessions on your team:" if me else "Sessions on your team:"
        return Reply("\n".join([header, *lines]), result)

    async def send_message(self, identity: Identity, to: str, message: str, reply_to: str | None,
                           notify: bool, fyi: bool, files: list[str] | None = None) -> Reply:
        request: dict[str, Any] = {"from": identity.key, "to": to, "body": message, "fyi": fyi}
        if files:
            request["files"] = files  # read by the sidecar, confined to this session's own folder
        if reply_to:
            request["reply_to"] = reply_to
        if notify:
            request["notify"] = True
            request["desktop"] = desktop_env(self.environ)  # the sidecar may run without a desktop
        result = await self.call("send", idempotent=False, **request)
        lines = [f"{r['to']}: {r['note']} (id {r['id']})" for r in result["results"]]
        if notify:
            lines.append(result.get("notify_note") or "No desktop notification was shown.")
        return Reply("\n".join(lines), result)

    async def check_inbox(self, identity: Identity, wait_secs: float) -> Reply:
        wait = min(max(float(wait_secs or 0), 0.0), MAX_WAIT)
        deadline = time.monotonic() + wait
        while True:
            taken = await self.call("inbox", session=identity.key)
            remaining = deadline - time.monotonic()
            if taken["ids"] or remaining <= 0:
                break
            # Wait without taking: a poll cut short by a cancelled call must not leave messages
            # marked as shown to a reader that is gone.
            try:
                seen = await self.call("inbox", session=identity.key, wait=remaining, peek=True)
            except anyio.get_cancelled_exc_class():
                with anyio.move_on_after(STOP_WAITING_GRACE, shield=True), contextlib.suppress(HiveError):
                    await self.call("stop_waiting", session=identity.key)
                raise
            if not seen["ids"]:
                break  # the wait ran out, or someone told the sidecar to stop waiting
            # Otherwise take them; if another reader was faster, wait on for the time left.
        if taken["ids"]:
            await self.call("delivered", session=identity.key, ids=taken["ids"])
            return Reply(taken["text"], taken)
        waited = f" (waited {wait:g} s)" if wait else ""
        return Reply(f"No unread messages{waited}.", taken)

    async def whoami(self, identity: Identity) -> Reply:
        result = await self.call("who", session=identity.key, all=True)
        me: dict[str, Any] = next((s for s in result["sessions"] if s["address"] == result.get("me")), {})
        data = {"key": identity.key, "via": identity.via, "address": result.get("me"), "agent": identity.agent,
                "name": me.get("name"), "tier": me.get("tier"), "person": result.get("person"),
                "machine": result.get("machine")}
        text = (f"You are {data['address']} ({identity.agent} on {data['machine']}), delivery tier "
                f"{data['tier']}. Session key {identity.key}, identified by {identity.via}.")
        return Reply(text, data)

    async def rename(self, identity: Identity, name: str) -> Reply:
        result = await self.call("set_status", session=identity.key, name=name)
        was = f" (was {result['renamed_from']})" if result.get("renamed_from") else ""
        return Reply(f"You are now {result['address']}{was}.", result)

    async def ask_user(self, identity: Identity, question: str, about: str | None) -> Reply:
        request: dict[str, Any] = {"session": identity.key, "question": question,
                                   "desktop": desktop_env(self.environ)}
        if about:
            request["about"] = about
        try:
            result = await self.call("ask", **request)  # asking again joins the same wait: safe to retry
        except anyio.get_cancelled_exc_class():
            # This connection carries other calls, so the sidecar cannot see that this one was
            # abandoned: tell it, so a later answer is delivered as a message instead.
            with anyio.move_on_after(STOP_WAITING_GRACE, shield=True), contextlib.suppress(HiveError):
                await self.call("ask_stop", session=identity.key)
            raise
        return Reply(result["note"], result)

    async def team(self, identity: Identity, action: str, name: str | None, person: str | None, link: str | None,
                   own_machine: bool, once: bool, force: bool) -> Reply:
        """The team ops of `hive init/invite/join/team/remove/leave/link --new`, for an agent acting for its person."""
        if action == "show":
            result = await self.call("team_show")
            return Reply(team_text(result), result)
        if action == "init":
            if not name:
                raise BadRequest("init needs name: the team's name (a-z, 0-9 and -)")
            result = await self.call("team_init", idempotent=False, team=name,
                                     **({"person": person} if person else {}))
            me = result["me"]
            return Reply(f"Founded team {result['team']['name']}: your person is {me['person']} on {me['machine']}. "
                         f"Give teammates this line:\n{result['invite']['line']}", result)
        if action == "invite":
            result = await self.call("team_invite", idempotent=not (own_machine or once), own_machine=own_machine,
                                     once=once)
            return Reply(result["line"], result)
        if action == "join":
            if not link:
                raise BadRequest("join needs link: the invite (it starts with hive1:)")
            result = await self.call("team_join", idempotent=False, link=link, desktop=desktop_env(self.environ),
                                     **({"person": person} if person else {}))
            me = result["me"]
            return Reply(f"Joined team {result['team']['name']}: your person is {me['person']} on {me['machine']}.",
                         result)
        if action == "remove":
            if not name:
                raise BadRequest("remove needs name: a person, a machine, or person@machine")
            result = await self.call("team_remove", idempotent=False, target=name, desktop=desktop_env(self.environ))
            return Reply(f"Removed {', '.join(result['removed'])}. The team link was replaced; the new one:\n"
                         f"{result['invite']['line']}", result)
        if action == "leave":
            result = await self.call("team_leave", idempotent=False, force=force, desktop=desktop_env(self.environ))
            return Reply(f"This machine left team {result['left']}; it is on its own again.", result)
        if action == "new_link":
            result = await self.call("team_link_new", idempotent=False, desktop=desktop_env(self.environ))
            return Reply(f"The old team link no longer works; the new one:\n{result['line']}", result)
        raise BadRequest(f"unknown team action {action!r}")

    async def digest(self, identity: Identity) -> Reply:
        from .gate import digest_text  # peer-written titles: defanged like any peer text

        result = await self.call("digest", peek=True)  # only the person's own `hive digest` moves its start
        return Reply(defang(digest_text(result)), {k: v for k, v in result.items() if k != "groups"})

    # ---- team memory (hive.sidecar.lesson_ops); lesson text arrives framed and defanged -----------

    async def search_memory(self, identity: Identity, q: str, files: list[str] | None) -> Reply:
        result = await self.call("lesson_search", session=identity.key, q=q, files=files or [])
        text = result["text"] or "No verified team lesson matches; search again with two or three distinctive words."
        return Reply(text, {"lessons": result["lessons"]})

    async def get_memory_context(self, identity: Identity, task: str, files: list[str] | None) -> Reply:
        result = await self.call("lesson_context", session=identity.key, task=task, files=files or [])
        text = result["text"] or "No verified team lesson applies to this task and these files."
        return Reply(text, {"lessons": result["lessons"]})

    async def propose_lesson(self, identity: Identity, kind: str, text: str, evidence: list[str], applicability: str,
                             scope: str, tags: list[str] | None, quote_speaker: str | None, quote_words: str | None,
                             supersedes: str | None) -> Reply:
        request: dict[str, Any] = {"session": identity.key, "kind": kind, "text": text, "evidence": evidence,
                                   "applicability": applicability, "scope": scope, "tags": tags or [],
                                   "desktop": desktop_env(self.environ)}
        if quote_speaker or quote_words:
            request["quote"] = {"speaker": quote_speaker or "", "words": quote_words or ""}
        if supersedes:
            request["supersedes"] = supersedes
        result = await self.call("lesson_propose", **request)  # the same lesson again is the same id: safe to retry
        return Reply(f"Proposed lesson {result['id'][:12]}: {result['note']} It is not team knowledge until a person "
                     "approves it; you cannot approve it yourself.", result)

    async def cite_lesson(self, identity: Identity, lesson: str, worked: bool | None) -> Reply:
        result = await self.call("lesson_cite", session=identity.key, lesson=lesson, worked=worked)
        return Reply(f"Cited lesson {result['id'][:12]} (cited {result['citations']} times).", result)


def team_text(shown: dict[str, Any]) -> str:
    """`hive team` as a tool result: people, machines, online or last seen, direct or relayed."""
    team = shown.get("team")
    if team is None:
        return ("This machine is in no team. Found one with action init, or join one with action join and the "
                "invite line a teammate gave your person.")
    me = shown["me"]
    lines = [f"Team {defang(team['name'])}; your person is {me['person']} on {me['machine']}."
             + ("" if team["link"] else " It has no team link: action new_link makes one.")]
    for person in shown["people"]:
        machines = []
        for m in person["machines"]:
            if m["me"]:
                state = "this machine"
            elif m["online"]:
                state = f"online, {m['path']}" if m["path"] else "online"
            elif m["last_seen"]:
                state = "last seen " + time.strftime("%Y-%m-%d %H:%M", time.localtime(m["last_seen"]))
            else:
                state = "offline"
            role = "" if m["role"] == "member" else f", {m['role']}"
            machines.append(f"{defang(m['machine'])} ({state}{role})")
        lines.append(f"- {defang(person['person'])}: {'; '.join(machines)}")
    if shown.get("departed"):
        lines.append("Departed: " + ", ".join(defang(f"{d['person']}@{d['machine']}") for d in shown["departed"]))
    return "\n".join(lines)


def _failure(exc: HiveError, notice: tuple[str, dict[str, Any]] | None) -> CallToolResult:
    message = defang(exc.message)
    data: dict[str, Any] = {"error": {"code": exc.code, "message": message}}
    content: list[ContentBlock] = [TextContent(type="text", text=f"hive error {exc.code}: {message}")]
    if notice is not None:
        content.append(TextContent(type="text", text=notice[0]))
        data["unread"] = notice[1]
    return CallToolResult(content=content, structured_content=data, is_error=True)


READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
MemoryFiles = Annotated[list[str] | None, Field(description="paths you are working on, relative to the "
                                                                "repository")]


def build_server(tools: HiveTools, paths: StatePaths | None = None) -> MCPServer[Any]:
    """The MCP server with hive's tools, bound to the sidecar for ``paths`` (default: this user's)."""

    @contextlib.asynccontextmanager
    async def lifespan(_server: MCPServer[Any]) -> AsyncIterator[dict[str, Any]]:
        async with tools.connected(paths or state_paths()):
            yield {}

    server: MCPServer[Any] = MCPServer(
        "hive", title="hive", version=__version__, instructions=behaviour_rules(), lifespan=lifespan,
        log_level="WARNING",
    )

    def tool(annotations: ToolAnnotations) -> Callable[[ToolFunction], ToolFunction]:
        # Docstrings double as tool descriptions; the model should not read their indentation.
        def register(fn: ToolFunction) -> ToolFunction:
            server.add_tool(fn, description=inspect.cleandoc(fn.__doc__ or ""), annotations=annotations)
            return fn

        return register

    @tool(READ_ONLY)
    async def list_team(
        ctx: Context,
        filter: Annotated[str | None, Field(description="only sessions with this text in any field")] = None,
        all: Annotated[bool, Field(description="include sessions that ended recently")] = False,
    ) -> CallToolResult:
        """List your team's agent sessions: address, agent, repository@branch, delivery tier and
        what each is doing. Use it to pick the one session to message."""
        return await tools.run(ctx, lambda me: tools.list_team(me, filter, all))

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True))
    async def send_message(
        ctx: Context,
        to: Annotated[str, Field(description="one session: person/name, or a name from list_team")],
        message: Annotated[str, Field(description="what you need, point first; plain text")],
        reply_to: Annotated[str | None, Field(description="the id of the message this answers")] = None,
        notify: Annotated[bool, Field(description="also show the message as a desktop notification to the "
                                                  "recipient's person (at most one a minute)")] = False,
        fyi: Annotated[bool, Field(description="do not wake the recipient; it sees this at its next "
                                               "natural pause")] = False,
        files: Annotated[list[str] | None, Field(description="paths of text files in your own repository or "
                                                             "working folder to attach (at most 10, 256 KB each, "
                                                             "512 KB in all; no hidden or credential files)")] = None,
    ) -> CallToolResult:
        """Send a message to one other agent session on your team. Only when you need something
        from it or it needs something from you; one message per need, then wait for the reply."""
        return await tools.run(ctx, lambda me: tools.send_message(me, to, message, reply_to, notify, fyi, files))

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def check_inbox(
        ctx: Context,
        wait_secs: Annotated[float, Field(description="wait up to this many seconds (at most 600) for a "
                                                      "message when none is waiting")] = 0,
    ) -> CallToolResult:
        """Read the messages teammates' agents sent this session; each is framed as
        <hive-message> with its sender and id. Reading marks them read."""
        return await tools.run(ctx, lambda me: tools.check_inbox(me, wait_secs))

    @tool(READ_ONLY)
    async def whoami(ctx: Context) -> CallToolResult:
        """Your own hive address, delivery tier and session key."""
        return await tools.run(ctx, tools.whoami)

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                             open_world_hint=False))
    async def rename(
        ctx: Context,
        name: Annotated[str, Field(description="a short role for this session, such as api or billing-fix")],
    ) -> CallToolResult:
        """Rename this session so teammates can tell what it is for; unread mail follows the name."""
        return await tools.run(ctx, lambda me: tools.rename(me, name))

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def ask_user(
        ctx: Context,
        question: Annotated[str, Field(description="a yes/no question for your own person")],
        about: Annotated[str | None, Field(description="the id of the teammate's message this is about")] = None,
    ) -> CallToolResult:
        """Ask your own person a yes/no question in a desktop pop-up (Approve / Deny) and get their
        answer; waits up to 10 minutes. With `about` (the id of a teammate's message to you) the
        pop-up shows their request first, and the answer goes back to them as a signed approval."""
        return await tools.run(ctx, lambda me: tools.ask_user(me, question, about))

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True))
    async def team(
        ctx: Context,
        action: Annotated[Literal["show", "init", "invite", "join", "remove", "leave", "new_link"],
                          Field(description="show the roster; init a team; invite someone; join with an invite; "
                                            "remove a person or machine; leave the team; new_link replaces "
                                            "the team link")] = "show",
        name: Annotated[str | None, Field(description="init: the team's name; remove: a person, a machine, or "
                                                      "person@machine")] = None,
        person: Annotated[str | None, Field(description="init or join: your person's name in the team "
                                                        "(a-z, 0-9 and -)")] = None,
        link: Annotated[str | None, Field(description="join: the invite (hive1:...) or the whole invite line")] = None,
        own_machine: Annotated[bool, Field(description="invite: a one-time invite for another machine of your "
                                                       "person's")] = False,
        once: Annotated[bool, Field(description="invite: a one-time invite instead of the reusable team "
                                                "link")] = False,
        force: Annotated[bool, Field(description="leave: even if no teammate is online to hear it")] = False,
    ) -> CallToolResult:
        """Your person's hive team: who is in it (people, machines, online or last seen), and, only
        when your person asks you to, founding one, inviting, joining, removing someone, leaving,
        or replacing the team link (those four wait for your person to confirm in a pop-up). Pass
        invite lines on to your person; never send them to others."""
        return await tools.run(ctx, lambda me: tools.team(me, action, name, person, link, own_machine, once, force))

    @tool(READ_ONLY)
    async def digest(ctx: Context) -> CallToolResult:
        """What hive's gate held back from your person (most unblocking first), what it checked and how
        many items it silenced. Present it in plain language when they ask what they missed."""
        return await tools.run(ctx, tools.digest)

    @tool(READ_ONLY)
    async def search_memory(
        ctx: Context,
        q: Annotated[str, Field(description="two or three distinctive words: an error, a tool, a component")],
        files: MemoryFiles = None,
    ) -> CallToolResult:
        """Search your team's reviewed lessons (gotchas, conventions, decisions, fixes), ranked by relevance,
        your files, how often they worked and scope. Each comes framed as <hive-lesson> with who reviewed it;
        one marked hypothesis was verified in another project. Say which you used with cite_lesson."""
        return await tools.run(ctx, lambda me: tools.search_memory(me, q, files))

    @tool(READ_ONLY)
    async def get_memory_context(
        ctx: Context,
        task: Annotated[str, Field(description="the task at hand, in a sentence")],
        files: MemoryFiles = None,
    ) -> CallToolResult:
        """The few team lessons that matter for a task before you start it (at most 5), matched on the task and
        on the files this session touched."""
        return await tools.run(ctx, lambda me: tools.get_memory_context(me, task, files))

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False))
    async def propose_lesson(
        ctx: Context,
        kind: Annotated[str, Field(description="convention, correction, gotcha, decision, routing, preference, "
                                               "workflow or debugging_pattern")],
        text: Annotated[str, Field(description="the lesson in plain words, at most 1,200 characters")],
        evidence: Annotated[list[str], Field(description="what it rests on, at least one: file:PATH, commit:SHA, "
                                                         "command:LINE, url:URL or message:ID")],
        applicability: Annotated[str, Field(description="when it applies")] = "",
        scope: Annotated[str, Field(description="project (default: this repository's members), team, or "
                                                "personal (only your person)")] = "project",
        tags: Annotated[list[str] | None, Field(description="a few lower-case tags")] = None,
        quote_speaker: Annotated[str | None, Field(description="for a preference or decision: the person it is "
                                                               "about")] = None,
        quote_words: Annotated[str | None, Field(description="their own words, quoted exactly")] = None,
        supersedes: Annotated[str | None, Field(description="the id of the lesson this one replaces")] = None,
    ) -> CallToolResult:
        """Propose a lesson you learned for your team's memory, after your person agreed it is worth keeping.
        A person reviews it (its files' owner, or your own person for a personal one); until then no agent
        sees it. A lesson without evidence, or a preference or decision without the person's words, is refused."""
        return await tools.run(ctx, lambda me: tools.propose_lesson(
            me, kind, text, evidence, applicability, scope, tags, quote_speaker, quote_words, supersedes))

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def cite_lesson(
        ctx: Context,
        id: Annotated[str, Field(description="the lesson's id from its <hive-lesson> frame")],
        worked: Annotated[bool | None, Field(description="true if it helped, false if it was wrong; leave out "
                                                         "while unknown")] = None,
    ) -> CallToolResult:
        """Say that you used a team lesson, and whether it worked: that is how lessons earn their rank."""
        return await tools.run(ctx, lambda me: tools.cite_lesson(me, id, worked))

    return server


def tool_table() -> list[dict[str, Any]]:
    """Every tool as ``tools/list`` shows it (name, description, inputSchema, annotations).

    pi has no MCP client: hive's pi extension registers these very tools and runs them through
    this server (integrations/pi), so the two can never offer different tools."""
    listed = anyio.run(build_server(HiveTools()).list_tools)
    return [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in listed]


def main() -> int:
    """Serve MCP on stdin/stdout until the client goes away."""
    server = build_server(HiveTools())
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
    return 0
