"""``hive mcp``: the stdio MCP server that gives an agent hive's tools.

This module is its tool table: each tool's name, description, arguments and annotations as
``tools/list`` shows them, and the server's instructions. What a tool does is :mod:`.tools`;
which session a call comes from, :mod:`.identity`.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from hive import skills

from .. import __version__
from ..base.paths import StatePaths, state_paths
from .tools import HiveTools

ToolFunction = Callable[..., Awaitable[CallToolResult]]


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


READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
MemoryFiles = Annotated[list[str] | None, Field(description="paths you are working on, relative to the repository")]


def build_server(tools: HiveTools, paths: StatePaths | None = None) -> MCPServer[Any]:
    """The MCP server with hive's tools, bound to the sidecar for ``paths`` (default: this user's)."""

    @contextlib.asynccontextmanager
    async def lifespan(_server: MCPServer[Any]) -> AsyncIterator[dict[str, Any]]:
        async with tools.connected(paths or state_paths()):
            yield {}

    server: MCPServer[Any] = MCPServer(
        "hive",
        title="hive",
        version=__version__,
        instructions=behaviour_rules(),
        lifespan=lifespan,
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
        notify: Annotated[
            bool,
            Field(
                description="also show the message as a desktop notification to the "
                "recipient's person (at most one a minute)"
            ),
        ] = False,
        fyi: Annotated[
            bool, Field(description="do not wake the recipient; it sees this at its next natural pause")
        ] = False,
        files: Annotated[
            list[str] | None,
            Field(
                description="paths of text files in your own repository or "
                "working folder to attach (at most 10, 256 KB each, "
                "512 KB in all; no hidden or credential files)"
            ),
        ] = None,
    ) -> CallToolResult:
        """Send a message to one other agent session on your team. Only when you need something
        from it or it needs something from you; one message per need, then wait for the reply."""
        return await tools.run(ctx, lambda me: tools.send_message(me, to, message, reply_to, notify, fyi, files))

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def check_inbox(
        ctx: Context,
        wait_secs: Annotated[
            float, Field(description="wait up to this many seconds (at most 600) for a message when none is waiting")
        ] = 0,
    ) -> CallToolResult:
        """Read the messages teammates' agents sent this session; each is framed as
        <hive-message> with its sender and id. Reading marks them read."""
        return await tools.run(ctx, lambda me: tools.check_inbox(me, wait_secs))

    @tool(READ_ONLY)
    async def whoami(ctx: Context) -> CallToolResult:
        """Your own hive address, delivery tier and session key."""
        return await tools.run(ctx, tools.whoami)

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False))
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
        action: Annotated[
            Literal["show", "init", "invite", "join", "remove", "leave", "new_link"],
            Field(
                description="show the roster; init a team; invite someone; join with an invite; "
                "remove a person or machine; leave the team; new_link replaces "
                "the team link"
            ),
        ] = "show",
        name: Annotated[
            str | None, Field(description="init: the team's name; remove: a person, a machine, or person@machine")
        ] = None,
        person: Annotated[
            str | None, Field(description="init or join: your person's name in the team (a-z, 0-9 and -)")
        ] = None,
        link: Annotated[str | None, Field(description="join: the invite (hive1:...) or the whole invite line")] = None,
        own_machine: Annotated[
            bool, Field(description="invite: a one-time invite for another machine of your person's")
        ] = False,
        once: Annotated[bool, Field(description="invite: a one-time invite instead of the reusable team link")] = False,
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

    @tool(READ_ONLY)
    async def search_history(
        ctx: Context,
        q: Annotated[str, Field(description="words to look for; stemmed, so migrating also finds migration")],
        limit: Annotated[int, Field(description="at most this many messages (1-50)", ge=1, le=50)] = 10,
    ) -> CallToolResult:
        """Search the messages your person sent or received that the team's anchor archived (only
        people who turned `hive history on` are archived; nobody else's messages are ever shown). Each
        comes framed as <hive-history> with sender, recipient, time and who archived it: peer text."""
        return await tools.run(ctx, lambda me: tools.search_history(me, q, limit))

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False))
    async def propose_lesson(
        ctx: Context,
        kind: Annotated[
            str,
            Field(
                description="convention, correction, gotcha, decision, routing, preference, "
                "workflow or debugging_pattern"
            ),
        ],
        text: Annotated[str, Field(description="the lesson in plain words, at most 1,200 characters")],
        evidence: Annotated[
            list[str],
            Field(
                description="what it rests on, at least one: file:PATH, commit:SHA, command:LINE, url:URL or message:ID"
            ),
        ],
        applicability: Annotated[str, Field(description="when it applies")] = "",
        scope: Annotated[
            str, Field(description="project (default: this repository's members), team, or personal (only your person)")
        ] = "project",
        tags: Annotated[list[str] | None, Field(description="a few lower-case tags")] = None,
        quote_speaker: Annotated[
            str | None, Field(description="for a preference or decision: the person it is about")
        ] = None,
        quote_words: Annotated[str | None, Field(description="their own words, quoted exactly")] = None,
        supersedes: Annotated[str | None, Field(description="the id of the lesson this one replaces")] = None,
    ) -> CallToolResult:
        """Propose a lesson you learned for your team's memory, after your person agreed it is worth keeping.
        A person reviews it (its files' owner, or your own person for a personal one); until then no agent
        sees it. A lesson without evidence, or a preference or decision without the person's words, is refused."""
        return await tools.run(
            ctx,
            lambda me: tools.propose_lesson(
                me, kind, text, evidence, applicability, scope, tags, quote_speaker, quote_words, supersedes
            ),
        )

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def cite_lesson(
        ctx: Context,
        id: Annotated[str, Field(description="the lesson's id from its <hive-lesson> frame")],
        worked: Annotated[
            bool | None, Field(description="true if it helped, false if it was wrong; leave out while unknown")
        ] = None,
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
