"""ask_user against a real notification server: dunst on Xvfb, a private session bus, real clicks.

A sidecar's pop-ups go to its person's own desktop: the one in the environment its person started
it from, or the user's runtime directory's bus; never a bus an asking client names.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hive.sidecar.base.errors import Conflict, HiveError, NoDesktop, from_wire
from tests.conftest import Hive
from tests.sidecar.desktop import Desktop, no_desktop_env, start_sidecar
from tests.sidecar.test_mcp_server import call, data, error_code, hive_mcp, text

pytestmark = pytest.mark.anyio


class Raw:
    """Requests on fresh socket connections, each in a thread, so several can wait at once."""

    def __init__(self, hive: Hive) -> None:
        self.hive = hive

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        reply = await anyio.to_thread.run_sync(lambda: self.hive.request({"id": 1, "op": op, **args}, timeout=60))
        if not reply["ok"]:
            raise from_wire(reply["error"])
        return dict(reply["result"])


@asynccontextmanager
async def client(hive: Hive) -> AsyncIterator[Raw]:
    yield Raw(hive)


async def register(c: Raw, key: str, cwd: str, agent: str = "codex") -> str:
    result = await c.call("register", session={"key": key, "agent": agent, "cwd": cwd})
    return str(result["address"])


async def answered_after(action: Callable[[], None], ask: Callable[[], Any]) -> Any:
    """Start ``ask``, do ``action`` (a click) once the pop-up is up, and return what ``ask`` returned."""
    outcome: dict[str, Any] = {}

    async def run() -> None:
        try:
            outcome["result"] = await ask()
        except HiveError as exc:
            outcome["error"] = exc

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await anyio.to_thread.run_sync(action)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def sidecar_without_desktop(hive: Hive, runtime: Path) -> None:
    start_sidecar(hive, no_desktop_env(runtime))


def sidecar_on_desktop(hive: Hive, desktop: Desktop) -> None:
    """The sidecar as its person starts it from a terminal on their desktop: its pop-ups go there."""
    start_sidecar(hive, desktop.env)


async def test_approve_and_deny_clicked_in_the_pop_up_are_the_answers_ask_user_returns(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_on_desktop(hive, desktop)
    async with hive_mcp(hive) as mcp:
        approved = await answered_after(
            lambda: desktop.click("approve"), lambda: call(mcp, "ask_user", as_="a", question="Deploy to staging?")
        )
        denied = await answered_after(
            lambda: desktop.click("deny"), lambda: call(mcp, "ask_user", as_="a", question="Drop the old table?")
        )

    assert data(approved)["answer"] == "approved" and text(approved).startswith("Your person approved.")
    assert data(approved)["question"] == "Deploy to staging?"
    assert data(denied)["answer"] == "denied" and text(denied).startswith("Your person denied it.")


async def test_without_a_client_desktop_the_sidecar_finds_the_users_own_bus(make_hive: Any, desktop: Desktop) -> None:
    hive = make_hive()
    sidecar_without_desktop(hive, desktop.runtime)  # only XDG_RUNTIME_DIR/bus leads to the desktop
    async with client(hive) as c:
        await register(c, "s1", "/src/api")
        result = await answered_after(
            lambda: desktop.click("deny"), lambda: c.call("ask", session="s1", question="Merge it?")
        )
    assert result["answer"] == "denied"


async def test_a_forged_action_invoked_from_another_bus_client_is_ignored(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    from jeepney import DBusAddress, HeaderFields, new_signal
    from jeepney.bus_messages import message_bus
    from jeepney.io.blocking import open_dbus_connection

    hive = make_hive()
    sidecar_on_desktop(hive, desktop)

    def forge_then_deny() -> None:
        desktop.wait_displayed()
        emitter = DBusAddress("/org/freedesktop/Notifications", interface="org.freedesktop.Notifications")
        with open_dbus_connection(bus=desktop.bus) as forger:
            names = forger.send_and_get_reply(message_bus.ListNames(), timeout=5).body[0]
            for notification_id in range(1, 20):
                # Broadcast, as dbus-send --type=signal does, and addressed to every client directly.
                forger.send(new_signal(emitter, "ActionInvoked", "us", (notification_id, "approve")))
                for name in names:
                    if name.startswith(":"):
                        direct = new_signal(emitter, "ActionInvoked", "us", (notification_id, "approve"))
                        direct.header.fields[HeaderFields.destination] = name
                        forger.send(direct)
            forger.send_and_get_reply(message_bus.GetId(), timeout=5)  # everything above is on the bus
        desktop.click("deny")

    async with client(hive) as c:
        result = await answered_after(forge_then_deny, lambda: c.call("ask", question="Rotate the keys?"))
    assert result["answer"] == "denied"


async def test_closing_the_pop_up_or_letting_it_expire_is_a_clear_non_answer(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_on_desktop(hive, desktop)
    async with client(hive) as c:
        await register(c, "s1", "/src/api")
        closed = await answered_after(desktop.close, lambda: c.call("ask", session="s1", question="Ship?"))
        expired = await c.call("ask", session="s1", question="Ship now?", expire=1)

    assert closed["answer"] == "dismissed" and "not a yes" in closed["note"]
    assert expired["answer"] == "expired" and "not a yes" in expired["note"]


async def test_no_session_bus_is_no_desktop_and_the_agent_is_told_to_ask_in_its_session(
    make_hive: Any, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_without_desktop(hive, empty_runtime)
    async with client(hive) as c:
        await register(c, "s1", "/src/api")
        with pytest.raises(NoDesktop) as raised:
            await c.call("ask", session="s1", question="Deploy?")
        with pytest.raises(NoDesktop) as bogus:
            await c.call(
                "ask",
                session="s1",
                question="Deploy?",
                desktop={"DBUS_SESSION_BUS_ADDRESS": f"unix:path={empty_runtime}/nothing-here"},
            )
    assert raised.value.code == bogus.value.code == "no_desktop"
    assert "in your own session" in raised.value.message


async def test_one_question_per_session_the_same_one_joins_the_wait_a_different_one_is_refused(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_on_desktop(hive, desktop)
    answers: list[str] = []
    async with client(hive) as c:
        await register(c, "s1", "/src/api")
        await register(c, "s2", "/src/web")

        async def ask() -> None:
            answers.append((await c.call("ask", session="s1", question="Tag v2?"))["answer"])

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                await anyio.to_thread.run_sync(desktop.wait_displayed)
                tg.start_soon(ask)
                with pytest.raises(Conflict):
                    await c.call("ask", session="s1", question="Tag v3?")
                other = await answered_after(
                    lambda: (desktop.wait_displayed(2), desktop.click("deny", "web-codex")),
                    lambda: c.call("ask", session="s2", question="Tag v3?"),
                )
                await anyio.to_thread.run_sync(desktop.click, "approve", "api-codex")

    assert other["answer"] == "denied"  # another session's question is its own
    assert answers == ["approved", "approved"]
    assert desktop.displayed() == 0


async def test_an_answer_after_the_call_gave_up_arrives_as_a_message_from_the_persons_terminal(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_on_desktop(hive, desktop)
    async with client(hive) as c:
        await register(c, "s1", "/src/api")
        gave_up = await c.call("ask", session="s1", question="Restart prod?", wait=0.2)
        await anyio.to_thread.run_sync(desktop.click, "approve")
        with anyio.fail_after(10):
            inbox = await c.call("inbox", session="s1", wait=10)

    assert gave_up["answer"] == "waiting" and "alice/terminal" in gave_up["note"]
    (message,) = inbox["messages"]
    assert message["from"] == "alice/terminal"
    assert "Your person approved." in message["body"] and "Restart prod?" in message["body"]


async def test_about_shows_the_teammates_request_first_and_sends_them_the_approval(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_on_desktop(hive, desktop)
    long_request = "May I drop the legacy users table? " + "x" * 600
    async with client(hive) as c:
        api = await register(c, "s1", "/src/api")
        web = await register(c, "s2", "/src/web")
        sent = await c.call("send", **{"from": "s2", "to": api, "body": long_request})
        request_id = sent["results"][0]["id"]
        question = "Let web drop the users table?\u202e\u200b " + "q" * 500
        result = await answered_after(
            lambda: desktop.click("approve"), lambda: c.call("ask", session="s1", question=question, about=request_id)
        )
        inbox = await c.call("inbox", session="s2")

    assert result["answer"] == "approved" and result["from"] == web
    assert len(result["request"]) <= 500 and result["request"].endswith("[…]")
    assert result["request"].startswith("May I drop the legacy users table?")
    assert len(result["question"]) <= 400 and "\u202e" not in result["question"] and "\u200b" not in result["question"]
    assert result["approval"]["to"] == web and result["approval"]["state"] in ("queued", "delivered")
    shown = json.loads(desktop.history())["data"][0][0]["body"]["data"]
    assert shown.index("May I drop") < shown.index("Let web drop") and f"{web} asks" in shown
    (message,) = inbox["messages"]
    assert message["reply_to"] == request_id
    approval = message["approval"]
    assert approval["decision"] == "approved" and approval["approver"] == "alice" and approval["asker"] == web
    assert approval["request"] == result["request"] and approval["question"] == result["question"]
    assert (
        f'<hive-approval from="alice" asker="{web}" about="{request_id}" decision="approved" verified>' in inbox["text"]
    )


async def test_about_must_name_a_message_to_this_session(make_hive: Any, desktop: Desktop, empty_runtime: Path) -> None:
    hive = make_hive()
    sidecar_on_desktop(hive, desktop)
    async with client(hive) as c:
        await register(c, "s1", "/src/api")
        await register(c, "s2", "/src/web")
        sent = await c.call("send", **{"from": "s1", "to": "alice/web-codex", "body": "to web, not to api"})
        with pytest.raises(HiveError) as raised:
            await c.call("ask", session="s1", question="OK?", about=sent["results"][0]["id"])
    assert raised.value.code == "not_found"


# ---- group sends ---------------------------------------------------------------------------


def hive_send(hive: Hive, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", "send", *args],
        env={**env, "HIVE_HOME": str(hive.home)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # no controlling terminal


async def test_a_group_send_from_the_cli_is_confirmed_in_a_pop_up(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_on_desktop(hive, desktop)
    async with client(hive) as c:
        await register(c, "s1", "/src/api")
        await register(c, "s2", "/src/web")
        approved = await answered_after(
            lambda: desktop.click("approve"),
            lambda: anyio.to_thread.run_sync(hive_send, hive, desktop.env, "*", "lunch"),
        )
        shown = json.loads(desktop.history())["data"][0][0]["body"]["data"]
        denied = await answered_after(
            lambda: desktop.click("deny"), lambda: anyio.to_thread.run_sync(hive_send, hive, desktop.env, "*", "again")
        )
        unread = [(await c.call("unread", session=s))["count"] for s in ("s1", "s2")]
        framed = (await c.call("inbox", session="s1"))["text"]

    assert approved.returncode == 0, approved.stderr
    assert "Send this to all 2 sessions on your team?" in shown and "lunch" in shown
    assert denied.returncode == 1 and "not sent" in denied.stderr
    assert unread == [1, 1]
    assert "Typed by alice at a terminal" in framed


async def test_a_group_send_with_neither_desktop_nor_terminal_is_refused(make_hive: Any, empty_runtime: Path) -> None:
    hive = make_hive()
    sidecar_without_desktop(hive, empty_runtime)
    async with client(hive) as c:
        await register(c, "s1", "/src/api")
        result = await anyio.to_thread.run_sync(hive_send, hive, no_desktop_env(empty_runtime), "*", "hello")
        unread = (await c.call("unread", session="s1"))["count"]
    assert result.returncode == 1 and "[refused]" in result.stderr
    assert unread == 0


def test_a_group_send_without_a_desktop_is_confirmed_at_the_clis_own_terminal(
    make_hive: Any, empty_runtime: Path
) -> None:
    from tests.sidecar.terminal import run_in_terminal_answering

    hive = make_hive()
    env = no_desktop_env(empty_runtime, HIVE_HOME=str(hive.home))
    start_sidecar(hive, env)
    for key, cwd in (("s1", "/src/api"), ("s2", "/src/web")):
        assert hive.request({"id": 1, "op": "register", "session": {"key": key, "agent": "codex", "cwd": cwd}})["ok"]
    declined, said_no = run_in_terminal_answering(env, "n", "send", "*", "first")
    confirmed, said_yes = run_in_terminal_answering(env, "y", "send", "*", "second")

    assert declined == 1 and "Send this to all 2 sessions on your team? [y/N]" in said_no
    assert confirmed == 0, said_yes
    unread = [hive.request({"id": 1, "op": "inbox", "session": s})["result"]["messages"] for s in ("s1", "s2")]
    assert [[m["body"] for m in u] for u in unread] == [["second"], ["second"]]


async def test_an_agent_still_cannot_address_a_group(make_hive: Any, desktop: Desktop) -> None:
    hive = make_hive()
    sidecar_without_desktop(hive, desktop.runtime)
    async with client(hive) as c:
        await register(c, "s1", "/src/api")
        await register(c, "s2", "/src/web")
        with pytest.raises(HiveError) as raised:
            await c.call("send", **{"from": "s1", "to": "*", "body": "all of you"})
    assert raised.value.code == "group_refused"
    assert desktop.displayed() == 0


# ---- notify --------------------------------------------------------------------------------


async def test_notify_shows_the_message_once_a_minute_per_sending_person(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_on_desktop(hive, desktop)
    async with hive_mcp(hive) as mcp:
        await call(mcp, "whoami", as_="web")
        first = await call(mcp, "send_message", as_="a", to="alice/terminal", message="build is green", notify=True)
        second = await call(mcp, "send_message", as_="a", to="alice/terminal", message="and deployed", notify=True)
        await anyio.to_thread.run_sync(desktop.wait_displayed)

    assert data(first)["notified"] is True
    assert data(second)["notified"] is False and "last minute" in text(second)
    assert "build is green" in desktop.dunstctl("history") or desktop.displayed() == 1


async def test_notify_without_a_desktop_still_sends_and_says_why_nothing_was_shown(
    make_hive: Any, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_without_desktop(hive, empty_runtime)
    async with hive_mcp(hive) as mcp:
        result = await call(mcp, "send_message", as_="a", to="alice/terminal", message="hi", notify=True)
    assert data(result)["notified"] is False
    assert data(result)["results"][0]["state"] == "queued"
    assert "No notification was shown" in text(result)


async def test_ask_user_with_no_desktop_is_an_error_code_through_mcp(make_hive: Any, empty_runtime: Path) -> None:
    hive = make_hive()
    sidecar_without_desktop(hive, empty_runtime)
    async with hive_mcp(hive) as mcp:
        result = await call(mcp, "ask_user", as_="a", question="Deploy?", about="01JZZZZZZZZZZZZZZZZZZZZZZZ")
    assert error_code(result) == "no_desktop"
    assert "01JZZZZZZZZZZZZZZZZZZZZZZZ" in text(result)


async def test_hive_ask_prints_the_answer_and_exits_0_only_when_approved(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_on_desktop(hive, desktop)

    def hive_ask(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hive.sidecar.cli", "ask", *args],
            env={**desktop.env, "HIVE_HOME": str(hive.home)},
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    approved = await answered_after(
        lambda: desktop.click("approve"), lambda: anyio.to_thread.run_sync(hive_ask, "Release", "1.2?")
    )
    denied = await answered_after(
        lambda: desktop.click("deny"), lambda: anyio.to_thread.run_sync(hive_ask, "Release 1.3?", "--json")
    )

    assert approved.returncode == 0 and approved.stdout.startswith("Your person approved."), approved.stderr
    assert denied.returncode == 3 and json.loads(denied.stdout)["answer"] == "denied"


async def test_a_client_that_stops_waiting_gets_the_answer_later_as_a_message(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    hive = make_hive()
    sidecar_on_desktop(hive, desktop)
    async with client(hive) as c:
        await register(c, "s1", "/src/api")

        async def stop_once_shown() -> None:
            await anyio.to_thread.run_sync(desktop.wait_displayed)
            assert (await c.call("ask_stop", session="s1"))["stopped"] == 1

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_once_shown)
                stopped = await c.call("ask", session="s1", question="Rebase main?")
        await anyio.to_thread.run_sync(desktop.click, "deny")
        inbox = await c.call("inbox", session="s1", wait=10)

    assert stopped["answer"] == "waiting"
    assert [m["from"] for m in inbox["messages"]] == ["alice/terminal"]
    assert "Your person denied it." in inbox["messages"][0]["body"]


# ---- across machines: notify, and the loop guard ------------------------------------------


def team_with_bob_at_his_desktop(
    make_hive: Any, desktop: Desktop, runtime: Path, bob_config: str = ""
) -> tuple[Hive, Hive]:
    """alice's sidecar with no desktop, bob's started inside the desktop (as his session would start it)."""
    from tests.sidecar.test_mesh import MESH, linked, wait_for

    alice = make_hive(MESH, person="alice")
    start_sidecar(alice, no_desktop_env(runtime))
    bob = make_hive(MESH + bob_config, person="bob")
    start_sidecar(bob, desktop.env)
    alice.cli("init", "acme", "--as", "alice", check=True)
    bob.cli("join", alice.cli_json("invite")["link"], "--as", "bob", check=True)
    wait_for(lambda: linked(alice) == 1 and linked(bob) == 1, what="the two machines linked")
    return alice, bob


def wait_until(check: Callable[[], Any], what: str) -> Any:
    from tests.sidecar.test_mesh import wait_for

    return wait_for(check, timeout=60, what=what)


def notify_rows(hive: Hive) -> list[dict[str, Any]]:
    rows = hive.request({"id": 1, "op": "gate_ledger", "person": "bob"})["result"]["rows"]
    return [r for r in rows if r["source"] == "notify"]


async def test_notify_pops_up_on_the_recipients_own_machine_and_its_gate_records_why(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    alice, bob = team_with_bob_at_his_desktop(make_hive, desktop, empty_runtime)
    async with client(bob) as b, client(alice) as a:
        target = await register(b, "b1", "/src/api")
        await register(a, "a1", "/src/web")
        await anyio.to_thread.run_sync(
            wait_until,
            lambda: any(s["address"] == target for s in alice.request({"id": 1, "op": "who"})["result"]["sessions"]),
            "bob's session at alice's",
        )
        sent = await a.call("send", **{"from": "a1", "to": target, "body": "the migration is ready", "notify": True})
        await anyio.to_thread.run_sync(desktop.wait_displayed, 1, 30.0)
        rows = await anyio.to_thread.run_sync(wait_until, lambda: notify_rows(bob), "bob's gate to record it")

    assert sent["results"][0]["state"] in ("queued", "delivered")
    assert sent["notified"] is False and "Asked bob's machine to show a notification: m2" in sent["notify_note"]
    assert desktop.displayed() == 1
    assert [(r["outcome"], r["rule"]) for r in rows] == [("deliver", "now.requested")]


async def test_notify_for_a_teammate_in_quiet_hours_shows_nothing_and_says_so_in_their_ledger(
    make_hive: Any, desktop: Desktop, empty_runtime: Path
) -> None:
    quiet = '[gate.people.bob]\nquiet = "00:00-23:59"\ntimezone = "UTC"\n'
    alice, bob = team_with_bob_at_his_desktop(make_hive, desktop, empty_runtime, quiet)
    async with client(bob) as b, client(alice) as a:
        target = await register(b, "b1", "/src/api")
        await register(a, "a1", "/src/web")
        await anyio.to_thread.run_sync(
            wait_until,
            lambda: any(s["address"] == target for s in alice.request({"id": 1, "op": "who"})["result"]["sessions"]),
            "bob's session at alice's",
        )
        await a.call("send", **{"from": "a1", "to": target, "body": "ping", "notify": True})
        rows = await anyio.to_thread.run_sync(wait_until, lambda: notify_rows(bob), "bob's gate to record it")
        unread = (await b.call("unread", session="b1"))["count"]

    assert [(r["outcome"], r["rule"]) for r in rows] == [("digest", "quiet")]
    assert unread == 1  # the message itself is there; only the pop-up was held back
    assert desktop.displayed() == 0


def notify_titles(hive: Hive, person: str) -> list[tuple[str, str, str]]:
    """(title, outcome, rule) of each notify decision in ``hive``'s gate ledger for ``person``."""
    rows = hive.request({"id": 1, "op": "gate_ledger", "person": person})["result"]["rows"]
    return [(r["title"], r["outcome"], r["rule"]) for r in rows if r["source"] == "notify"]


