"""This machine's side of team history: its person's opt-in, what it archives, its queue, and
sending it to an anchor.

History is off until the person turns it on (``hive history on``; kv :data:`ON`), which is this
machine's setting for its person in its team: another machine of theirs archives only once it is
turned on there too, and in another team (after leaving this one) it is off again, so nothing
reaches an anchor the person did not agree to. While on, every message the person sends or
receives on this machine (sessions and mailboxes, local and remote: mail calls
:meth:`Archive.capture` through :mod:`hive.sidecar.mail.archivers` where it stores them) becomes
an entry (:mod:`.entries`) in the durable queue ``history_queue``, in the same commit as the
message. A background task hands the queue to a linked anchor in ``history_put`` frames of at most
:data:`BATCH` entries; what the anchor acknowledges leaves the queue. Nothing is lost while no
anchor is linked: the queue waits (at most :data:`MAX_QUEUE` entries; past that, new mail is not
archived until it drains). On the anchor itself the queue goes straight into its own archive.

Turning history off stops archiving and drops what the queue still holds (it never left this
machine); what the anchor already keeps stays there unless the person asks it to forget (kv
:data:`FORGET`: the anchors still to be told, asked again each time one links until it answers).
A message outbound screening held here for a secret is never archived, even once approved.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ..base.host import PerSidecar
from ..mail.archivers import ARCHIVERS, Statement
from ..mesh.frames import Speaker
from . import keeper
from .asking import ANSWER_WAIT, ANSWERS, FEATURE, anchors, answered, ask, is_anchor, label, linked
from .entries import from_message

if TYPE_CHECKING:
    from ..mail.host import MailHost
    from ..mail.render import Message
    from ..mesh.transport import Link

log = logging.getLogger("hive.sidecar.history.archive")

ON = "history.on"  # kv: JSON {"since", "team"}: when this machine's person turned history on, in which team
FORGET = "history.forget"  # kv: JSON list of the anchors (keys) still to ask to forget the person's entries
BATCH = 100  # entries in one history_put frame (8 KB of text each at most: well under a frame's 4 MiB)
MAX_QUEUE = 20_000  # entries waiting here for an anchor; past that, new mail is not archived
RETRY = 60.0  # seconds between tries while entries wait and an anchor is linked but did not take them
SETTLE = 0.2  # seconds after a wake before sending: a burst of mail goes in one frame

ARCHIVES: PerSidecar[Archive] = PerSidecar(lambda sidecar: Archive(sidecar))
"""Each sidecar's archive (:func:`attach` makes it a speaker of its mesh)."""


