"""A scripted model on 127.0.0.1 that speaks the four wire APIs the harness CLIs use.

The harnesses are real; the model is the external service we fake. One server answers:

- Anthropic Messages (``POST /v1/messages``, SSE when ``stream``; ``count_tokens``): Claude Code;
- OpenAI Responses (``POST /v1/responses``, SSE from ``response.created`` to ``response.completed``,
  tool calls as ``function_call`` items with a ``namespace`` when the tool sits in one): Codex;
- OpenAI Chat Completions (``POST /v1/chat/completions``, streaming or not): opencode, pi;
- Gemini (``:generateContent``, ``:streamGenerateContent?alt=sse``, ``:countTokens``), including
  the non-stream router request that wants JSON matching ``responseJsonSchema``: Gemini CLI.

Every request is parsed into one neutral :class:`Request` (the conversation as role/text/tool
call entries, the tool names offered) and recorded, so a test can assert what the model saw.

A :class:`Script` plays each conversation. A conversation starts at a user message holding one
of the script's prompt keys; the number of tool-call rounds the model made after it picks the
next :class:`Step` (call tools, or answer text). Counting rounds rather than requests keeps the
script right when a harness retries, adds its own requests (titles, routing, token counts) or
steers a user message into a running turn. A step may run a callback before the answer goes
out (send a teammate's message, kill the harness), which is how tests place events exactly
between two model calls. Requests outside any scripted conversation are answered with text.

Request-shape quirks accepted (../shared/notes/harnesses.md): ``role: "system"`` entries inside
Claude Code's ``messages``, ``thinking``/``context_management``/``output_config`` fields,
Codex's namespaced MCP tools and developer messages, Gemini's system prompt that literally
contains "functionResponse" (tool results are read from ``parts``, never from raw text).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

JsonObject = dict[str, Any]


# ---- the neutral view of a request ---------------------------------------------------------------


WAIT_FOR_MCP = "WaitForMcpServers"  # Claude Code's stand-in tool while MCP servers connect


@dataclass(frozen=True)
class Turn:
    """One entry of a conversation: ``role`` is user, assistant, tool or system."""

    role: str
    text: str = ""
    calls: tuple[str, ...] = ()  # tool names the assistant called in this entry


@dataclass(frozen=True)
class Tool:
    """A tool the harness offers: its wire name, and the namespace it sits in (Codex), if any."""

    name: str
    namespace: str | None = None

    @property
    def full(self) -> str:
        return f"{self.namespace}__{self.name}" if self.namespace else self.name


@dataclass
class Request:
    """One recorded model request."""

    api: str  # anthropic, responses, chat, gemini
    path: str
    body: JsonObject
    turns: list[Turn]
    tools: list[Tool]
    stream: bool
    at: float = field(default_factory=time.monotonic)
    schema: JsonObject | None = None  # a JSON schema the answer must follow (Gemini's router)
    reply: str = ""  # what the server answered, for failure messages

    @property
    def text(self) -> str:
        """Every piece of text the model was given in this request (system prompt included)."""
        return "\n".join(t.text for t in self.turns if t.text)

    def tool(self, wanted: str) -> Tool:
        """The offered tool a script means by ``wanted`` ("list_team" is ``mcp__hive__list_team``
        in Claude Code, ``list_team`` in Codex's ``mcp__hive`` namespace, ``mcp_hive_list_team``
        in Gemini CLI, ``hive_list_team`` in opencode). Raises LookupError naming what was offered."""
        exact = [t for t in self.tools if wanted in (t.name, t.full)]
        suffixed = [t for t in self.tools if t.name.endswith("_" + wanted)]
        for found in (exact, [t for t in suffixed if "hive" in t.name], suffixed):
            if found:
                return found[0]
        raise LookupError(f"the harness offered no tool {wanted!r}; it offered {sorted(t.full for t in self.tools)}")


# ---- scripts ----------------------------------------------------------------------------------------


Hook = Callable[[Request], None]


@dataclass(frozen=True)
class Call:
    """Call one tool; ``args`` may be computed from the request (say, from a tool's last result)."""

    tool: str
    args: JsonObject | Callable[[Request], JsonObject] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One model answer: tool calls (made in one round) or text; ``before`` runs first."""

    calls: tuple[Call, ...] = ()
    text: str = ""
    before: Hook | None = None
    delay: float = 0.0  # seconds to wait before answering (a slow model)


def call(
    tool: str,
    args: JsonObject | Callable[[Request], JsonObject] | None = None,
    *,
    before: Hook | None = None,
    also: Iterable[Call] = (),
) -> Step:
    return Step(calls=(Call(tool, args or {}), *also), before=before)


def say(text: str, *, before: Hook | None = None) -> Step:
    return Step(text=text, before=before)


@dataclass
class Script:
    """Conversations by prompt key: ``{"E2E-SEND": [call(...), say(...)]}``."""

    conversations: dict[str, list[Step]] = field(default_factory=dict)
    fallback: str = "ok"  # the answer outside any scripted conversation

    def step(self, request: Request) -> Step | None:
        """The step this request asks for, or None outside a scripted conversation."""
        for index in range(len(request.turns) - 1, -1, -1):
            turn = request.turns[index]
            if turn.role != "user":
                continue
            key = next((k for k in self.conversations if k in turn.text), None)
            if key is None:
                continue
            # Rounds spent waiting for MCP servers (see _answer) are not steps of the script.
            rounds = sum(
                1
                for t in request.turns[index + 1 :]
                if t.role == "assistant" and t.calls and set(t.calls) != {WAIT_FOR_MCP}
            )
            steps = self.conversations[key]
            return steps[rounds] if rounds < len(steps) else Step(text=self.fallback)
        return None


# ---- per-API parsing --------------------------------------------------------------------------------


def _texts(value: Any) -> str:
    """The text inside a content value: a string, or a list of blocks/parts with text in them."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(t for t in (_texts(v) for v in value) if t)
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return value["text"]
        for key in ("content", "output", "result", "llmContent"):
            if key in value:
                return _texts(value[key])
    return ""


def _leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return []


def _result(text: str) -> Turn:
    """A tool result; one that is JSON (Claude Code passes ``structuredContent`` on as JSON) also
    carries its strings unescaped, so a test can look for the text the model reads."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]  # Codex prefixes "Wall time: …"
    try:
        decoded, _ = json.JSONDecoder().raw_decode(text, min(starts)) if starts else (None, 0)
    except ValueError:
        decoded = None
    return Turn("tool", "\n".join([text, *_leaves(decoded)]))


def _parse_anthropic(body: JsonObject) -> tuple[list[Turn], list[Tool]]:
    turns = [Turn("system", _texts(body.get("system")))]
    for message in body.get("messages") or []:
        role, content = message.get("role"), message.get("content")
        if isinstance(content, str) or role == "system":  # role "system" entries: a Claude Code quirk
            turns.append(Turn("system" if role == "system" else role, _texts(content)))
            continue
        calls = tuple(b.get("name", "") for b in content if b.get("type") == "tool_use")
        for block in content:
            if block.get("type") == "tool_result":
                turns.append(_result(_texts(block.get("content"))))
        text = "\n".join(b["text"] for b in content if b.get("type") == "text" and isinstance(b.get("text"), str))
        if text or calls:
            turns.append(Turn(role, text, calls))
    tools = [Tool(t["name"]) for t in body.get("tools") or [] if isinstance(t.get("name"), str)]
    return turns, tools


def _parse_responses(body: JsonObject) -> tuple[list[Turn], list[Tool]]:
    turns = [Turn("system", _texts(body.get("instructions")))]
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            turns.append(Turn("system" if role == "developer" else role, _texts(item.get("content"))))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            name = str(item.get("name") or kind)
            if item.get("namespace"):
                name = f"{item['namespace']}__{name}"
            last = turns[-1]
            if last.role == "assistant" and last.calls and not last.text:  # one round of parallel calls
                turns[-1] = Turn("assistant", "", (*last.calls, name))
            else:
                turns.append(Turn("assistant", "", (name,)))
        elif kind.endswith("_output"):
            turns.append(_result(_texts(item.get("output"))))
    tools: list[Tool] = []
    for tool in body.get("tools") or []:
        if tool.get("type") == "namespace":
            tools += [Tool(t["name"], tool["name"]) for t in tool.get("tools") or [] if t.get("name")]
        elif isinstance(tool.get("name"), str):
            tools.append(Tool(tool["name"]))
    return turns, tools


def _parse_chat(body: JsonObject) -> tuple[list[Turn], list[Tool]]:
    turns = []
    for message in body.get("messages") or []:
        role = message.get("role")
        calls = tuple((c.get("function") or {}).get("name", "") for c in message.get("tool_calls") or [])
        if role == "tool":
            turns.append(_result(_texts(message.get("content"))))
        else:
            turns.append(Turn("system" if role == "developer" else role, _texts(message.get("content")), calls))
    tools = [Tool((t.get("function") or {}).get("name", "")) for t in body.get("tools") or []]
    return turns, [t for t in tools if t.name]


def _parse_gemini(body: JsonObject) -> tuple[list[Turn], list[Tool]]:
    turns = [Turn("system", _texts((body.get("systemInstruction") or {}).get("parts")))]
    for content in body.get("contents") or []:
        parts = content.get("parts") or []
        for part in parts:
            if "functionResponse" in part:
                turns.append(_result(json.dumps(part["functionResponse"].get("response"), ensure_ascii=False)))
        calls = tuple(p["functionCall"].get("name", "") for p in parts if "functionCall" in p)
        text = "\n".join(p["text"] for p in parts if isinstance(p.get("text"), str))
        if text or calls:
            turns.append(Turn("assistant" if content.get("role") == "model" else "user", text, calls))
    tools = [
        Tool(d["name"]) for t in body.get("tools") or [] for d in t.get("functionDeclarations") or [] if d.get("name")
    ]
    return turns, tools


PARSERS = {"anthropic": _parse_anthropic, "responses": _parse_responses, "chat": _parse_chat, "gemini": _parse_gemini}


def _sample(schema: JsonObject) -> Any:
    """A small value that satisfies a JSON schema (Gemini's router and next-speaker checks)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    kind = str(kind or "object").lower()
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: ("user" if name == "next_speaker" else _sample(sub)) for name, sub in properties.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return "simple"


# ---- per-API answers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What the model says: text, or tool calls as (tool, arguments) pairs."""

    text: str = ""
    calls: tuple[tuple[Tool, JsonObject], ...] = ()


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


def _anthropic(answer: Answer, request: Request, serial: int) -> tuple[str, list[bytes] | JsonObject]:
    model = str(request.body.get("model") or "claude-fake")
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    blocks: list[JsonObject] = []
    if answer.text:
        blocks.append({"type": "text", "text": answer.text})
    for n, (tool, args) in enumerate(answer.calls):
        blocks.append({"type": "tool_use", "id": f"toolu_{serial:04d}_{n}", "name": tool.full, "input": args})
    stop = "tool_use" if answer.calls else "end_turn"
    message = {
        "id": f"msg_{serial:04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
    if not request.stream:
        return "application/json", message
    events = [
        _sse("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}})
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events.append(
                _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                )
            )
            events.append(
                _sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": block["text"]},
                    },
                )
            )
        else:
            events.append(
                _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}},
                )
            )
            events.append(
                _sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
                    },
                )
            )
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
    )
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return "text/event-stream", events