async def test_notify_shows_on_each_online_machine_of_the_recipient_person_and_on_no_one_elses(
    make_hive: Any, desktop: Desktop, empty_runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.sidecar.desktop import running_desktop
    from tests.sidecar.test_mesh import MESH, linked, who

    monkeypatch.setenv("HIVE_KEYRING", "off")  # several machines on one host: each key in its own folder
    alice, bob1, bob2, carol = (make_hive(MESH, person=p) for p in ("alice", "bob", "bob", "carol"))
    with running_desktop() as second_desktop:
        start_sidecar(alice, no_desktop_env(empty_runtime))
        start_sidecar(bob1, desktop.env)  # bob at two desks, each machine on its own screen
        start_sidecar(bob2, second_desktop.env)
        start_sidecar(carol, no_desktop_env(empty_runtime))
        alice.cli("init", "acme", "--as", "alice", check=True)
        bob1.cli("join", alice.cli_json("invite")["link"], "--as", "bob", check=True)
        bob2.cli("join", bob1.cli_json("invite", "--own-machine")["link"], check=True)
        carol.cli("join", alice.cli_json("invite")["link"], "--as", "carol", check=True)
        for machine in (alice, bob1, bob2, carol):
            await anyio.to_thread.run_sync(wait_until, lambda m=machine: linked(m) == 3, "all four machines linked")
        async with client(alice) as a, client(bob1) as b, client(carol) as c:
            await register(a, "a1", "/src/web")
            to_bob = await register(b, "b1", "/src/api")
            to_carol = await register(c, "c1", "/src/docs")
            await anyio.to_thread.run_sync(
                wait_until,
                lambda: {to_bob, to_carol} <= {s["address"] for s in who(alice)},
                "bob's and carol's sessions at alice's",
            )
            sent = await a.call(
                "send", **{"from": "a1", "to": to_bob, "body": "the migration is ready", "notify": True}
            )
            await anyio.to_thread.run_sync(desktop.wait_displayed, 1, 30.0)
            await anyio.to_thread.run_sync(second_desktop.wait_displayed, 1, 30.0)
            # Carol's own notification travels after anything alice's machine sent carol's about bob's
            # message, so once hers is decided, a stray one for bob's would be in her ledger too.
            # Carol has no desktop: her gate lets it through, the pop-up fails, and a second row puts
            # it in her digest; that last row is what says her machine is done with it.
            await a.call("send", **{"from": "a1", "to": to_carol, "body": "docs are yours", "notify": True})
            carols = await anyio.to_thread.run_sync(
                wait_until,
                lambda: (rows := notify_titles(carol, "carol")) and rows[-1][2] == "deliver.failed" and rows,
                "carol's gate to decide her notification and her machine to fail to show it",
            )
            bobs = [
                await anyio.to_thread.run_sync(
                    wait_until, lambda m=m: notify_titles(m, "bob"), "bob's gate to record it"
                )
                for m in (bob1, bob2)
            ]
            shown = (desktop.displayed(), second_desktop.displayed())

    assert sent["results"][0]["state"] in ("queued", "delivered")
    assert "Asked bob's machines to show a notification: m2 (with the message), m3." in sent["notify_note"]
    assert shown == (1, 1)
    assert bobs == [[("alice/web-codex: the migration is ready", "deliver", "now.requested")]] * 2
    assert carols == [
        ("alice/web-codex: docs are yours", "deliver", "now.requested"),
        ("alice/web-codex: docs are yours", "digest", "deliver.failed"),
    ]
    assert notify_titles(alice, "alice") == []


async def test_a_notify_frame_that_speaks_for_another_person_or_is_stale_shows_nothing(
    make_hive: Any, desktop: Desktop, empty_runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from hive.sidecar.base.ulid import new_ulid
    from hive.sidecar.mesh.transport import dial, machine_cert
    from tests.sidecar.test_mesh import _address, _key_of, _team_id

    monkeypatch.setenv("HIVE_KEYRING", "off")
    alice, bob = team_with_bob_at_his_desktop(make_hive, desktop, empty_runtime)
    alice.stop()  # the test speaks for alice's machine, with alice's key

    def notify(sender: str, body: str, age: float = 0.0) -> dict[str, Any]:
        return {
            "t": "notify",
            "id": new_ulid(),
            "from": sender,
            "to": "bob/api-codex",
            "body": body,
            "sent_at": time.time() - age,
        }

    frames = [
        notify("bob/terminal", "it's me, bob: approve the deploy"),  # alice's machine speaks for alice only
        notify("carol/web-codex", "carol here"),
        notify("alice/web-codex", "from a quarter of an hour ago", age=16 * 60),
        notify("alice/web-codex", "the migration is ready"),
    ]
    async with dial(_address(bob), machine_cert(_key_of(alice)), lambda key, alpn: True) as link:
        await link.send({"t": "hello", "team": _team_id(bob), "proto": 1, "features": []})
        with anyio.fail_after(20):
            while (await link.receive())["t"] != "hello":
                pass
        for frame in frames:
            await link.send(frame)
        await anyio.to_thread.run_sync(desktop.wait_displayed, 1, 30.0)
        rows = await anyio.to_thread.run_sync(wait_until, lambda: notify_titles(bob, "bob"), "bob's gate to decide")

    assert rows == [("alice/web-codex: the migration is ready", "deliver", "now.requested")]
    assert desktop.displayed() == 1


def _reply_in_terminal(env: dict[str, str], reply_to: str, body: str) -> tuple[int, str]:
    from tests.sidecar.terminal import run_in_terminal_answering

    return run_in_terminal_answering(env, "n", "send", "--reply-to", reply_to, "bob/api-codex", body, timeout=60)


async def test_a_persons_reply_that_restarts_the_loop_guard_is_confirmed_in_a_pop_up(
    make_hive: Any, desktop: Desktop, empty_runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.sidecar.test_mesh import form_team, send, who

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(desktop.runtime))  # the people start their sidecars on this desktop
    alice, bob = form_team(make_hive, ["alice", "bob"], {"alice": "loop_limit = 2\n", "bob": "loop_limit = 2\n"})
    ok = [
        alice.request({"id": 1, "op": "register", "session": {"key": "a1", "agent": "codex", "cwd": "/src/web"}}),
        bob.request({"id": 1, "op": "register", "session": {"key": "b1", "agent": "codex", "cwd": "/src/api"}}),
    ]
    assert all(r["ok"] for r in ok)
    await anyio.to_thread.run_sync(wait_until, lambda: len(who(alice)) == 2 and len(who(bob)) == 2, "both sessions")
    one = send(alice, "bob/api-codex", "ping", **{"from": "a1"})
    two = send(bob, "alice/web-codex", "pong", **{"from": "b1", "reply_to": one["id"]})
    three = send(alice, "bob/api-codex", "ping again", **{"from": "a1", "reply_to": two["id"]})
    assert three["state"] == "refused"
    env = {**desktop.env, "HIVE_HOME": str(alice.home)}  # alice at a terminal on her desktop

    denied = await answered_after(
        lambda: desktop.click("deny"), lambda: anyio.to_thread.run_sync(_reply_in_terminal, env, two["id"], "go on")
    )
    shown = json.loads(desktop.history())["data"][0][0]["body"]["data"]
    still = send(alice, "bob/api-codex", "ping again", **{"from": "a1", "reply_to": two["id"]})
    approved = await answered_after(
        lambda: desktop.click("approve"), lambda: anyio.to_thread.run_sync(_reply_in_terminal, env, two["id"], "go on")
    )
    after = send(bob, "alice/web-codex", "pong, with alice's blessing", **{"from": "b1", "reply_to": two["id"]})

    assert denied[0] == 1 and "not sent" in denied[1]
    assert "It restarts the loop guard" in shown and "go on" in shown
    assert still["state"] == "refused"  # a denied override leaves the guard as it was
    assert approved[0] == 0, approved[1]
    assert after["state"] == "queued", after


# ---- an agent's own notification server -----------------------------------------------------

STAND_IN = """import sys
from jeepney import DBusAddress, HeaderFields, MessageType, new_method_return, new_signal
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection

NAME, PATH = "org.freedesktop.Notifications", "/org/freedesktop/Notifications"
conn = open_dbus_connection(bus=sys.argv[1])
conn.send_and_get_reply(message_bus.RequestName(NAME), timeout=5)
print("ready", flush=True)
shown = 0
while True:
    message = conn.receive()
    if message.header.message_type is not MessageType.method_call:
        continue
    member = message.header.fields.get(HeaderFields.member)
    if member == "GetCapabilities":
        conn.send(new_method_return(message, "as", (["actions", "body"],)))
    elif member == "Notify":
        shown += 1
        open(sys.argv[2], "a").write("shown\\n")
        conn.send(new_method_return(message, "u", (shown,)))
        conn.send(new_signal(DBusAddress(PATH, interface=NAME), "ActionInvoked", "us", (shown, "approve")))
    elif member == "CloseNotification":
        conn.send(new_method_return(message))
"""


# A notification server whose first answer is malformed (the action as a list) and whose second denies.
MALFORMED_THEN_DENY = STAND_IN.replace(
    'conn.send(new_signal(DBusAddress(PATH, interface=NAME), "ActionInvoked", "us", (shown, "approve")))',
    'conn.send(new_signal(DBusAddress(PATH, interface=NAME), "ActionInvoked", "uas", (shown, ["approve"])))\n'
    '        conn.send(new_signal(DBusAddress(PATH, interface=NAME), "ActionInvoked", "us", (shown, "deny")))',
)


@contextmanager
def a_stand_in_that_clicks_approve(root: Path, script: str = STAND_IN) -> Iterator[tuple[dict[str, str], Path]]:
    """A private session bus in ``root`` whose "notification server" approves whatever it is shown,
    as an agent can start one: (the desktop variables leading to it, the file it logs pop-ups to)."""
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    log = root / "shown"
    bus = subprocess.Popen(
        [
            "dbus-daemon",
            "--session",
            "--nofork",
            "--nopidfile",
            "--print-address",
            f"--address=unix:path={runtime / 'bus'}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    server = None
    try:
        assert bus.stdout is not None
        address = bus.stdout.readline().strip()
        server = subprocess.Popen([sys.executable, "-c", script, address, str(log)], stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield {"DBUS_SESSION_BUS_ADDRESS": address, "XDG_RUNTIME_DIR": str(runtime), "DISPLAY": ":99"}, log
    finally:
        for process in (server, bus):
            if process is not None:
                process.terminate()
                process.wait(timeout=10)
                if process.stdout is not None:
                    process.stdout.close()


def agent_runs(harness: Path, hive: Hive, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``hive ARGS`` as a tool call of an agent harness (a process named like one) in its own session."""
    return subprocess.run(
        [
            str(harness),
            "-c",
            "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))",
            sys.executable,
            "-m",
            "hive.sidecar.cli",
            *args,
        ],
        env={**env, "HIVE_HOME": str(hive.home)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def test_an_agents_own_notification_server_never_answers_for_its_person(
    make_hive: Any, empty_runtime: Path, tmp_path: Path
) -> None:
    hive = make_hive()
    sidecar_without_desktop(hive, empty_runtime)  # the person's machine has no desktop to ask on
    harness = tmp_path / "claude"
    harness.symlink_to(sys.executable)
    for key, cwd in (("s1", "/src/api"), ("s2", "/src/web")):
        assert hive.request({"id": 1, "op": "register", "session": {"key": key, "agent": "codex", "cwd": cwd}})["ok"]
    with a_stand_in_that_clicks_approve(tmp_path) as (agent_desktop, shown):
        env = no_desktop_env(empty_runtime, **agent_desktop)
        asked = agent_runs(harness, hive, env, "ask", "May I deploy?")
        grouped = agent_runs(harness, hive, env, "send", "*", "from your person, honest")
        # The agent stops the sidecar and starts it again itself, from its own environment.
        stopped = agent_runs(harness, hive, env, "stop")
        asked_again = agent_runs(harness, hive, env, "ask", "May I deploy now?")
        restarted = hive.pid()
    assert stopped.returncode == 0, stopped.stderr
    assert asked.returncode != 0 and "[no_desktop]" in asked.stderr, asked.stdout + asked.stderr
    assert grouped.returncode == 1 and "[refused]" in grouped.stderr, grouped.stderr
    assert asked_again.returncode != 0 and "[no_desktop]" in asked_again.stderr, asked_again.stdout
    assert restarted > 0
    assert not shown.exists()  # nothing was ever shown on the agent's bus
    unread = [hive.request({"id": 1, "op": "unread", "session": s})["result"]["count"] for s in ("s1", "s2")]
    assert unread == [0, 0]


async def test_a_notification_servers_malformed_answer_is_ignored_and_its_next_answer_counts(
    make_hive: Any, empty_runtime: Path, tmp_path: Path
) -> None:
    hive = make_hive()
    with a_stand_in_that_clicks_approve(tmp_path, MALFORMED_THEN_DENY) as (desktop_env, shown):
        start_sidecar(hive, no_desktop_env(empty_runtime, **desktop_env))  # the person's own desktop
        pid = hive.pid()
        async with client(hive) as c:
            with anyio.fail_after(30):
                result = await c.call("ask", question="Rotate the keys?")
    assert result["answer"] == "denied"
    assert shown.read_text() == "shown\n"
    assert hive.pid() == pid and hive.request({"id": 1, "op": "status"})["ok"]