class Archive(Speaker):
    """One machine's history archive: the person's opt-in, the queue, and handing it to an anchor."""

    def __init__(self, sidecar: MailHost) -> None:
        self.sc = sidecar
        self.mesh = sidecar.mesh
        self.on_since: float | None = None
        self.on_team: str | None = None  # the team it was turned on in: in any other it is off
        self.forget: list[str] = []  # anchor keys still to ask to forget this person's entries
        self.queued = 0  # entries in the queue (an upper bound between sends: duplicates are ignored there)
        self._loaded = False
        self._load_lock = anyio.Lock()
        self._sending = anyio.Lock()
        self._wake = anyio.Event()
        self._full_logged = False

    # ---- the person's setting ----------------------------------------------------------------

    async def load(self) -> None:
        """Read the setting, the forget requests and the queue's size (once; ops and capture call it too)."""
        if self._loaded:
            return
        async with self._load_lock:
            if self._loaded:
                return
            try:
                setting = json.loads(await self.sc.store.get_kv(ON) or "{}")
                self.on_since, self.on_team = float(setting["since"]), str(setting["team"])
            except (ValueError, TypeError, KeyError):
                self.on_since, self.on_team = None, None
            try:
                self.forget = [str(k) for k in json.loads(await self.sc.store.get_kv(FORGET) or "[]")]
            except (ValueError, TypeError):
                self.forget = []
            row = await self.sc.store.fetchone("SELECT COUNT(*) FROM history_queue")
            self.queued = int(row[0]) if row else 0
            self._loaded = True

    def is_on(self) -> bool:
        """Whether history is on here now: turned on, in the team this machine is in."""
        return self.on_since is not None and self.on_team is not None and self.on_team == self.mesh.team.team_id

    async def turn_on(self) -> bool:
        """Archive from now on, in this machine's team; False when it already was on."""
        await self.load()
        if self.is_on():
            return False
        team = self.mesh.team.team_id
        if team is None:
            raise RuntimeError("history is turned on only in a team")  # the op checks first
        self.on_since, self.on_team = time.time(), team
        # What a queue still holds from another team's time never goes to this team's anchor.
        await self.sc.store.write(
            [
                ("DELETE FROM history_queue", ()),
                (
                    "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)",
                    (ON, json.dumps({"since": self.on_since, "team": team})),
                ),
            ]
        )
        self.queued = 0
        return True

    async def turn_off(self, forget_at: Sequence[str] = ()) -> int:
        """Stop archiving and drop the queue; returns how many entries it held. ``forget_at``: the
        anchors (keys) to ask to forget the person's entries, remembered until each answers."""
        await self.load()
        self.on_since, self.on_team = None, None
        self.forget = sorted(set(self.forget) | set(forget_at))
        row = await self.sc.store.fetchone("SELECT COUNT(*) FROM history_queue")
        dropped = int(row[0]) if row else 0
        await self.sc.store.write(
            [
                ("DELETE FROM kv WHERE key = ?", (ON,)),
                ("DELETE FROM history_queue", ()),
                ("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (FORGET, json.dumps(self.forget))),
            ]
        )
        self.queued = 0
        self._full_logged = False
        return dropped

    # ---- archiving ---------------------------------------------------------------------------

    async def capture(self, messages: Sequence[Message]) -> list[Statement]:
        """Mail's archiver: the statements that queue ``messages`` while history is on ([] when off)."""
        await self.load()
        if not self.is_on():
            return []
        if self.queued + len(messages) > MAX_QUEUE:
            if not self._full_logged:
                log.warning(
                    "history: %d entries wait for an anchor; new mail is not archived until it takes them", self.queued
                )
                self._full_logged = True
            return []
        owner = self.sc.settings.person
        now = time.time()
        self.queued += len(messages)
        self.wake()
        return [
            (
                "INSERT OR IGNORE INTO history_queue (id, entry, at) VALUES (?, ?, ?)",
                (m.id, json.dumps(from_message(m, owner), ensure_ascii=False), now),
            )
            for m in messages
        ]

    def wake(self) -> None:
        self._wake.set()

    # ---- the speaker's points ----------------------------------------------------------------

    async def run(self) -> None:
        """Hand the queue (and forget requests) to an anchor whenever there is something to hand
        and one is linked: woken by new entries and by an anchor linking, and every :data:`RETRY`
        seconds while something waits."""
        await self.load()
        while True:
            with anyio.move_on_after(RETRY):
                await self._wake.wait()
            self._wake = anyio.Event()
            if not self.queued and not self.forget:
                continue
            await anyio.sleep(SETTLE)  # the commit that queued them lands; a burst goes in one frame
            try:
                await self.send()
            except Exception:  # never fatal: the next wake tries again
                log.exception("history: sending to the anchor failed")

    async def link_up(self, link: Link) -> None:
        member = self.mesh.team.member(link.peer)
        if member is not None and member.role == "anchor":
            self.wake()

    # ---- sending -----------------------------------------------------------------------------

    async def send(self) -> None:
        """Tell the anchors what they should forget, then hand them the queue, batch by batch."""
        async with self._sending:
            if self.forget:
                await self.send_forgets()
            if not self.is_on():
                return  # the queue is another team's (it goes when history is turned off or on again)
            if is_anchor(self.sc):
                await self._keep_here()
                return
            for member, link in linked(self.sc):
                if not await self._hand_over(link):
                    log.info("history: %s did not take the queue; trying the next anchor", label(member))
                    continue
                return

    async def _batch(self) -> list[tuple[str, str]]:
        rows = await self.sc.store.fetchall("SELECT id, entry FROM history_queue ORDER BY at, id LIMIT ?", (BATCH,))
        if not rows:
            self.queued = 0
        return [(str(r[0]), str(r[1])) for r in rows]

    async def _drop(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        marks = ", ".join("?" * len(ids))
        await self.sc.store.write([(f"DELETE FROM history_queue WHERE id IN ({marks})", tuple(ids))])
        row = await self.sc.store.fetchone("SELECT COUNT(*) FROM history_queue")
        self.queued = int(row[0]) if row else 0
        self._full_logged = False

    async def _hand_over(self, link: Link) -> bool:
        """Send the queue to the anchor over ``link`` until it is empty; False when the anchor did
        not take a batch (no answer, or it is no anchor)."""
        while batch := await self._batch():
            reply = await ask(self.sc, link, {"t": "history_put", "entries": [json.loads(e) for _, e in batch]})
            if reply is None or reply.get("code"):
                return False
            taken = {i for i, _ in batch} & {i for i in reply.get("ids") or [] if isinstance(i, str)}
            if not taken:
                return False  # it took none: asking again at once would only repeat that
            await self._drop(sorted(taken))
        return True

    async def _keep_here(self) -> None:
        """This machine is the anchor: its own person's entries go straight into its archive."""
        me = self.mesh.team.my_key()
        while batch := await self._batch():
            await keeper.keep(self.sc, self.sc.settings.person, me, [json.loads(e) for _, e in batch])
            await self._drop([i for i, _ in batch])  # kept, or refused for good: either way done

    async def send_forgets(self, wait: float = ANSWER_WAIT) -> tuple[int, list[str]]:
        """Ask each anchor still to be told to forget this person's entries; returns how many they
        deleted and the labels of those that answered. One that is not linked, or does not answer,
        is asked again when it links."""
        deleted, told = 0, []
        for member, link in linked(self.sc):
            if member.key not in self.forget:
                continue
            reply = await ask(self.sc, link, {"t": "history_forget"}, wait)
            if reply is None:
                continue
            deleted += int(reply.get("deleted") or 0)
            told.append(label(member))
            if member.key in self.forget:  # the background sender may have told it meanwhile
                self.forget.remove(member.key)
        # An anchor that left the team (or stopped being one) has nothing more to be told.
        current = {m.key for m in anchors(self.sc)}
        self.forget = [k for k in self.forget if k in current]
        await self.sc.store.set_kv(FORGET, json.dumps(self.forget))
        return deleted, told

    def pending_forgets(self) -> list[str]:
        """The anchors still to be asked to forget, by label."""
        known = {m.key: label(m) for m in anchors(self.sc)}
        return [known[k] for k in self.forget if k in known]


def attach(sidecar: MailHost) -> None:
    """Its feature's ``frames`` (daemon.features): the archive speaks to anchors, and every machine
    answers history requests (an anchor keeps and searches; any other says ``not_anchor``)."""
    archive = ARCHIVES.of(sidecar)

    async def on_put(link: Link, member: Any, frame: dict[str, Any]) -> None:
        await keeper.on_put(sidecar, link, member, frame)

    async def on_query(link: Link, member: Any, frame: dict[str, Any]) -> None:
        await keeper.on_query(sidecar, link, member, frame)

    async def on_forget(link: Link, member: Any, frame: dict[str, Any]) -> None:
        await keeper.on_forget(sidecar, link, member, frame)

    async def on_answer(link: Link, member: Any, frame: dict[str, Any]) -> None:
        answered(sidecar, link, member, frame)

    handlers = {"history_put": on_put, "history_query": on_query, "history_forget": on_forget}
    handlers.update({kind: on_answer for kind in ANSWERS})
    sidecar.mesh.add_speaker(archive, (FEATURE,), handlers)
    ARCHIVERS.of(sidecar).append(archive.capture)