def _responses(answer: Answer, request: Request, serial: int) -> tuple[str, list[bytes] | JsonObject]:
    rid = f"resp_{serial:04d}"
    items: list[JsonObject] = []
    if answer.text:
        items.append(
            {
                "type": "message",
                "id": f"msg_{serial:04d}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
            }
        )
    for n, (tool, args) in enumerate(answer.calls):
        item = {
            "type": "function_call",
            "id": f"fc_{serial:04d}_{n}",
            "call_id": f"call_{serial:04d}_{n}",
            "name": tool.name,
            "arguments": json.dumps(args),
            "status": "completed",
        }
        if tool.namespace:
            item["namespace"] = tool.namespace
        items.append(item)
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": request.body.get("model")}
    done = {**base, "status": "completed", "output": items, "usage": usage}
    if not request.stream:
        return "application/json", done
    events = [
        _sse(
            "response.created",
            {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}},
        )
    ]
    for index, item in enumerate(items):
        events.append(
            _sse(
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": index, "item": item},
            )
        )
        if item["type"] == "message":
            events.append(
                _sse(
                    "response.output_text.delta",
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "delta": answer.text,
                    },
                )
            )
        events.append(
            _sse(
                "response.output_item.done", {"type": "response.output_item.done", "output_index": index, "item": item}
            )
        )
    events.append(_sse("response.completed", {"type": "response.completed", "response": done}))
    return "text/event-stream", events


