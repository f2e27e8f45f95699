"""Which session, and which agent, an MCP tool call comes from.

One ``hive mcp`` process may serve several sessions (opencode shares one server between
sessions, Claude Code keeps one across ``/clear``), so each tool call is tied to a session,
in this order:

1. the call's ``_meta``, under the keys the harness descriptors name (``mcp_session_meta``);
2. a ``_hook_session_id`` argument a pre-tool hook stamped into the call, removed before the
   tool sees its arguments;
3. the session id the harness put in this process's environment at spawn time (the
   descriptors' ``mcp_session_env``), which goes
   stale when a harness rotates sessions in place, so the sidecar confirms it (op ``attach``);
4. the session a hook registered under one of this process's ancestors (op ``attach``);
5. otherwise one session of this process's own, with a generated key.

Each session is registered (and held: it is live while this process runs) with the agent named
by the client's ``clientInfo``; the tier stays whatever the hooks set.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

from ..base.errors import NotFound
from ..base.peer import ancestor_pids
from ..base.wire import parse

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from .link import SidecarLink

HOOK_ARGUMENT = "_hook_session_id"
MAX_KEY = 200


@dataclass(frozen=True)
class Naming:
    """How each harness names its session and itself to an MCP server, from the harness descriptors.

    Every table keeps registration order (a built-in harness's entry first) without repeats: the
    first ``_meta`` key or environment variable present wins.
    """

    clients: Mapping[str, str]  # clientInfo.name as each harness sends it -> hive's agent name
    meta_keys: tuple[str, ...]  # _meta keys holding the session id
    meta_objects: tuple[tuple[str, str], ...]  # _meta keys holding an object with the session id under a field
    session_env: tuple[str, ...]  # env vars naming the session at spawn time
    agent_env: tuple[tuple[str, str], ...]  # (env var, agent) naming the client that sent no clientInfo


@cache
def naming() -> Naming:
    """Read on the first tool call, not at start-up: the registry loads pluggy and every harness plugin."""
    from hive.integrations import registry

    harnesses = list(registry.harnesses().values())  # registration order
    clients: dict[str, str] = {}
    for harness in harnesses:
        for name in harness.identity.mcp_client_names:
            clients.setdefault(name, harness.name)
    return Naming(
        clients=clients,
        meta_keys=tuple(dict.fromkeys(k for h in harnesses for k in h.identity.mcp_session_meta)),
        meta_objects=tuple(dict.fromkeys(k for h in harnesses for k in h.identity.mcp_session_meta_objects)),
        session_env=tuple(dict.fromkeys(v for h in harnesses for v in h.identity.mcp_session_env)),
        agent_env=tuple(dict.fromkeys((v, h.name) for h in harnesses for v in h.identity.mcp_client_env)),
    )


def client_agents() -> Mapping[str, str]:
    """clientInfo.name as each harness sends it -> hive's agent name, from the harness descriptors."""
    return naming().clients


def agent_name(client_name: str | None, environ: Mapping[str, str]) -> str:
    if client_name:
        from ..base.config import slug

        # A client no descriptor names goes by its own name.
        return client_agents().get(client_name) or slug(client_name) or "agent"
    # When a client does not identify itself (clientInfo is optional from protocol 2026-07-28 on),
    # the markers harnesses put in their children's environment still name the agent.
    for variable, agent in naming().agent_env:
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
    table = naming()
    for name in table.meta_keys:
        if key := _key(meta.get(name)):
            return key
    for name, field in table.meta_objects:
        value = meta.get(name)
        if isinstance(value, str):
            value = parse(value)
        if isinstance(value, dict):
            return _key(value.get(field))
    return None


@dataclass(frozen=True)
class Identity:
    key: str
    via: str  # meta, hook, env, ancestry or process
    agent: str


class Callers:
    """The sessions this process serves: ties each tool call to one of them and registers it."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.cwd = os.getcwd()
        self.ancestors = ancestor_pids()
        self.harness_pid = os.getppid()
        self.process_key = f"mcp-{os.getpid()}-{secrets.token_hex(4)}"
        self._registered: dict[str, int] = {}  # session key -> link generation that holds it

    @cached_property
    def env_hint(self) -> str | None:
        """The session id a harness put in this process's environment at spawn time, if any."""
        return next((k for v in naming().session_env if (k := _key(self.environ.get(v)))), None)

    async def identify(self, ctx: Context, link: SidecarLink) -> Identity:
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
            identity = await self._attach(agent, link)
        await self._register(identity, link)
        return identity

    async def _attach(self, agent: str, link: SidecarLink) -> Identity:
        try:
            found = await link.call("attach", pids=self.ancestors, cwd=self.cwd, hint=self.env_hint)
        except NotFound:
            if self.env_hint:
                return Identity(self.env_hint, "env", agent)
            return Identity(self.process_key, "process", agent)
        return Identity(found["key"], "env" if found.get("via") == "hint" else "ancestry", agent)

    async def _register(self, identity: Identity, link: SidecarLink) -> None:
        if self._registered.get(identity.key) == link.generation:
            return
        info: dict[str, Any] = {"key": identity.key, "agent": identity.agent}
        if identity.via != "ancestry":  # the hook that registered an attached session knows better
            info["cwd"] = self.cwd
        if identity.via in ("meta", "hook", "env"):
            # Hooks register a session under its harness's pid; so does this, so that process
            # ancestry finds it. A generated session is this process's own and gets no pid.
            info["pid"] = self.harness_pid
        await link.call("register", session=info, hold=True)
        self._registered[identity.key] = link.generation
