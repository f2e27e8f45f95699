"""What in a Codex rollout proves that a model call had pushed mail (``codex_push.verdict``).

The items have the shapes Codex 0.171.0 writes (measured on ``codex app-server``: a turn/start
into an idle thread, a turn/steer during a tool call): the pushed text as a user message when it
enters the thread's history, the model's answer after it, ``task_started`` / ``task_complete`` /
``turn_aborted`` events around each turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hive.sidecar.mail.codex_push import Pending, verdict

ID = "01M91EXXN36D5D0N5R5S9GESMG"
OTHER = "01M91EYVK031FY5XDZ6MXM9ZGN"


def user(text: str) -> dict[str, Any]:
    return {
        "type": "response_item",
        "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    }


def pushed_text(*ids: str) -> dict[str, Any]:
    return user("\n".join(f'<hive-message from="bob/web-codex" id="{i}">hi</hive-message>' for i in ids))


def answer() -> dict[str, Any]:
    return {
        "type": "response_item",
        "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
    }


def tool_call() -> dict[str, Any]:
    return {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command"}}


def tool_output() -> dict[str, Any]:
    return {"type": "response_item", "payload": {"type": "function_call_output", "output": "done"}}


def event(kind: str, turn: str) -> dict[str, Any]:
    if kind == "task_started":
        return {"type": "event_msg", "payload": {"type": kind, "turn_attribution": {"turn_id": turn}}}
    return {"type": "event_msg", "payload": {"type": kind, "turn_id": turn}}


def pending(turn: str = "", *ids: str) -> Pending:
    return Pending(ids or (ID,), Path("rollout.jsonl"), 0, turn)


def test_a_pushed_text_the_model_answered_after_is_seen() -> None:
    items = [event("task_started", "t1"), pushed_text(ID), answer(), event("task_complete", "t1")]
    assert verdict(pending("t1"), items) == "seen"


def test_a_tool_call_after_the_pushed_text_is_a_model_answer_too() -> None:
    assert verdict(pending("t1"), [pushed_text(ID), tool_call()]) == "seen"


def test_a_pushed_text_in_the_history_with_no_answer_yet_is_still_waiting() -> None:
    # Recorded as the turn's input, the request sent; the model has not answered.
    assert verdict(pending("t1"), [event("task_started", "t1"), pushed_text(ID)]) == "waiting"


def test_an_answer_before_the_pushed_text_entered_the_history_proves_nothing() -> None:
    # A steer during a tool call: the model's earlier call and the tool's output come first.
    assert verdict(pending("t1"), [tool_call(), tool_output(), pushed_text(ID)]) == "waiting"


def test_a_turn_aborted_before_the_model_answered_loses_the_pushed_text() -> None:
    items = [event("task_started", "t1"), pushed_text(ID), event("turn_aborted", "t1")]
    assert verdict(pending("t1"), items) == "lost"


def test_a_steered_turn_that_ended_without_taking_the_text_loses_it() -> None:
    assert verdict(pending("t1"), [tool_output(), answer(), event("task_complete", "t1")]) == "lost"


def test_codex_queue_while_busy_waits_for_the_turn_after_the_running_one() -> None:
    # The queued text runs as a new turn once the running one ends: that end says nothing.
    running = [tool_output(), answer(), event("task_complete", "t0")]
    assert verdict(pending(""), running) == "waiting"
    assert verdict(pending(""), [*running, event("task_started", "t1"), pushed_text(ID), answer()]) == "seen"
    assert (
        verdict(
            pending(""),
            [*running, event("task_started", "t1"), user("a person's prompt"), answer(), event("task_complete", "t1")],
        )
        == "lost"
    )


def test_every_message_of_one_push_must_be_in_the_text_the_model_answered() -> None:
    assert verdict(pending("t1", ID, OTHER), [pushed_text(ID), answer()]) == "waiting"
    assert verdict(pending("t1", ID, OTHER), [pushed_text(ID, OTHER), answer()]) == "seen"


def test_mail_another_reader_showed_as_developer_context_counts_once_the_model_answered() -> None:
    developer = {
        "type": "response_item",
        "payload": {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": f'id="{ID}"'}]},
    }
    assert verdict(pending("t1"), [developer, answer()]) == "seen"
