"""What this machine's sidecar tells its gate: breakpoints and ``test`` records from the commands
sessions ran, which session is idle, and who owns the code an item is about.

Breakpoints come from the hooks: a turn ending (the Stop hook), and from the commands a session
ran (:func:`observed`): a test run finishing, a commit, a pull request opened. A session its hooks
say has been idle for ``idle_after`` seconds (60) is at a breakpoint already: an item that would
wait for one is delivered to it at once (``breakpoint.idle``, :func:`idle_session`). Report only
real ones: a false breakpoint costs more than a missed one, because a waiting item's bound
delivers it anyway.

A security finding reaches the roster persons who own the files in its ``file`` evidence too
(:func:`code_owners`, by the repository's CODEOWNERS).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ..base.defang import one_line
from ..mail.delivery import deliver_note
from ..person.dialog import clip
from ..presence.events import Event, store_events
from ..team import codeowners
from .model import Evidence, Item
from .running import GATES

if TYPE_CHECKING:
    from ..mail.host import MailHost
    from ..sessions.registry import Session

OVERLAP_SENDER = "hive/overlap"

# ---- what sessions' hooks show: breakpoints and test records -------------------------------

_START = r"(?:^|[\s;&|(!])"
# Test runners as people type them; a wrapper (``uv run``, ``npx``, ``python -m``) is allowed before.
TEST_COMMAND = re.compile(
    _START + r"(?:pytest|py\.test|tox|nox|jest|vitest|mocha|rspec|phpunit|ctest|"
    r"(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?test|cargo\s+(?:test|nextest)|go\s+test|make\s+(?:test|check)|"
    r"mvn\s+(?:test|verify)|\S*gradlew?\s+test|dotnet\s+test|deno\s+test)(?:$|[\s;&|)])"
)
COMMIT_COMMAND = re.compile(_START + r"git(?:\s+-[cC]\s+\S+)*\s+commit(?:$|[\s;&|)])")
PR_COMMAND = re.compile(_START + r"gh\s+pr\s+create(?:$|[\s;&|)])")


def ref_for_tests(repo: str, branch: str) -> str:
    """The ref of the ``test`` record for a repository's branch: what items name as evidence."""
    return f"{repo}@{branch}" if branch else repo


async def on_events(sidecar: MailHost, session: Session, events: Sequence[Event]) -> None:
    """The gate's ``on_events`` (daemon/features.py): commands a session ran (:func:`observed`)
    and overlaps presence noticed (:func:`offer_overlap`)."""
    if any(event.action == "command.executed" for event in events):
        await observed(sidecar, session, events)
    for event in events:
        if event.action == "overlap.noticed":
            await offer_overlap(sidecar, session, event)


