"""What hive's MCP tools do: each is a call to the sidecar as the session the tool call came from.

The server is a thin client of the sidecar: one connection (:mod:`.link`), multiplexed, carries
every call of every session this process serves, and :mod:`.identity` says which session a call
is from. Sidecar errors become tool errors that carry their code (``structuredContent.error.code``),
and every result ends with a notice when mail waits for the session.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from mcp_types import CallToolResult, ContentBlock, TextContent

from ..base.errors import BadRequest, HiveError, Unreachable
from ..base.paths import StatePaths
from .identity import Callers, Identity
from .link import SidecarLink

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

# A harness waits only a few seconds for ``initialize`` and ``tools/list`` (Claude Code: 5 s
# before the first turn), and the MCP SDK alone takes most of that on a loaded machine. So what
# only a tool call needs (the sidecar client, defang, the desktop dialog, config) is imported
# by the functions below when first called, not here.

MAX_WAIT = 600.0
STOP_WAITING_GRACE = 2.0


def defang(text: str) -> str:
    """:func:`hive.sidecar.base.defang.defang`, imported on first use (see above)."""
    from ..base.defang import defang as clean

    return clean(text)


@dataclass(frozen=True)
class Reply:
    text: str
    data: dict[str, Any]


ToolBody = Callable[[Identity], Awaitable[Reply]]


class HiveTools:
    """What the tools do, given a link to the sidecar; the MCP plumbing is :func:`.server.build_server`."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self.link: SidecarLink | None = None
        self.callers = Callers(self.environ)

    @contextlib.asynccontextmanager
    async def connected(self, paths: StatePaths) -> AsyncIterator[HiveTools]:
        async with anyio.create_task_group() as tg:
            self.link = SidecarLink(paths, tg)
            try:
                yield self
            finally:
                self.link = None
                tg.cancel_scope.cancel()

    def _linked(self) -> SidecarLink:
        if self.link is None:
            raise Unreachable("the MCP server is not connected to a sidecar")
        return self.link

    async def call(self, op: str, *, idempotent: bool = True, **args: Any) -> dict[str, Any]:
        return await self._linked().call(op, idempotent=idempotent, **args)

    # ---- results ---------------------------------------------------------------------

    async def run(self, ctx: Context, body: ToolBody) -> CallToolResult:
        identity: Identity | None = None
        try:
            identity = await self.callers.identify(ctx, self._linked())
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
        text = (
            f"[hive] {count} unread {plural} from {', '.join(senders) or 'a teammate'}: "
            "read them with check_inbox at the next natural point."
        )
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

    async def send_message(
        self,
        identity: Identity,
        to: str,
        message: str,
        reply_to: str | None,
        notify: bool,
        fyi: bool,
        files: list[str] | None = None,
    ) -> Reply:
        request: dict[str, Any] = {"from": identity.key, "to": to, "body": message, "fyi": fyi}
        if files:
            request["files"] = files  # read by the sidecar, confined to this session's own folder
        if reply_to:
            request["reply_to"] = reply_to
        if notify:
            request["notify"] = True
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
        data = {
            "key": identity.key,
            "via": identity.via,
            "address": result.get("me"),
            "agent": identity.agent,
            "name": me.get("name"),
            "tier": me.get("tier"),
            "person": result.get("person"),
            "machine": result.get("machine"),
        }
        text = (
            f"You are {data['address']} ({identity.agent} on {data['machine']}), delivery tier "
            f"{data['tier']}. Session key {identity.key}, identified by {identity.via}."
        )
        return Reply(text, data)

    async def rename(self, identity: Identity, name: str) -> Reply:
        result = await self.call("set_status", session=identity.key, name=name)
        was = f" (was {result['renamed_from']})" if result.get("renamed_from") else ""
        return Reply(f"You are now {result['address']}{was}.", result)

    async def ask_user(self, identity: Identity, question: str, about: str | None) -> Reply:
        request: dict[str, Any] = {"session": identity.key, "question": question}
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

    async def team(
        self,
        identity: Identity,
        action: str,
        name: str | None,
        person: str | None,
        link: str | None,
        own_machine: bool,
        once: bool,
        force: bool,
    ) -> Reply:
        """The team ops of `hive init/invite/join/team/remove/leave/link --new`, for an agent acting for its person."""
        if action == "show":
            result = await self.call("team_show")
            return Reply(team_text(result), result)
        if action == "init":
            if not name:
                raise BadRequest("init needs name: the team's name (a-z, 0-9 and -)")
            result = await self.call("team_init", idempotent=False, team=name, **({"person": person} if person else {}))
            me = result["me"]
            return Reply(
                f"Founded team {result['team']['name']}: your person is {me['person']} on {me['machine']}. "
                f"Give teammates this line:\n{result['invite']['line']}",
                result,
            )
        if action == "invite":
            result = await self.call(
                "team_invite", idempotent=not (own_machine or once), own_machine=own_machine, once=once
            )
            return Reply(result["line"], result)
        if action == "join":
            if not link:
                raise BadRequest("join needs link: the invite (it starts with hive1:)")
            result = await self.call("team_join", idempotent=False, link=link, **({"person": person} if person else {}))
            me = result["me"]
            return Reply(
                f"Joined team {result['team']['name']}: your person is {me['person']} on {me['machine']}.", result
            )
        if action == "remove":
            if not name:
                raise BadRequest("remove needs name: a person, a machine, or person@machine")
            result = await self.call("team_remove", idempotent=False, target=name)
            return Reply(
                f"Removed {', '.join(result['removed'])}. The team link was replaced; the new one:\n"
                f"{result['invite']['line']}",
                result,
            )
        if action == "leave":
            result = await self.call("team_leave", idempotent=False, force=force)
            return Reply(f"This machine left team {result['left']}; it is on its own again.", result)
        if action == "new_link":
            result = await self.call("team_link_new", idempotent=False)
            return Reply(f"The old team link no longer works; the new one:\n{result['line']}", result)
        raise BadRequest(f"unknown team action {action!r}")

    async def digest(self, identity: Identity) -> Reply:
        from ..gate.engine import digest_text  # peer-written titles: defanged like any peer text

        result = await self.call("digest", peek=True)  # only the person's own `hive digest` moves its start
        return Reply(defang(digest_text(result)), {k: v for k, v in result.items() if k != "groups"})

    # ---- team memory (hive.sidecar.lessons.ops); lesson text arrives framed and defanged -----------

    async def search_memory(self, identity: Identity, q: str, files: list[str] | None) -> Reply:
        result = await self.call("lesson_search", session=identity.key, q=q, files=files or [])
        text = result["text"] or "No verified team lesson matches; search again with two or three distinctive words."
        return Reply(text, {"lessons": result["lessons"]})

    async def get_memory_context(self, identity: Identity, task: str, files: list[str] | None) -> Reply:
        result = await self.call("lesson_context", session=identity.key, task=task, files=files or [])
        text = result["text"] or "No verified team lesson applies to this task and these files."
        return Reply(text, {"lessons": result["lessons"]})

    async def propose_lesson(
        self,
        identity: Identity,
        kind: str,
        text: str,
        evidence: list[str],
        applicability: str,
        scope: str,
        tags: list[str] | None,
        quote_speaker: str | None,
        quote_words: str | None,
        supersedes: str | None,
    ) -> Reply:
        request: dict[str, Any] = {
            "session": identity.key,
            "kind": kind,
            "text": text,
            "evidence": evidence,
            "applicability": applicability,
            "scope": scope,
            "tags": tags or [],
        }
        if quote_speaker or quote_words:
            request["quote"] = {"speaker": quote_speaker or "", "words": quote_words or ""}
        if supersedes:
            request["supersedes"] = supersedes
        result = await self.call("lesson_propose", **request)  # the same lesson again is the same id: safe to retry
        return Reply(
            f"Proposed lesson {result['id'][:12]}: {result['note']} It is not team knowledge until a person "
            "approves it; you cannot approve it yourself.",
            result,
        )

    async def search_history(self, identity: Identity, q: str, limit: int) -> Reply:
        result = await self.call("history_search", session=identity.key, q=q, limit=limit)
        text = result["text"] or (
            "Nothing in your team's history matches. It holds only mail of people who turned it on "
            "(`hive history on`); search again with fewer or other words."
        )
        return Reply(text, {"hits": result["hits"], "anchors": result["anchors"]})

    async def cite_lesson(self, identity: Identity, lesson: str, worked: bool | None) -> Reply:
        result = await self.call("lesson_cite", session=identity.key, lesson=lesson, worked=worked)
        return Reply(f"Cited lesson {result['id'][:12]} (cited {result['citations']} times).", result)


def team_text(shown: dict[str, Any]) -> str:
    """`hive team` as a tool result: people, machines, online or last seen, direct or relayed."""
    team = shown.get("team")
    if team is None:
        return (
            "This machine is in no team. Found one with action init, or join one with action join and the "
            "invite line a teammate gave your person."
        )
    me = shown["me"]
    lines = [
        f"Team {defang(team['name'])}; your person is {me['person']} on {me['machine']}."
        + ("" if team["link"] else " It has no team link: action new_link makes one.")
    ]
    for person in shown["people"]:
        machines = []
        for m in person["machines"]:
            if m["me"]:
                state = "this machine"
            elif m["online"]:
                state = f"online, {m['path']}" if m["path"] else "online"
            elif m.get("unreachable"):
                state = "up, but unreachable from this machine"
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
