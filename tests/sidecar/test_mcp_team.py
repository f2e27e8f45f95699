"""The team ops as an MCP tool, driven by the official MCP client against real sidecars on loopback:
an agent founds, invites, shows, removes and leaves for its person, and sends files."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import Implementation

from .desktop import Desktop, start_sidecar
from .test_mcp_server import HIVE_MCP, _stderr_file, call, data, error_code, hive_mcp, text
from .test_mesh import _TEAM, MESH, inbox, linked, ok, register, who
from .test_observe import step

pytestmark = pytest.mark.anyio
T = TypeVar("T")


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")
    _TEAM.clear()


async def until(check: Any, what: str) -> Any:
    """Poll a blocking check off the event loop until it holds (the sidecars are other processes)."""
    with anyio.fail_after(60):
        while True:
            value = await anyio.to_thread.run_sync(check)
            if value:
                return value
            await anyio.sleep(0.1)


@contextlib.asynccontextmanager
async def mcp_in(hive: Any, project: Path) -> AsyncIterator[Client]:
    """``hive mcp`` started by a harness working in ``project`` (outside the state folder): a
    stand-in process named ``codex`` there, which runs the server on its own stdio and waits."""
    harness = project.parent / "bin" / "codex"
    harness.parent.mkdir(exist_ok=True)
    harness.unlink(missing_ok=True)
    harness.symlink_to(sys.executable)
    runs = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
    params = StdioServerParameters(
        command=str(harness),
        args=["-c", runs, *HIVE_MCP],
        cwd=project,
        env={"HIVE_HOME": str(hive.home), "HIVE_KEYRING": "off"},
    )
    with _stderr_file(hive.home / "mcp.stderr") as errlog:
        async with Client(
            stdio_client(params, errlog=errlog), client_info=Implementation(name="codex-mcp-client", version="1.0")
        ) as session:
            yield session


async def approved(desktop: Desktop, request: Awaitable[T]) -> T:
    """``request``'s answer, once the person approved the team change it pops up on their desktop."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(anyio.to_thread.run_sync, desktop.click, "approve", "confirm a team change"))
        return await request


async def test_an_agent_founds_invites_shows_removes_and_leaves_for_its_person(
    make_hive: Any, desktop: Desktop
) -> None:
    """Each change waits for the person's Approve in a pop-up on their desktop (the one alice's
    sidecar was started in); reading the team does not."""
    alice, bob, carol = (make_hive(MESH, person=p) for p in ("alice", "bob", "carol"))
    start_sidecar(alice, desktop.env)
    for machine in (bob, carol):
        machine.start()
    _TEAM.extend((alice, bob, carol))
    async with hive_mcp(alice) as session:
        assert "in no team" in text(await call(session, "team", as_="a1"))
        founded = data(
            await approved(desktop, call(session, "team", as_="a1", action="init", name="acme", person="alice"))
        )
        assert founded["team"]["name"] == "acme"
        refused = await approved(desktop, call(session, "team", as_="a1", action="init", name="other"))
        assert error_code(refused) == "conflict"
        once = data(await approved(desktop, call(session, "team", as_="a1", action="invite", once=True)))
        assert once["kind"] == "once" and "hive join" in once["line"]
        link = data(await approved(desktop, call(session, "team", as_="a1", action="invite")))["link"]
        await anyio.to_thread.run_sync(lambda: bob.cli("join", link, "--as", "bob", check=True))
        await anyio.to_thread.run_sync(lambda: carol.cli("join", once["link"], "--as", "carol", check=True))
        await until(lambda: linked(alice) == 2, "alice linked to bob and carol")
        shown = text(await call(session, "team", as_="a1"))
        assert "- bob: m2 (online" in shown and "- carol: m3 (online" in shown
        assert "this machine" in shown

        removed = data(await approved(desktop, call(session, "team", as_="a1", action="remove", name="bob")))
        assert removed["removed"] == ["bob@m2"] and removed["link_replaced"]
        await until(lambda: ok(bob, "team_show")["team"] is None, "bob to learn he was removed")
        assert "Departed: bob@m2" in text(await call(session, "team", as_="a1"))

        assert error_code(await call(session, "team", as_="a1", action="join", link="hive1:nonsense")) in (
            "bad_request",
            "conflict",
        )
        assert error_code(await call(session, "team", as_="a1", action="remove")) == "bad_request"
        new = data(await approved(desktop, call(session, "team", as_="a1", action="new_link")))
        assert new["link"] != link

        left = data(await approved(desktop, call(session, "team", as_="a1", action="leave")))
        assert left == {"left": "acme"}
        await until(
            lambda: {d["person"] for d in ok(carol, "team_show")["departed"]} >= {"alice"}, "carol to hear alice left"
        )


async def test_an_agent_of_a_machine_that_joined_sends_a_file_of_its_repo(make_hive: Any, tmp_path: Path) -> None:
    alice, bob = make_hive(MESH, person="alice"), make_hive(MESH, person="bob")
    for machine in (alice, bob):
        machine.start()
        _TEAM.append(machine)
    await anyio.to_thread.run_sync(lambda: alice.cli("init", "acme", "--as", "alice", check=True))
    line = (await anyio.to_thread.run_sync(lambda: alice.cli_json("invite")))["line"]
    await anyio.to_thread.run_sync(lambda: register(alice, "a1", "/src/web"))
    project = tmp_path / "api"
    (project / ".git").mkdir(parents=True)
    (project / "trace.log").write_text("401 at refresh\n")
    # The person joins (an agent would need their confirmation: test_team), then the agent works.
    await anyio.to_thread.run_sync(lambda: bob.cli("join", line, "--as", "bob", check=True))
    async with mcp_in(bob, project) as session:
        await until(lambda: any(s["address"] == "alice/web-codex" for s in who(bob)), "alice's session")
        # Its harness's hook reported the folder it works in: the folder the agent may attach from.
        await anyio.to_thread.run_sync(lambda: step(bob, "codex", "start", "b1", str(project)))
        sent = data(
            await call(
                session, "send_message", as_="b1", to="alice/web-codex", message="see the trace", files=["trace.log"]
            )
        )
        assert sent["results"][0]["state"] in ("queued", "delivered")
        assert (
            error_code(
                await call(
                    session,
                    "send_message",
                    as_="b1",
                    to="alice/web-codex",
                    message="x",
                    files=[str(bob.home / "config.toml")],
                )
            )
            == "attachment_outside"
        )
    [message] = await anyio.to_thread.run_sync(lambda: inbox(alice, "web-codex"))
    assert await anyio.Path(message["files"][0]).read_text() == "401 at refresh\n"
