"""The one check behind every op that changes the team, the link, a group send, the gate's
preferences, a lesson review or a project membership: the person confirms it, never an agent.

:func:`confirm_by_person` asks in a pop-up on the person's own desktop (``dialog.find_desktop``:
never a bus a client names). Without a desktop, a person at this client's own terminal may
confirm there (``confirm_on_terminal``: the client repeats the request with
``confirmed_on_terminal`` set to the question it asked); with neither, the op is refused. With
``agents_only`` the person's own command at a terminal of theirs (``peer.person_at_terminal``)
needs no second question; anything else, an agent's tool call or a script with no terminal, is asked.

Ops that call it are marked with :func:`asks_person`, so one test can list every op the sidecar
serves and say which ones the person must confirm: a new op has to be classified.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ..base.errors import ConfirmOnTerminal, NeedsPerson, NoDesktop, Refused
from .dialog import Answer, Prompt, backend_for, clean, clip, find_desktop

if TYPE_CHECKING:
    from ..base.host import Connection

CONFIRM_TIME = 120.0  # a confirmation pop-up waits this long
CONFIRM_BODY_LIMIT = 400

Op = TypeVar("Op", bound=Callable[..., Any])


def asks_person(op: Op) -> Op:
    """Mark an op whose change goes through :func:`confirm_by_person`."""
    op.asks_person = True  # type: ignore[attr-defined]
    return op


def is_person_op(handler: Any) -> bool:
    """Whether a handler (an op function, a bound method or a partial of one) is marked."""
    return bool(getattr(getattr(handler, "func", handler), "asks_person", False))


async def confirm_by_person(
    conn: Connection,
    request: Mapping[str, Any],
    question: str,
    *,
    title: str,
    outcome: str,
    hint: str,
    refused: type[Refused] = NeedsPerson,
    quote: str = "",
    prompt: Prompt | None = None,
    agents_only: bool = False,
) -> str:
    """Return how the person confirmed ``question`` ("person", "desktop" or "terminal"), or raise ``refused``.

    ``outcome`` opens every refusal ("not sent", "not changed"); ``hint`` ends it (what the person
    can do instead); ``quote``: what the confirmation is about, shown quoted; ``prompt``: the
    pop-up to show instead of one made of ``title`` and ``question``. ``agents_only``: the
    person's own command, typed at a terminal of theirs, goes ahead unasked ("person").
    """
    if agents_only and conn.at_terminal:
        return "person"
    if conn.at_terminal and request.get("confirmed_on_terminal") == question:
        return "terminal"  # the person typed it at this command's own terminal
    if prompt is None:
        body = f"{question}\n\n“{clip(clean(quote), CONFIRM_BODY_LIMIT)}”" if quote else question
        prompt = Prompt(title=title, body=body, timeout=CONFIRM_TIME)
    try:
        async with backend_for(find_desktop()).show(prompt) as popup:
            answer = await popup.answer()
    except NoDesktop as exc:
        if not conn.at_terminal:
            raise refused(
                f"{outcome}: “{question}” needs confirmation by the person, and there is neither a "
                f"desktop to ask on ({exc.message}) nor a terminal. {hint}"
            ) from exc
        raise ConfirmOnTerminal(question) from exc
    if answer is Answer.APPROVED:
        return "desktop"
    raise refused(f"{outcome}: the person did not confirm “{question}” ({answer.value})")


def group_question(to: str, count: int) -> str:
    sessions = "session" if count == 1 else "sessions"
    every = "the" if count == 1 else "all"
    if to == "*":
        return f"Send this to {every} {count} {sessions} on your team?"
    if to.startswith("repo:"):
        return f"Send this to {every} {count} {sessions} in {to[5:].strip().strip('/')}?"
    return f"Send this to {every} {count} of {to[:-2]}'s {sessions}?"


async def confirm_group(conn: Connection, request: Mapping[str, Any], question: str, body: str) -> str:
    """Return how the person confirmed ``question`` ("desktop" or "terminal"), or raise.

    A group address or a loop-guard override from the person's own mailbox is confirmed in a
    pop-up, not inferred from a ``…/terminal`` sender any process can claim.
    """
    return await confirm_by_person(
        conn,
        request,
        question,
        title="hive · confirm a send",
        quote=body,
        outcome="not sent",
        refused=Refused,
        hint="Send to one session at a time, or run `hive send` in a terminal.",
    )