async def offer_overlap(sidecar: MailHost, session: Session, noticed: Event) -> None:
    """Offer an overlap notice to the gate (source ``overlap``); delivered to the session's mailbox
    as a note from ``hive/overlap``, and the outcome recorded as ``overlap.offered``."""
    gate = GATES.get(sidecar)
    if gate is None:
        return
    facts = json.loads(noticed.detail or "{}")
    other, repo, path = str(facts.get("other") or ""), str(facts.get("repo") or ""), noticed.path
    address = sidecar.sessions.address(session)
    ago = max(0, int((noticed.at - float(facts.get("at") or noticed.at)) // 60))
    title = f"{one_line(other, 80)} also modified {one_line(path, 200)} ({ago} min ago)"
    body = (
        f"hive noticed that {one_line(other, 80)} modified {one_line(path, 200)} in {one_line(repo, 200)} "
        f"{ago} min ago, and this session modified it too. Coordinate with send_message to "
        f'"{one_line(other, 80)}" before the edits collide.'
    )
    if "overlap" not in gate.deliverers:
        gate.register("overlap", lambda item, decision: _deliver_overlap(sidecar, item))
    # The overlap is a record hive itself observed (both sessions' modify events), which is what
    # lets the gate rate it above info without taking the proposer's word for it.
    await gate.record("overlap", f"{repo}:{path}", "open")
    decision = await gate.offer(
        Item(
            source="overlap",
            person=sidecar.settings.person,
            session=address,
            title=title,
            body=body,
            evidence=(Evidence("overlap", f"{repo}:{path}"), Evidence("file", f"{repo}:{path}")),
            key=f"overlap:{repo}:{path}:{other}",
            proposer=OVERLAP_SENDER,
            data={"session": session.key, "other": other, "path": path},
        )
    )
    offered = Event(
        at=time.time(),
        session=session.key,
        harness=session.agent,
        action="overlap.offered",
        path=path,
        method="hook",
        fidelity="inferred",
        detail=json.dumps(
            {"other": other, "outcome": decision.outcome, "rule": decision.rule, "item": decision.item_id}
        ),
    )
    await store_events(sidecar.store, [offered])


async def _deliver_overlap(sidecar: MailHost, item: Item) -> None:
    """Put the notice in the session's mailbox (turn tier: shown at its next hook, recorded injected then)."""
    await deliver_note(sidecar, item.session, f"{item.title}\n{item.body}", sender=OVERLAP_SENDER, agent="hive")


async def observed(sidecar: MailHost, session: Any, events: Iterable[Any]) -> None:
    """Breakpoints and records from the commands a session ran (``observe.ingest`` calls this):
    a test run finishing is a ``test`` breakpoint and, with its exit code, a passing or failing
    ``test`` record for the repository's branch; a commit and an opened pull request are
    breakpoints too. Only what the hooks report is used: no command output is read."""
    gate = GATES.get(sidecar)
    if gate is None:
        return
    address = sidecar.sessions.address(session)
    for event in events:
        command = getattr(event, "command", "")
        if getattr(event, "action", "") != "command.executed" or not command:
            continue
        code = getattr(event, "exit_code", None)
        kinds = []
        if TEST_COMMAND.search(command):
            if code is not None:
                await gate.record(
                    "test",
                    ref_for_tests(session.repo or session.cwd, session.branch),
                    "passing" if code == 0 else "failing",
                    detail=clip(command, 120),
                )
            kinds.append("test")
        if code in (0, None) and COMMIT_COMMAND.search(command):
            kinds.append("commit")
        if code in (0, None) and PR_COMMAND.search(command):
            kinds.append("pr")
        for kind in kinds:
            await gate.breakpoint(sidecar.settings.person, address, kind)


def idle_session(sidecar: MailHost, item: Item, idle_after: float) -> str:
    """The address of a live session on this machine that ``item`` may go to and whose hooks say
    has been idle for ``idle_after`` seconds: its own session, or for the person any of theirs."""
    from ..presence.observe import OBSERVED

    if item.person != sidecar.settings.person:
        return ""
    now = time.time()
    for session in sidecar.sessions.by_key.values():
        seen = OBSERVED.of(sidecar).get(session.key)
        if seen is None or seen.state != "idle" or now - seen.since < idle_after:
            continue
        if not sidecar.sessions.is_live(session):
            continue
        address = sidecar.sessions.address(session)
        if not item.session or item.session == address:
            return address
    return ""


# ---- the owner of the code -----------------------------------------------------------------


async def code_owners(sidecar: MailHost, item: Item) -> list[tuple[str, str]]:
    """The roster persons who own the files in ``item``'s evidence, by their repository's CODEOWNERS.

    ``file`` evidence is ``repo:path`` (the repository as sessions name it, or its folder) or an
    absolute path; a repository is found through this machine's sessions in it.
    """
    wanted: dict[str, list[str]] = defaultdict(list)  # repository root -> paths in it
    for evidence in item.evidence:
        if evidence.kind != "file":
            continue
        for root, path in _file_places(sidecar, evidence.ref):
            wanted[root].append(path)
    if not wanted:
        return []
    team = getattr(sidecar, "team", None)
    roster = getattr(team, "roster", None)
    people = set(roster.people()) if roster is not None else set()
    people.add(sidecar.settings.person)

    def look() -> list[tuple[str, str]]:
        aliases = codeowners.aliases_from_config(sidecar.paths.config)
        found: list[tuple[str, str]] = []
        for root, paths in wanted.items():
            rules = codeowners.rules_of(root)
            for path in paths:
                rule = codeowners.rule_for(rules, path)
                if rule is None:
                    continue
                for owner in rule.owners:
                    person = codeowners.person_for(owner, people, aliases)
                    if person and all(p != person for p, _ in found):
                        found.append((person, f"CODEOWNERS line {rule.line} gives {path} to {owner}"))
        return found

    return await anyio.to_thread.run_sync(look)


def _file_places(sidecar: MailHost, ref: str) -> list[tuple[str, str]]:
    """(repository root, path in it) for a ``file`` evidence ref."""
    if ref.startswith("/"):
        root = _git_root(ref)
        return [(root, os.path.relpath(ref, root))] if root else []
    repo, sep, path = ref.partition(":")
    if not sep or not path:
        return []
    if repo.startswith("/"):
        root = _git_root(repo)
        return [(root, os.path.relpath(os.path.join(repo, path), root))] if root else []
    roots = {_git_root(s.cwd) for s in sidecar.sessions.by_key.values() if s.repo == repo and s.cwd}
    return [(root, path) for root in sorted(r for r in roots if r)]


def _git_root(path: str) -> str:
    """The nearest folder at or above ``path`` that holds ``.git``; "" if none."""
    current = os.path.abspath(path)
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return ""
        current = parent
