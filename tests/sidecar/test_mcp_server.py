"""``hive mcp`` end to end: a real server process, driven by the official MCP client over stdio.

Each test gets its own state folder; the MCP server starts the sidecar by itself, and the
``make_hive`` fixture stops it at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, Implementation, TextContent

from hive.sidecar.mcp.identity import Callers, agent_name, session_from_meta
from hive.sidecar.mcp.server import behaviour_rules
from tests.conftest import REPO, Hive

pytestmark = pytest.mark.anyio

HIVE_MCP = [sys.executable, "-m", "hive.sidecar.cli", "mcp"]
TOOLS = {
    "list_team",
    "send_message",
    "check_inbox",
    "whoami",
    "rename",
    "ask_user",
    "team",
    "digest",
    "search_memory",
    "get_memory_context",
    "propose_lesson",
    "cite_lesson",
    "search_history",
}
INSPECTOR = REPO / ".cache" / "npm" / "node_modules" / ".bin" / "mcp-inspector"


def _stderr_file(path: Path) -> TextIO:
    # The server's stderr goes to a real file: the child process needs a file descriptor.
    return open(path, "a", encoding="utf-8")


@contextlib.asynccontextmanager
async def hive_mcp(
    hive: Hive, *, client: str = "codex-mcp-client", env: dict[str, str] | None = None, mode: str = "legacy"
) -> AsyncIterator[Client]:
    """One ``hive mcp`` process for this machine, as a harness would start it."""
    project = hive.home / "api"
    project.mkdir(exist_ok=True)
    params = StdioServerParameters(
        command=HIVE_MCP[0], args=HIVE_MCP[1:], env={"HIVE_HOME": str(hive.home), **(env or {})}, cwd=project
    )
    with _stderr_file(hive.home / "mcp.stderr") as errlog:
        transport = stdio_client(params, errlog=errlog)
        async with Client(transport, client_info=Implementation(name=client, version="1.0"), mode=mode) as session:
            yield session


async def call(session: Client, tool: str, as_: str | None = None, **arguments: Any) -> CallToolResult:
    meta = {"sessionId": as_} if as_ else None
    with anyio.fail_after(30):
        return await session.call_tool(tool, arguments, meta=meta)


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def error_code(result: CallToolResult) -> str:
    assert result.is_error, text(result)
    assert isinstance(result.structured_content, dict)
    return str(result.structured_content["error"]["code"])


async def send_from_cli(hive: Hive, to: str, message: str) -> dict[str, Any]:
    """``hive send`` as a person would type it, without blocking the event loop the client runs on."""
    completed = await anyio.run_process(
        [sys.executable, "-m", "hive.sidecar.cli", "send", "--json", to, message], env=hive.env
    )
    return dict(json.loads(completed.stdout))


async def who_from_cli(hive: Hive) -> dict[str, Any]:
    completed = await anyio.run_process(
        [sys.executable, "-m", "hive.sidecar.cli", "who", "--all", "--json"], env=hive.env
    )
    return dict(json.loads(completed.stdout))


async def address_of(session: Client, key: str) -> str:
    return str(data(await call(session, "whoami", as_=key))["address"])


async def test_the_server_initializes_and_offers_hives_tools_with_the_skills_behaviour_rules(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        listed = await session.list_tools()

        assert session.server_info is not None
        assert session.server_info.name == "hive"
        assert session.instructions == behaviour_rules()
        assert {tool.name for tool in listed.tools} == TOOLS
        for tool in listed.tools:
            # Hooks stamp a session id into the arguments, so no schema may forbid extra keys.
            assert tool.input_schema.get("additionalProperties", True) is not False
            assert tool.description and not tool.description.startswith(" ")


async def test_the_server_also_speaks_the_per_request_protocol_and_names_the_agent_from_each_request(
    make_hive: Any,
) -> None:
    hive = make_hive()
    async with hive_mcp(hive, client="gemini-cli-mcp-client", mode="auto") as session:
        me = data(await call(session, "whoami", as_="gem-1"))
        version = session.protocol_version

    assert version >= "2026"
    assert me["agent"] == "gemini"


async def test_whoami_takes_the_session_from_the_calls_meta_and_the_agent_from_client_info(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        me = data(await call(session, "whoami", as_="thread-1"))

    assert me["key"] == "thread-1"
    assert me["via"] == "meta"
    assert me["agent"] == "codex"
    assert me["address"] == "alice/api-codex"
    assert me["tier"] == "pull"


async def test_two_sessions_in_one_process_are_told_apart_by_meta_and_can_message_each_other(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive, client="opencode") as session:
        first = await address_of(session, "ses_one")
        second = await address_of(session, "ses_two")
        assert first != second

        sent = data(await call(session, "send_message", as_="ses_one", to=second, message="why does refresh 401?"))
        inbox = await call(session, "check_inbox", as_="ses_two")
        again = await call(session, "check_inbox", as_="ses_two")
        own = await call(session, "check_inbox", as_="ses_one")

    assert sent["from"] == first
    assert [r["to"] for r in sent["results"]] == [second]
    assert f'<hive-message from="{first}" agent="opencode"' in text(inbox)
    assert "why does refresh 401?" in text(inbox)
    assert data(inbox)["ids"] == [r["id"] for r in sent["results"]]
    assert data(again)["ids"] == []
    assert data(own)["ids"] == []
    # What entered ses_two's model context, and through which door (hive events).
    recorded = hive.request({"id": 1, "op": "events", "session": "ses_two", "action": "team.message.injected"})
    assert [
        (json.loads(e["detail"])["id"], json.loads(e["detail"])["channel"]) for e in recorded["result"]["events"]
    ] == [(sent["results"][0]["id"], "mcp")]


async def test_every_result_carries_an_unread_notice_while_mail_waits(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        sender = await address_of(session, "sender")
        reader = await address_of(session, "reader")
        await call(session, "send_message", as_="sender", to=reader, message="ping")

        waiting = await call(session, "list_team", as_="reader")
        failed = await call(session, "send_message", as_="reader", to="nobody-here", message="x")
        await call(session, "check_inbox", as_="reader")
        read = await call(session, "whoami", as_="reader")

    assert data(waiting)["unread"] == {"count": 1, "from": [sender]}
    assert "check_inbox" in text(waiting).splitlines()[-1]
    assert error_code(failed) == "not_found"
    assert failed.structured_content is not None and failed.structured_content["unread"]["count"] == 1
    assert "unread" not in data(read)


async def test_sending_to_an_unknown_session_is_a_not_found_tool_error(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        result = await call(session, "send_message", as_="s1", to="alice/no-such-session", message="hello")

    assert error_code(result) == "not_found"


async def test_an_agent_addressing_a_group_gets_group_refused(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        await address_of(session, "other")
        results = [
            await call(session, "send_message", as_="s1", to=to, message="hi all")
            for to in ("*", "alice/*", "repo:acme/api")
        ]

    assert [error_code(r) for r in results] == ["group_refused"] * 3


async def test_check_inbox_waits_for_a_message_sent_from_the_cli(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        reader = await address_of(session, "waiter")
        received: list[CallToolResult] = []

        async def wait_for_mail() -> None:
            received.append(await session.call_tool("check_inbox", {"wait_secs": 120}, meta={"sessionId": "waiter"}))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_for_mail)
                sent = await send_from_cli(hive, reader, "the build is green")

    assert "the build is green" in text(received[0])
    assert data(received[0])["ids"] == [sent["results"][0]["id"]]


async def test_a_cancelled_wait_leaves_the_next_message_unread_for_the_next_check(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        reader = await address_of(session, "impatient")
        with anyio.move_on_after(0.5):
            await session.call_tool("check_inbox", {"wait_secs": 600}, meta={"sessionId": "impatient"})
        # The server reads the cancellation before this next request, so once this answers the
        # abandoned call can no longer take the message that follows.
        await call(session, "whoami", as_="impatient")
        sent = await send_from_cli(hive, reader, "are you still there?")
        inbox = await call(session, "check_inbox", as_="impatient")

    assert data(inbox)["ids"] == [sent["results"][0]["id"]]


async def test_a_hook_stamped_session_id_names_the_session_and_is_not_a_tool_argument(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive, client="claude-code") as session:
        other = await address_of(session, "other")
        me = data(await call(session, "whoami", _hook_session_id="claude-sess"))
        sent = data(await call(session, "send_message", to=other, message="hi", _hook_session_id="claude-sess"))

    assert (me["key"], me["via"], me["agent"]) == ("claude-sess", "hook", "claude-code")
    assert sent["from"] == me["address"]


async def test_meta_wins_over_a_stamped_argument(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        me = data(await call(session, "whoami", as_="from-meta", _hook_session_id="from-hook"))

    assert (me["key"], me["via"]) == ("from-meta", "meta")


async def test_without_an_exact_id_the_spawn_environment_names_the_session(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive, client="claude-code", env={"CLAUDE_CODE_SESSION_ID": "claude-env-1"}) as session:
        first = data(await call(session, "whoami"))
        second = data(await call(session, "whoami"))

    assert (first["key"], first["via"]) == ("claude-env-1", "env")
    assert (second["key"], second["via"]) == ("claude-env-1", "env")


async def test_a_session_a_hook_registered_under_the_harness_process_is_found_by_ancestry(make_hive: Any) -> None:
    hive = make_hive()
    hive.start()
    # This test process plays the harness: it is the MCP server's parent, as claude or gemini is.
    registered = hive.request(
        {"id": 1, "op": "register", "session": {"key": "gemini-hook-1", "agent": "gemini", "pid": os.getpid()}}
    )
    assert registered["ok"], registered
    async with hive_mcp(hive, client="gemini-cli-mcp-client") as session:
        me = data(await call(session, "whoami"))

    assert (me["key"], me["via"]) == ("gemini-hook-1", "ancestry")


async def test_a_stale_environment_id_gives_way_to_the_session_hooks_started_after_clear(make_hive: Any) -> None:
    hive = make_hive()
    hive.start()
    for request in (
        {"op": "register", "session": {"key": "old", "agent": "claude-code", "pid": os.getpid()}},
        {"op": "end", "session": "old"},
        {"op": "register", "session": {"key": "new", "agent": "claude-code", "pid": os.getpid()}},
    ):
        assert hive.request({"id": 1, **request})["ok"]
    async with hive_mcp(hive, client="claude-code", env={"CLAUDE_CODE_SESSION_ID": "old"}) as session:
        me = data(await call(session, "whoami"))

    assert (me["key"], me["via"]) == ("new", "ancestry")


async def test_with_nothing_to_go_on_the_process_gets_one_session_of_its_own(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive, client="Some Editor") as session:
        first = data(await call(session, "whoami"))
        second = data(await call(session, "whoami"))
        team = data(await call(session, "list_team"))

    assert first["via"] == "process"
    assert second["key"] == first["key"]
    assert first["agent"] == "some-editor"
    assert [s["address"] for s in team["sessions"]] == [first["address"]]


async def test_the_sessions_a_server_held_end_when_it_exits(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        await call(session, "whoami", as_="short-lived")
        assert [s["live"] for s in hive.cli_json("who", "--all")["sessions"]] == [True]

    # The sidecar sees the server's connection close on its own schedule: ask until it has.
    with anyio.fail_after(20):
        while (await who_from_cli(hive))["sessions"][0]["live"]:
            pass


async def test_a_health_check_that_only_lists_tools_leaves_no_session_and_a_tool_call_does(make_hive: Any) -> None:
    hive = make_hive('[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n')
    hive.start()
    spawned_by_claude = {"CLAUDECODE": "1", "CLAUDE_CODE_SESSION_ID": "health-check-session"}
    async with hive_mcp(hive, client="claude-code", env=spawned_by_claude) as session:
        assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS

    assert (await who_from_cli(hive))["sessions"] == []
    sent = await anyio.run_process(
        [sys.executable, "-m", "hive.sidecar.cli", "send", "alice/api-claude-code", "hi"], env=hive.env, check=False
    )
    assert sent.returncode == 1 and b"[not_found]" in sent.stderr

    async with hive_mcp(hive, client="claude-code", env=spawned_by_claude) as session:
        me = data(await call(session, "whoami"))
        assert [s["address"] for s in (await who_from_cli(hive))["sessions"]] == [me["address"]]
    assert me["address"] == "alice/api-claude-code"


async def test_list_team_shows_live_sessions_marks_you_and_filters(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        await call(session, "rename", as_="a", name="billing")
        await call(session, "rename", as_="b", name="frontend")
        everyone = await call(session, "list_team", as_="a")
        filtered = data(await call(session, "list_team", as_="a", filter="front"))

    assert [s["address"] for s in data(everyone)["sessions"]] == ["alice/billing", "alice/frontend"]
    assert "- alice/billing (codex)" in text(everyone)
    assert "this is you" in next(line for line in text(everyone).splitlines() if line.startswith("- alice/billing"))
    assert [s["address"] for s in filtered["sessions"]] == ["alice/frontend"]


async def test_rename_changes_the_address_and_a_taken_name_is_a_conflict(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        renamed = data(await call(session, "rename", as_="a", name="API Fixer"))
        taken = await call(session, "rename", as_="b", name="api-fixer")
        me = data(await call(session, "whoami", as_="a"))

    assert renamed["address"] == "alice/api-fixer"
    assert me["address"] == "alice/api-fixer"
    assert error_code(taken) == "conflict"


async def test_ask_user_answers_no_desktop_so_the_agent_asks_in_its_own_session(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        result = await call(session, "ask_user", as_="a", question="Deploy to staging?", about="01JA")

    assert error_code(result) == "no_desktop"


async def test_a_stopped_sidecar_is_started_again_by_the_next_call(make_hive: Any) -> None:
    hive = make_hive()
    async with hive_mcp(hive) as session:
        before = data(await call(session, "whoami", as_="durable"))
        first_pid = hive.pid()
        hive.stop()
        after = data(await call(session, "whoami", as_="durable"))

    assert hive.pid() != first_pid
    assert after["address"] == before["address"]


async def test_a_sidecar_that_cannot_start_is_an_unreachable_tool_error(make_hive: Any) -> None:
    hive = make_hive()
    blocked = hive.home / "not-a-folder"
    blocked.write_text("a file where the state folder should be", encoding="utf-8")
    async with hive_mcp(hive, env={"HIVE_HOME": str(blocked / "home")}) as session:
        result = await call(session, "whoami", as_="a")

    assert error_code(result) == "unreachable"


def test_agent_names_come_from_client_info_then_from_harness_environment_markers() -> None:
    assert agent_name("codex-mcp-client", {}) == "codex"
    assert agent_name("claude-code", {}) == "claude-code"
    assert agent_name("Zed Editor 2", {}) == "zed-editor-2"
    assert (agent_name("cursor", {}), agent_name("pi", {})) == ("cursor", "pi")
    assert agent_name(None, {"OPENCODE": "1"}) == "opencode"
    assert agent_name(None, {"PI_CODING_AGENT": "1"}) == "pi"
    # The first harness's marker wins (a Claude Code session started from opencode's shell).
    assert agent_name(None, {"OPENCODE": "1", "CLAUDECODE": "1", "GEMINI_CLI": "1"}) == "claude-code"
    # Codex's npm marker names no MCP client: Codex's server goes by "agent" without clientInfo.
    assert agent_name(None, {"CODEX_MANAGED_BY_NPM": "1"}) == "agent"
    assert agent_name(None, {}) == "agent"


def test_the_spawn_time_session_hint_is_read_from_the_first_harness_variable_that_holds_one() -> None:
    assert Callers({"PI_SESSION_ID": "p", "GEMINI_SESSION_ID": "g"}).env_hint == "g"
    assert Callers({"PI_SESSION_ID": "p", "CLAUDE_CODE_SESSION_ID": " ", "GEMINI_SESSION_ID": ""}).env_hint == "p"
    assert Callers({"CLAUDE_CODE_SESSION_ID": "c", "GEMINI_SESSION_ID": "g"}).env_hint == "c"
    assert Callers({"HOME": "/tmp"}).env_hint is None


def test_session_ids_are_read_from_codex_and_pi_meta_keys() -> None:
    assert session_from_meta({"sessionId": "a", "threadId": "b"}) == "a"
    assert session_from_meta({"threadId": "b", "progressToken": 3}) == "b"
    assert session_from_meta({"x-codex-turn-metadata": {"session_id": "c"}}) == "c"
    assert session_from_meta({"x-codex-turn-metadata": json.dumps({"session_id": "d"})}) == "d"
    assert session_from_meta({"pi/sessionId": "e"}) == "e"
    assert session_from_meta({"claudecode/toolUseId": "toolu_1", "progressToken": 1}) is None
    assert session_from_meta({"sessionId": "   "}) is None
    # Codex's and pi's keys are tried in that order, the flat keys before the turn metadata.
    assert session_from_meta({"pi/sessionId": "e", "threadId": "b"}) == "b"
    assert session_from_meta({"x-codex-turn-metadata": {"session_id": "c"}, "pi/sessionId": "e"}) == "e"


def test_the_mcp_inspector_cli_lists_the_tools(make_hive: Any, tmp_path: Path) -> None:
    assert INSPECTOR.exists(), (
        f"{INSPECTOR} is missing: install the npm packages in .ci/npm-packages with "
        "`npm install --prefix .cache/npm <spec>` as .ci/run does"
    )
    hive = make_hive()
    hive_script = Path(sys.executable).with_name("hive")
    assert hive_script.exists(), f"no `hive` console script next to {sys.executable}"
    completed = subprocess.run(
        [str(INSPECTOR), "--cli", "-e", f"HIVE_HOME={hive.home}", str(hive_script), "mcp", "--method", "tools/list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": str(tmp_path)},  # the inspector keeps a catalog in HOME
    )

    assert completed.returncode == 0, completed.stderr
    listed = json.loads(completed.stdout)
    assert {tool["name"] for tool in listed["tools"]} == TOOLS


def test_the_mcp_benchmark_runs_and_prints_each_figure_next_to_its_baseline() -> None:
    # tests/bench is not collected; this keeps the script working. Its numbers are not asserted.
    completed = subprocess.run(
        [sys.executable, str(REPO / "tests" / "bench" / "bench_mcp.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    rows = completed.stdout.splitlines()
    for figure in ("sidecar who op (baseline)", "MCP list_team, id in _meta", "MCP list_team, id by ancestry"):
        row = next((line for line in rows if line.startswith(figure)), "")
        assert row.endswith("x") and "nan" not in row, completed.stdout
    assert rows[-1].startswith("stopped the sidecar"), completed.stdout