def _chat(answer: Answer, request: Request, serial: int) -> tuple[str, list[bytes] | JsonObject]:
    model = request.body.get("model") or "fake-model"
    calls = [
        {
            "index": n,
            "id": f"call_{serial:04d}_{n}",
            "type": "function",
            "function": {"name": tool.full, "arguments": json.dumps(args)},
        }
        for n, (tool, args) in enumerate(answer.calls)
    ]
    finish = "tool_calls" if calls else "stop"
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    head = {"id": f"chatcmpl-{serial:04d}", "created": int(time.time()), "model": model}
    if not request.stream:
        message: JsonObject = {"role": "assistant", "content": answer.text or None}
        if calls:
            message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
        return "application/json", {
            **head,
            "object": "chat.completion",
            "usage": usage,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
    delta: JsonObject = {"role": "assistant"}
    if answer.text:
        delta["content"] = answer.text
    if calls:
        delta["tool_calls"] = calls
    chunks = [{"index": 0, "delta": delta, "finish_reason": None}, {"index": 0, "delta": {}, "finish_reason": finish}]
    events = [
        _sse(
            None,
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [chunk],
                **({"usage": usage} if chunk["finish_reason"] else {}),
            },
        )
        for chunk in chunks
    ]
    return "text/event-stream", [*events, _sse(None, "[DONE]")]


