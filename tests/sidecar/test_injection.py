"""What hive puts into a model's context unasked is capped (characters per reply and per session per
hour, from the harness's descriptor): a backlog goes in once, capped, with a line naming what
waits, and the rest is there to pull. A real sidecar, hooks as the hook client sends them."""

from __future__ import annotations

from hive.integrations import registry

from ..conftest import Hive
from .test_mesh import ok
from .test_observe import claude, hook_printing


def test_fifty_queued_messages_make_one_capped_injection_and_the_rest_wait_for_a_pull(hive: Hive) -> None:
    start = hook_printing(hive, "claude-code", "SessionStart", claude("s-cap", "/src/api", "SessionStart"))
    [session] = ok(hive, "who")["sessions"]  # the one session on this machine
    address = session["address"]
    bodies = [f"note {n}: " + "the build on main is red again, see the failing step. " * 6 for n in range(50)]
    for body in bodies:
        ok(hive, "send", to=address, body=body)
    cap = registry.harness("claude-code").tiers().inject_cap
    first = hook_printing(hive, "claude-code", "UserPromptSubmit", claude("s-cap", "/src/api", "UserPromptSubmit"))
    injected = first["stdout"]
    assert 0 < len(first["ids"]) < 50
    assert len(injected) <= cap + 200  # the cap counts the text; the harness's JSON wrapping adds a little
    assert f"{50 - len(first['ids'])} more messages waiting: call check_inbox" in injected
    # The next hook does not repeat the backlog's line, nor pour in the next batch past the hour's cap.
    pulled = ok(hive, "inbox", session=start["session"])["messages"]
    assert {m["id"] for m in pulled}.isdisjoint(first["ids"])
    assert len(pulled) + len(first["ids"]) == 50


def test_a_message_under_the_cap_goes_in_whole_with_no_line_about_waiting_mail(hive: Hive) -> None:
    hook_printing(hive, "claude-code", "SessionStart", claude("s-one", "/src/api", "SessionStart"))
    [session] = ok(hive, "who")["sessions"]  # the one session on this machine
    address = session["address"]
    ok(hive, "send", to=address, body="the staging deploy is done")
    reply = hook_printing(hive, "claude-code", "UserPromptSubmit", claude("s-one", "/src/api", "UserPromptSubmit"))
    assert len(reply["ids"]) == 1 and "the staging deploy is done" in reply["stdout"]
    assert "more message" not in reply["stdout"]


def test_past_the_hours_cap_the_watcher_parks_instead_of_waking_the_session(hive: Hive) -> None:
    start = hook_printing(hive, "claude-code", "SessionStart", claude("s-hour", "/src/api", "SessionStart"))
    [session] = ok(hive, "who")["sessions"]
    tiers = registry.harness("claude-code").tiers()
    body = "the nightly build failed on the migration step again; logs are attached in the ticket. " * 20
    given = 0
    while given < tiers.inject_hour:  # spend the hour's allowance through hooks, as a busy day would
        for _ in range(5):
            ok(hive, "send", to=session["address"], body=body)
        reply = hook_printing(hive, "claude-code", "UserPromptSubmit", claude("s-hour", "/src/api", "UserPromptSubmit"))
        if not reply["ids"]:
            break
        given += len(reply["stdout"])
    ok(hive, "send", to=session["address"], body="one more")
    payload = claude("s-hour", "/src/api", "SessionStart")
    woke = ok(hive, "watch", harness="claude-code", event="watch", payload=payload, env={}, wait=1)
    assert not woke.get("ids"), woke  # it waited out its second instead of waking the model
    assert ok(hive, "inbox", session=start["session"], peek=True)["messages"]  # the mail waits for a pull
