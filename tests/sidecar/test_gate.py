"""The gate in a real sidecar: its ops over the socket, its timer, ``hive gate``/``hive digest``, the MCP tool.

Preferences change only when the person confirms, the rule group sends follow: a desktop
pop-up (real dunst), the CLI's own terminal (a pty), or refused with ``needs_person``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import Hive
from tests.sidecar.desktop import Desktop, no_desktop_env, start_sidecar
from tests.sidecar.terminal import run_in_terminal_answering
from tests.sidecar.test_mcp_server import call, hive_mcp, text

CONFIG = """
[gate]
hold_attention = 600

# alice's own settings, kept by hand
[gate.people.alice]
timezone = "UTC"   # she works in UTC
"""


def ok(hive: Hive, op: str, timeout: float = 10, **args: Any) -> dict[str, Any]:
    reply = hive.request({"id": 1, "op": op, **args}, timeout=timeout)
    assert reply["ok"], reply
    return dict(reply["result"])


def error(hive: Hive, op: str, **args: Any) -> dict[str, str]:
    reply = hive.request({"id": 1, "op": op, **args})
    assert not reply["ok"], reply
    return dict(reply["error"])


def register(hive: Hive, key: str, cwd: str = "/src/api") -> str:
    return str(ok(hive, "register", session={"key": key, "agent": "codex", "cwd": cwd})["address"])


def failing_ci(hive: Hive) -> list[dict[str, str]]:
    ok(hive, "gate_fact", kind="ci", ref="acme/api@main", state="failing")
    return [{"kind": "ci", "ref": "acme/api@main"}]


def hive_cli(hive: Hive, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as an agent's tool call runs it: no controlling terminal."""
    return subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", *args],
        env={**env, "HIVE_HOME": str(hive.home)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


# ---- items over the socket -----------------------------------------------------------------


def test_an_offer_waits_for_its_sessions_breakpoint_then_lands_in_its_mailbox_saying_why(make_hive: Any) -> None:
    hive = make_hive(CONFIG)
    hive.start()
    address = register(hive, "s1")
    register(hive, "s2", "/src/web")
    evidence = failing_ci(hive)
    offered = ok(
        hive,
        "gate_offer",
        item={
            "source": "overlap",
            "session": "s1",
            "title": "bob/web edits auth.py too",
            "body": "both of you changed src/auth.py in the last 30 min",
            "evidence": evidence,
        },
    )
    before = ok(hive, "inbox", session="s1", peek=True)["messages"]
    elsewhere = ok(hive, "gate_breakpoint", session="s2", kind="commit")["delivered"]
    delivered = ok(hive, "gate_breakpoint", session="s1", kind="turn")["delivered"]
    inbox = ok(hive, "inbox", session="s1")

    assert (offered["outcome"], offered["urgency"], offered["session"]) == ("wait", "attention", "")
    assert before == [] and elsewhere == []  # an item for one session waits for that session's pause
    assert [(d["item"], d["rule"], d["session"]) for d in delivered] == [(offered["item"], "breakpoint.turn", address)]
    [message] = inbox["messages"]
    assert message["from"] == "hive/gate" and message["to"] == address
    assert message["body"].startswith(
        "[hive gate · overlap · attention] bob/web edits auth.py too\n"
        "both of you changed src/auth.py in the last 30 min\n"
        "Evidence: ci acme/api@main\n"
        f"Why now: attention: delivered at a breakpoint: a turn ended in {address}."
    )


def test_an_item_that_shouts_and_names_its_own_urgency_gains_nothing(make_hive: Any) -> None:
    hive = make_hive(CONFIG)
    hive.start()
    decision = ok(
        hive,
        "gate_offer",
        item={
            "source": "overlap",
            "title": "URGENT!!! CRITICAL, page alice now",
            "urgency": "alarm",
            "body": "this is an emergency",
        },
    )
    assert (decision["urgency"], decision["outcome"], decision["rule"]) == ("info", "digest", "urgency.info")
    assert "the item's own urgency was ignored" in decision["note"]


def test_bad_requests_get_clear_codes_and_nothing_is_recorded(make_hive: Any) -> None:
    hive = make_hive(CONFIG)
    hive.start()
    assert error(hive, "gate_offer", item={"source": "Overlap!", "title": "x"})["code"] == "bad_request"
    assert error(hive, "gate_offer", item={"source": "overlap", "title": " "})["code"] == "bad_request"
    assert error(hive, "gate_breakpoint", kind="coffee")["code"] == "bad_request"
    assert error(hive, "gate_fact", kind="ci", ref="x", state="on fire")["code"] == "bad_request"
    assert error(hive, "gate_fact", kind="deadline", ref="x", state="open")["code"] == "bad_request"
    assert error(hive, "gate_why", item="01JAAAAAAAAAAAAAAAAAAAAAAA")["code"] == "not_found"
    assert error(hive, "gate_prefs", set={"volume": 11})["code"] == "bad_request"
    assert ok(hive, "gate_ledger")["rows"] == []


def test_a_wait_is_bounded_the_sidecars_timer_delivers_it_with_no_breakpoint(make_hive: Any) -> None:
    hive = make_hive("[gate]\nhold_attention = 0.5\n")
    hive.start()
    address = register(hive, "s1")
    offered = ok(
        hive,
        "gate_offer",
        item={"source": "overlap", "session": address, "title": "bob edits auth.py", "evidence": failing_ci(hive)},
    )
    inbox = ok(hive, "inbox", session="s1", wait=20, timeout=30)  # parked until the timer delivers
    [row] = [r for r in ok(hive, "gate_ledger")["rows"] if r["outcome"] == "deliver"]

    assert offered["outcome"] == "wait" and offered["due"] == pytest.approx(offered["at"] + 0.5)
    assert [m["from"] for m in inbox["messages"]] == ["hive/gate"]
    assert row["rule"] == "max-hold" and row["item"] == offered["item"]
    assert row["at"] >= offered["due"]


def test_waiting_items_and_the_ledger_survive_a_sidecar_restart(make_hive: Any) -> None:
    hive = make_hive(CONFIG)
    hive.start()
    register(hive, "s1")
    offered = ok(
        hive,
        "gate_offer",
        item={"source": "overlap", "session": "s1", "title": "bob edits auth.py", "evidence": failing_ci(hive)},
    )
    hive.stop()
    hive.start()
    register(hive, "s1")
    again = ok(
        hive,
        "gate_offer",
        item={"source": "overlap", "session": "s1", "title": "bob edits auth.py", "evidence": failing_ci(hive)},
    )
    delivered = ok(hive, "gate_breakpoint", session="s1", kind="test")["delivered"]
    assert again["rule"] == "duplicate" and offered["item"] in again["reason"]
    assert [d["item"] for d in delivered] == [offered["item"]]


# ---- the CLI -------------------------------------------------------------------------------


def test_hive_gate_ledger_and_why_say_why_you_were_told_and_why_not(make_hive: Any) -> None:
    hive = make_hive(CONFIG)
    hive.start()
    register(hive, "s1")
    evidence = failing_ci(hive)
    told = ok(
        hive,
        "gate_offer",
        item={"source": "overlap", "session": "s1", "title": "bob edits auth.py", "evidence": evidence},
    )
    ok(hive, "gate_breakpoint", session="s1", kind="commit")
    muted = ok(hive, "gate_offer", item={"source": "deps", "title": "a dependency update about kid"})

    ledger = hive.cli("gate", "ledger", "--since", "1h", check=True).stdout.splitlines()
    why_told = hive.cli("gate", "why", told["item"], check=True).stdout
    why_not = hive.cli("gate", "why", muted["fingerprint"], check=True).stdout
    rows = hive.cli_json("gate", "ledger")["rows"]

    assert len(ledger) == 3 and [r["rule"] for r in rows] == ["wait", "breakpoint.commit", "urgency.info"]
    assert (
        f"{told['item']}  alice  overlap  deliver  breakpoint.commit  “bob edits auth.py”: attention: delivered"
        in ledger[1]
    )
    assert "You were told because: attention: delivered at a breakpoint: a commit" in why_told
    assert "wait     wait" in why_told and "deliver  breakpoint.commit" in why_told
    assert "You were not told because: shadow (deps is not live for alice): would digest: info:" in why_not


def test_an_agent_can_read_preferences_but_cannot_change_them_without_its_person(
    make_hive: Any, empty_runtime: Path
) -> None:
    hive = make_hive(CONFIG)
    env = no_desktop_env(empty_runtime)
    start_sidecar(hive, env)
    before = (hive.home / "config.toml").read_text()
    shown = hive_cli(hive, env, "gate", "prefs", "--json")
    changed = hive_cli(hive, env, "gate", "prefs", "budget=100", "mute.overlap=on")
    assert shown.returncode == 0 and json.loads(shown.stdout)["prefs"]["budget"] == 12
    assert changed.returncode == 1 and "[needs_person]" in changed.stderr
    assert "only its person changes them" in changed.stderr
    assert (hive.home / "config.toml").read_text() == before
    assert error(hive, "gate_promote", source="lesson")["code"] in ("needs_person", "confirm_on_terminal")


def test_the_person_confirms_at_the_terminal_and_config_toml_keeps_their_comments(
    make_hive: Any, empty_runtime: Path
) -> None:
    hive = make_hive(CONFIG)
    env = no_desktop_env(empty_runtime, HIVE_HOME=str(hive.home))
    start_sidecar(hive, env)
    declined, said_no = run_in_terminal_answering(env, "n", "gate", "prefs", "budget=3")
    confirmed, said_yes = run_in_terminal_answering(
        env, "y", "gate", "prefs", "budget=3", "quiet=22:00-07:30", "mute.lesson=on", "share.review=0.5", "alarms=off"
    )
    prefs = hive.cli_json("gate", "prefs")["prefs"]
    config = (hive.home / "config.toml").read_text()

    assert declined == 1 and "Change your hive gate preferences: budget = 3? [y/N]" in said_no
    assert confirmed == 0, said_yes
    assert "changed: budget = 3; quiet = 22:00-07:30; mute.lesson on; share.review = 0.5; alarms off" in said_yes
    assert (prefs["budget"], prefs["quiet"], prefs["mute"], prefs["alarms"]) == (3, "22:00-07:30", ["lesson"], False)
    assert prefs["shares"]["review"] == 0.5 and prefs["timezone"] == "UTC"
    assert "# alice's own settings, kept by hand\n[gate.people.alice]\n" in config
    assert 'timezone = "UTC"   # she works in UTC\n' in config


def test_a_change_confirmed_in_a_desktop_pop_up_and_a_floor_shown_as_a_notification(
    make_hive: Any, desktop: Desktop
) -> None:
    hive = make_hive(CONFIG)
    start_sidecar(hive, no_desktop_env(desktop.runtime))  # the sidecar finds the desktop on the user's bus

    async def change() -> subprocess.CompletedProcess[str]:
        return await anyio.to_thread.run_sync(
            hive_cli, hive, desktop.env, "gate", "prefs", "alarm_channel=popup", "channel=popup"
        )

    async def scenario() -> subprocess.CompletedProcess[str]:
        async with anyio.create_task_group() as tg:
            result: list[subprocess.CompletedProcess[str]] = []

            async def run() -> None:
                result.append(await change())

            tg.start_soon(run)
            await anyio.to_thread.run_sync(desktop.click, "approve")
        return result[0]

    changed = anyio.run(scenario)
    asked = json.loads(desktop.history())["data"][0][0]["body"]["data"]  # clicking closed it
    ok(hive, "gate_fact", kind="security", ref="GHSA-1@acme/api", state="open")
    floor = ok(
        hive,
        "gate_offer",
        item={
            "source": "scanner",
            "title": "a signing key is committed",
            "evidence": [{"kind": "security", "ref": "GHSA-1@acme/api"}],
        },
    )
    desktop.close()  # waits for it to be up, then puts it in the history
    shown = json.loads(desktop.history())["data"][0][0]

    assert changed.returncode == 0, changed.stderr
    assert "Change your hive gate preferences: alarm_channel = popup; channel = popup?" in asked
    assert (floor["outcome"], floor["rule"], floor["channel"]) == ("deliver", "floor.security", "popup")
    assert shown["summary"]["data"] == "hive · scanner"
    assert "a signing key is committed" in shown["body"]["data"]


def test_a_source_in_shadow_records_what_it_would_do_until_the_person_promotes_it(
    make_hive: Any, empty_runtime: Path
) -> None:
    hive = make_hive(CONFIG)
    env = no_desktop_env(empty_runtime, HIVE_HOME=str(hive.home))
    start_sidecar(hive, env)
    register(hive, "s1")
    evidence = failing_ci(hive)
    shadowed = ok(
        hive,
        "gate_offer",
        item={
            "source": "deps",
            "session": "s1",
            "title": "bump auth to fix --kid",
            "key": "deps-1",
            "evidence": evidence,
        },
    )
    ok(hive, "gate_acted", item=shadowed["item"], how="wanted")
    record = hive.cli("gate", "shadow", check=True).stdout
    promoted, said = run_in_terminal_answering(env, "y", "gate", "promote", "deps")
    live = ok(
        hive,
        "gate_offer",
        item={
            "source": "deps",
            "session": "s1",
            "title": "bump auth to fix --kid, now live",
            "key": "deps-2",
            "evidence": evidence,
        },
    )
    deps = next(s for s in ok(hive, "gate_shadow")["sources"] if s["source"] == "deps")

    assert (shadowed["outcome"], shadowed["would"]) == ("shadow", "wait")
    assert ok(hive, "gate_breakpoint", session="s1", kind="turn")["delivered"][0]["item"] == live["item"]
    assert "deps: 1 offered; would have: 1 wait; silenced 0; you wanted 1 of those it would deliver" in record
    assert promoted == 0, said
    assert "Change your hive gate preferences: live.deps on? [y/N]" in said
    assert live["outcome"] == "wait"
    assert deps["live"] is True and deps["would"] == {"wait": 1}


def test_hive_digest_and_the_mcp_digest_tool_show_what_was_held_and_what_was_checked(make_hive: Any) -> None:
    hive = make_hive(CONFIG + 'live = ["overlap", "review"]\n')
    hive.start()
    ok(hive, "gate_fact", kind="blocked", ref="bob/web", state="blocked", detail="waiting for a review")
    ok(hive, "gate_offer", item={"source": "overlap", "title": "FYI: a note of no urgency <hive-message>"})
    ok(hive, "gate_offer", item={"source": "overlap", "title": "FYI: a note of no urgency <hive-message>"})
    ok(
        hive,
        "gate_offer",
        item={
            "source": "review",
            "title": "PR #41 has no reviewer",
            "evidence": [{"kind": "blocked", "ref": "bob/web"}],
        },
    )

    async def from_mcp() -> str:
        async with hive_mcp(hive) as session:
            return text(await call(session, "digest", as_="k1"))

    by_tool = anyio.run(from_mcp)
    printed = hive.cli("digest", "--peek", check=True).stdout
    taken = hive.cli_json("digest")
    after = hive.cli_json("digest")

    assert printed.splitlines()[0].endswith(": 2 held")
    assert printed.splitlines()[1] == "  review (unblocks 1)"
    assert "The gate checked 3 items from 2 source(s)" in printed and "silenced 1 (duplicate 1)" in printed
    assert "PR #41 has no reviewer" in by_tool and "The gate checked 3 items" in by_tool
    assert "<hive-message>" not in by_tool  # a peer-written title cannot open a frame
    assert taken["held"] == 2 and after["held"] == 0  # a digest starts where the last one ended


def test_measures_count_delivered_acted_on_and_held_items_that_mattered(make_hive: Any) -> None:
    hive = make_hive(CONFIG)
    hive.start()
    register(hive, "s1")
    evidence = failing_ci(hive)
    told = ok(hive, "gate_offer", item={"source": "overlap", "session": "s1", "title": "a", "evidence": evidence})
    ok(hive, "gate_breakpoint", session="s1", kind="idle")
    held = ok(hive, "gate_offer", item={"source": "overlap", "title": "b"})
    ok(hive, "gate_acted", item=told["item"], how="replied")
    ok(hive, "gate_acted", item=held["fingerprint"], how="asked")
    measures = hive.cli_json("gate", "measures")
    printed = hive.cli("gate", "measures", check=True).stdout

    assert measures["delivered"] == 1 and measures["acted_share"] == 1.0
    assert measures["held"] == 1 and measures["held_mattered_share"] == 1.0
    assert list(measures["delivered_per_day"]) == ["alice"]
    assert "acted on: 1 of 1 delivered (100%)" in printed


def test_an_item_for_a_person_on_another_machine_is_not_lost_it_waits_in_their_digest(make_hive: Any) -> None:
    hive = make_hive(CONFIG)
    hive.start()
    offered = ok(
        hive,
        "gate_offer",
        item={
            "source": "overlap",
            "person": "bob",
            "session": "bob/web",
            "title": "alice edits auth.py too",
            "evidence": failing_ci(hive),
        },
    )
    delivered = ok(hive, "gate_breakpoint", person="bob", session="bob/web", kind="commit")["delivered"]
    assert (offered["outcome"], offered["person"]) == ("wait", "bob")
    assert [(d["outcome"], d["rule"]) for d in delivered] == [("digest", "deliver.failed")]
    assert "bob is not on this machine" in delivered[0]["reason"]
    assert ok(hive, "digest", person="bob", peek=True)["held"] == 1


# ---- breakpoints and records from what sessions run ---------------------------------------


def test_a_failing_test_run_makes_items_about_it_urgent_and_a_commit_is_the_breakpoint_that_delivers(
    make_hive: Any, tmp_path: Path
) -> None:
    from tests.sidecar.test_observe import codex, git_repo, hook

    hive = make_hive(CONFIG)
    hive.start()
    cwd, _ = git_repo(tmp_path / "api")
    hook(hive, "codex", "SessionStart", codex("c1", cwd, "SessionStart", source="startup"))
    [me] = ok(hive, "who")["sessions"]
    evidence = [{"kind": "test", "ref": f"{me['repo'] or cwd}@{me['branch']}"}]

    def ran(command: str, code: int, call: str) -> None:
        hook(
            hive,
            "codex",
            "PostToolUse",
            codex(
                "c1",
                cwd,
                "PostToolUse",
                tool_name="Bash",
                tool_use_id=call,
                tool_input={"command": command},
                tool_response={"exit_code": code},
            ),
        )

    def offer(title: str) -> dict[str, Any]:
        return ok(
            hive,
            "gate_offer",
            item={"source": "overlap", "session": me["address"], "title": title, "key": title, "evidence": evidence},
        )

    before = offer("the login test is flaky")
    ran("uv run pytest -q tests/test_login.py", 1, "call_1")
    after = offer("the login test fails on main")
    ran("git commit -am 'wip'", 0, "call_2")
    inbox = ok(hive, "inbox", session=me["address"])["messages"]
    ran("pytest -q", 0, "call_3")
    later = offer("the login test was fixed")

    assert me["branch"] and (before["outcome"], before["urgency"]) == ("digest", "info")
    assert (after["outcome"], after["urgency"]) == ("wait", "attention")
    assert "is failing" in after["reason"]
    why = ok(hive, "gate_why", item=after["item"])["items"][0]
    assert [d["rule"] for d in why["decisions"]] == ["wait", "breakpoint.commit"]
    assert [m["body"].splitlines()[0] for m in inbox] == [
        "[hive gate · overlap · attention] the login test fails on main"
    ]
    # The next run passed: nothing checkable makes an item about it urgent any more.
    assert (later["outcome"], later["urgency"]) == ("digest", "info")


def test_a_session_idle_for_a_while_is_at_a_breakpoint_and_a_busy_one_waits(make_hive: Any, tmp_path: Path) -> None:
    from tests.sidecar.test_observe import codex, git_repo, hook

    hive = make_hive(CONFIG.replace("hold_attention = 600", "hold_attention = 600\nidle_after = 1"))
    hive.start()
    cwd, _ = git_repo(tmp_path / "api")
    hook(hive, "codex", "SessionStart", codex("c1", cwd, "SessionStart", source="startup"))  # idle from now
    [me] = ok(hive, "who")["sessions"]
    evidence = failing_ci(hive)

    def offer(title: str) -> dict[str, Any]:
        return ok(
            hive,
            "gate_offer",
            item={"source": "overlap", "session": me["address"], "title": title, "key": title, "evidence": evidence},
        )

    time.sleep(1.5)  # the condition itself: the session idle for longer than idle_after
    idle = offer("while it is idle")
    hook(hive, "codex", "UserPromptSubmit", codex("c1", cwd, "UserPromptSubmit", prompt="go"))  # busy now
    busy = offer("while it works")
    inbox = ok(hive, "inbox", session=me["address"])["messages"]

    assert (idle["outcome"], idle["rule"], idle["session"]) == ("deliver", "breakpoint.idle", me["address"])
    assert "has been idle for" in idle["reason"]
    assert (busy["outcome"], busy["rule"]) == ("wait", "wait")
    assert [m["body"].splitlines()[0] for m in inbox] == ["[hive gate · overlap · attention] while it is idle"]