def _gemini(answer: Answer, request: Request, serial: int) -> tuple[str, list[bytes] | JsonObject]:
    parts: list[JsonObject] = []
    if request.schema is not None:
        parts.append({"text": json.dumps(_sample(request.schema))})
    elif answer.text:
        parts.append({"text": answer.text})
    parts += [{"functionCall": {"name": tool.full, "args": args}} for tool, args in answer.calls]
    reply = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "gemini-fake",
        "responseId": f"r{serial:04d}",
    }
    if not request.stream:
        return "application/json", reply
    return "text/event-stream", [_sse(None, reply)]


RENDERERS = {"anthropic": _anthropic, "responses": _responses, "chat": _chat, "gemini": _gemini}


# ---- the server ----------------------------------------------------------------------------------------


def _route(path: str, query: str) -> tuple[str | None, bool]:
    """(api, streaming-by-URL) for a POST path; api None for an unknown path."""
    if path.endswith("/messages/count_tokens"):
        return "anthropic-count", False
    if path.endswith("/messages"):
        return "anthropic", False
    if path.endswith("/responses"):
        return "responses", False
    if path.endswith("/chat/completions"):
        return "chat", False
    if ":countTokens" in path:
        return "gemini-count", False
    if ":streamGenerateContent" in path:
        return "gemini", True
    if ":generateContent" in path:
        return "gemini", False
    return None, False


