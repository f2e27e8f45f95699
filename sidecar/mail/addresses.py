"""Resolving what a sender typed (``bob/api-codex``, ``api-codex``, ``repo:acme/api``, ``*``) to mailboxes.

The directory is a flat list of :class:`Entry` records, one per session hive knows (live or
recently gone); people's own mailboxes (``bob/terminal``, ``bob/ci``) come as one entry per machine
of theirs (hive.sidecar.mail.mailboxes). Resolution prefers live sessions,
never includes the sender in a group, and explains every refusal with the choices the sender
could make instead.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..base.errors import Ambiguous, BadRequest, GroupRefused, NotFound, Refused
from ..sessions.registry import Entry as Entry

if TYPE_CHECKING:
    from .host import MailHost


@dataclass(frozen=True)
class Target:
    """One mailbox a message goes to."""

    address: str
    entry: Entry | None  # None for this machine's person's own mailboxes (terminal, named)


def is_group(to: str) -> bool:
    return to == "*" or to.endswith("/*") or to.startswith("repo:")


def _listing(entries: list[Entry]) -> str:
    return ", ".join(sorted(e.full_address for e in entries)) or "(none live)"


def resolve(
    to: str,
    directory: list[Entry],
    people: set[str],
    sender: str | None,
    *,
    may_use_groups: bool,
    mailboxes: Sequence[Entry] = (),
    own: Collection[str] = (),
) -> list[Target]:
    """Resolve ``to`` against ``directory``.

    ``sender`` is the sending session's address (excluded from groups); ``people`` are the
    person names hive knows. ``own`` are this machine's person's mailbox addresses (delivered
    here); ``mailboxes`` are teammates' mailboxes, one entry per machine (hive.sidecar.mail.mailboxes
    picks which of them a message goes to). Raises NotFound, Ambiguous, GroupRefused or Refused
    with the candidates in the message.
    """
    to = to.strip()
    if not to:
        raise BadRequest("say who the message is for: person/session, a session name, or see `hive who`")
    live = [e for e in directory if e.live]
    group_machine = None
    if is_group(to.rsplit("@", 1)[0]) and "@" in to:  # alice/*@xps, repo:acme/api@xps
        to, group_machine = to.rsplit("@", 1)
    if is_group(to):
        if to == "*":
            members = live
        elif to.startswith("repo:"):
            repo = to[5:].strip().strip("/")
            members = [e for e in live if e.repo and (e.repo == repo or e.repo.endswith("/" + repo))]
        else:
            members = [e for e in live if e.person == to[:-2]]
        members = [e for e in members if e.address != sender]
        if group_machine is not None:
            members = [e for e in members if e.machine == group_machine]
            to = f"{to}@{group_machine}"
        if not may_use_groups:
            raise GroupRefused(
                f"agents message one session, not a group ({to}): pick one with list_team, or ask "
                f"your person. Sessions in that group: {_listing(members)}"
            )
        if not members:
            raise NotFound(f"no live session matches {to}")
        return [Target(e.address, e) for e in members]

    machine = None
    if "@" in to:
        to, machine = to.rsplit("@", 1)
    if "/" in to:
        person, name = to.split("/", 1)
        if to in own and machine is None:
            return [Target(to, None)]
        boxes = [
            e for e in mailboxes if e.person == person and e.name == name and (machine is None or e.machine == machine)
        ]
        candidates = [e for e in directory if e.person == person and e.name == name]
        if boxes and not candidates:
            return [Target(e.address, e) for e in boxes]
    else:
        name = to
        if name in people:
            theirs = [e for e in live if e.person == name]
            raise Refused(
                f"{name} is a person, not a session: messages go to agent sessions; {name}'s are: {_listing(theirs)}"
            )
        candidates = [e for e in directory if e.name == name]
    if machine is not None:
        candidates = [e for e in candidates if e.machine == machine]
    if not candidates:
        raise NotFound(f"no session called {to}{'@' + machine if machine else ''}; see list_team or `hive who`")
    live_candidates = [e for e in candidates if e.live]
    chosen = live_candidates or candidates
    if len(chosen) > 1:
        raise Ambiguous(f"{to} could mean several sessions: {_listing(chosen)}; use one of those")
    return [Target(chosen[0].address, chosen[0])]


def peer_of(sidecar: MailHost, entry: Entry | None) -> str | None:
    """The machine key behind a remote directory entry (None for this machine's own)."""
    if entry is None or entry.key is not None:
        return None
    for member in sidecar.mesh.team.members():
        if member.person == entry.person and member.machine == entry.machine and member.active:
            return member.key
    return None


def is_remote(target: Target) -> bool:
    """A mailbox on a teammate's machine: it has a directory entry that is not this machine's."""
    return target.entry is not None and target.entry.key is None
