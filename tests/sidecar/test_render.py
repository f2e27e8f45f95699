"""The words under every frame: who sent the message, and how to answer when it can be answered."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from hive.sidecar.base.defang import attr
from hive.sidecar.mail.render import FOOTERS, REPLIES, Message, footer, frames

from ..conftest import Hive, run_in_terminal
from .test_mesh import ok, register, send

REPLY = re.compile(r'Reply with send_message to "([^"]+)" if useful\.$')


def message(kind: str, sender: str) -> Message:
    return Message(
        id="01JA0000000000000000000000",
        sender=sender,
        sender_kind=kind,
        sender_agent="codex",
        sender_repo="",
        recipient="bob/api-codex",
        reply_to=None,
        body="hi",
        wake=True,
        sent_at=0.0,
    )


@given(
    kind=st.sampled_from(sorted(FOOTERS)),
    person=st.text(min_size=1, max_size=20),
    name=st.text(min_size=1, max_size=20),
)
def test_every_sender_kind_has_a_footer_and_only_an_address_that_takes_mail_is_offered(
    kind: str, person: str, name: str
) -> None:
    sender = f"{person}/{name}"
    line = footer(message(kind, sender))
    reply = REPLY.search(line)
    if kind in REPLIES:
        assert reply is not None and reply.group(1) == attr(sender)
    else:
        assert reply is None and "send_message" not in line
    assert line.startswith(FOOTERS[kind].split("{")[0])


def test_a_kind_the_table_does_not_know_reads_as_an_agents() -> None:
    assert footer(message("robot", "bob/x")) == footer(message("agent", "bob/x"))


def test_each_kind_of_sender_is_named_truly_and_an_answer_to_its_footer_reaches_it(hive: Hive) -> None:
    reader = register(hive, "r", "/src/api")
    writer = register(hive, "s", "/src/web")
    assert hive.cli("inbox", "--as", "ci").returncode == 0  # opens alice/ci
    send(hive, reader, "from an agent", **{"from": "s"})
    code, output = run_in_terminal(hive, "send", reader, "typed by alice")
    assert code == 0, output
    assert hive.cli("send", reader, "from a script", script=True).returncode == 0
    assert hive.cli("send", "--from", "ci", reader, "build 12 is green", script=True).returncode == 0
    shown = ok(hive, "inbox", session="r")
    text = frames_by_body(shown["text"])
    assert text["from an agent"].endswith(
        f'From alice\'s agent {writer}. Reply with send_message to "{writer}" if useful.'
    )
    assert "Typed by alice at a terminal." in text["typed by alice"]
    assert "From alice's script alice/terminal." in text["from a script"]
    assert "From alice's script alice/ci." in text["build 12 is green"]
    for body, frame in text.items():
        found = REPLY.search(frame)
        assert found is not None, frame
        answer = send(hive, found.group(1), f"re: {body}", **{"from": "r"})
        assert answer["state"] != "refused", answer
    assert [m["body"] for m in ok(hive, "inbox", session="s", peek=True)["messages"]] == ["re: from an agent"]
    assert sorted(m["body"] for m in ok(hive, "inbox", peek=True)["messages"]) == [
        "re: from a script",
        "re: typed by alice",
    ]
    assert [m["body"] for m in ok(hive, "inbox", peek=True, **{"as": "ci"})["messages"]] == ["re: build 12 is green"]


def frames_by_body(text: str) -> dict[str, str]:
    out = {}
    for block in text.split("\n\n"):
        body = block.split("\n")[1]
        out[body] = block
    return out


def test_frames_keep_one_footer_per_message() -> None:
    text = frames([message("agent", "bob/a"), message("hive", "hive/overlap"), message("script", "bob/ci")])
    assert text.count("</hive-message>") == 3
    assert text.count("Reply with send_message") == 2