class ModelServer:
    """The scripted model: start it, point a harness at :attr:`url`, read :attr:`requests`."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self.requests: list[Request] = []
        self.unknown: list[str] = []  # paths nobody should have called
        self.errors: list[str] = []  # a script step that failed (its exception text)
        self._lock = threading.Condition()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="model-server", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- what the model saw --------------------------------------------------------------------

    def main(self) -> list[Request]:
        """Requests that offered tools: the agent's own turns, not titles, routing or counting."""
        with self._lock:
            return [r for r in self.requests if r.tools]

    def seen(self, needle: str) -> list[int]:
        """Indices (into :attr:`requests`) of requests whose text holds ``needle``."""
        with self._lock:
            return [i for i, r in enumerate(self.requests) if needle in r.text]

    def wait_for(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        """Wait until ``check()`` is truthy, re-checking at every new request; returns its value."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                value = check()
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"timed out after {timeout:g} s waiting for {what}; the model saw:\n{self.transcript()}"
                    )
                self._lock.wait(min(remaining, 0.2))

    def transcript(self, width: int = 160) -> str:
        """A short account of every request, for assertion messages."""
        lines = []
        for i, r in enumerate(self.requests):
            last = next((t for t in reversed(r.turns) if t.role != "system"), Turn("-"))
            said = " ".join(last.text.split())[:width]
            lines.append(f"  #{i} {r.api} tools={len(r.tools)} last={last.role}:{said!r} -> {r.reply}")
        return "\n".join(lines) or "  (no requests)"

    # ---- serving -------------------------------------------------------------------------------

    def _answer(self, request: Request) -> Answer:
        step = self.script.step(request) if request.tools else None
        if step is None:
            return Answer(text=self.script.fallback)
        if step.before is not None:
            try:
                step.before(request)
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                raise
        if step.delay:
            time.sleep(step.delay)
        offered = {t.full for t in request.tools}
        if WAIT_FOR_MCP in offered and any(not self._offers(request, p.tool) for p in step.calls):
            # Claude Code starts the first turn while MCP servers still connect and offers this
            # tool instead; a real model calls it, and so does the script, before its own step.
            return Answer(calls=((next(t for t in request.tools if t.full == WAIT_FOR_MCP), {}),))
        calls = []
        for planned in step.calls:
            args = planned.args(request) if callable(planned.args) else planned.args
            calls.append((request.tool(planned.tool), args))
        return Answer(text=step.text, calls=tuple(calls))

    @staticmethod
    def _offers(request: Request, wanted: str) -> bool:
        try:
            request.tool(wanted)
        except LookupError:
            return False
        return True

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, content_type: str, payload: bytes | list[bytes]) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                if isinstance(payload, bytes):
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")  # the stream ends when the connection does
                self.end_headers()
                self.close_connection = True
                try:
                    for chunk in payload:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the harness hung up mid-stream (its test ended it): what it got is what it logged

            def _json(self, status: int, value: Any) -> None:
                self._send(status, "application/json", json.dumps(value).encode())

            def do_GET(self) -> None:
                # Model listings and health checks: nothing to list.
                self._json(200, {"object": "list", "data": [], "models": []})

            def do_POST(self) -> None:
                url = urlsplit(self.path)
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                api, streaming = _route(url.path, url.query)
                if api is None:
                    with server._lock:
                        server.unknown.append(url.path)
                    self._json(404, {"error": {"message": f"no such endpoint {url.path}"}})
                    return
                if api == "anthropic-count":
                    self._json(200, {"input_tokens": 100})
                    return
                if api == "gemini-count":
                    self._json(200, {"totalTokens": 100})
                    return
                turns, tools = PARSERS[api](body)
                config = body.get("generationConfig") or {}
                schema = config.get("responseJsonSchema") or config.get("responseSchema")
                request = Request(
                    api=api,
                    path=self.path,
                    body=body,
                    turns=turns,
                    tools=tools,
                    stream=streaming or bool(body.get("stream")),
                    schema=schema,
                )
                with server._lock:
                    server.requests.append(request)
                    serial = len(server.requests)
                    server._lock.notify_all()
                try:
                    answer = server._answer(request)
                except Exception as exc:
                    request.reply = f"error: {exc}"
                    self._json(500, {"error": {"type": "api_error", "message": f"script failed: {exc}"}})
                    return
                request.reply = (
                    f"calls {[t.full for t, _ in answer.calls]}" if answer.calls else f"text {answer.text[:40]!r}"
                )
                content_type, payload = RENDERERS[api](answer, request, serial)
                if isinstance(payload, dict):
                    self._json(200, payload)
                else:
                    self._send(200, content_type, payload)
                with server._lock:
                    server._lock.notify_all()

        return Handler
