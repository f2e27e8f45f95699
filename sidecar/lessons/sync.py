"""Lesson replication between teammates' sidecars: each log reaches exactly the machines its scope allows.

Frames (on the mesh's ``hive/1`` links, only to peers that announce the ``lessons`` feature;
:meth:`hive.sidecar.mesh.links.Mesh.add_frames` routes them here):

- ``sync {heads: [[author, scope, seq], ...], want: [blob hash, ...], reply?}``: the highest entry
  this machine holds per log the peer may also hold, and the blobs it lacks. Sent at every
  link-up, whenever an entry arrives out of order, and when project membership changes (a newly
  confirmed member gets the project's earlier lessons). The receiver answers with every entry
  after those heads in the logs the sender may hold, a chunk at a time with the chunk's bodies,
  and asks back once (``reply``) if the sender holds entries it lacks.
- ``entry {entries: [signed entry, ...]}``: entries in log order. A new local entry goes at once
  to every linked peer that may hold it. Entries are not relayed as they arrive (the mesh is full),
  but a sync answers with every log the asker may hold, whoever wrote it: the author's signature
  travels with each entry, so a machine passing on another's entries cannot change them.
- ``body {blobs: [blob, ...]}``: lesson bodies and edit texts, sent after their entries.

Who may hold a log (:func:`may_hold`), checked by the sender and again by the receiver:
``personal`` logs only the machines of the author machine's person; ``project:<id>`` logs the
machines of the project's confirmed members (hive.sidecar.team.projects) and the author's own; ``team``
every active member. So a personal lesson never leaves its person's machines, and a project
lesson never reaches a non-member, even through a relay.

Entries written before this machine was in a team were signed for none; at the first link-up in a
team they are re-signed for it (:meth:`~hive.sidecar.lessons.store.LessonStore.adopt_team`).

Ops::

    lesson_sync_status                 heads, counts and peers with the feature (tests and benchmarks)
    lesson_sync_ingest {entries?, blobs?}   take entries or blobs from a local file or export as if a
                                       peer sent them; returns a result or error code per item
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ..base.defang import defang
from ..base.errors import BadRequest, HiveError, LessonInvalid
from ..base.host import PerSidecar
from ..mesh.transport import FrameError, LinkClosed, encode_frame
from ..team import projects
from ..team.roster import Roster
from . import records as L
from . import store as lesson_store

if TYPE_CHECKING:
    from ..base.host import Connection
    from ..mail.host import MailHost
    from ..mesh.links import Member
    from ..mesh.transport import Link

log = logging.getLogger("hive.sidecar.lessons.sync")

FEATURE = "lessons"
BATCH_ENTRIES = 256  # entries per frame (a header is well under 4 KiB; a frame may be 4 MiB)
BATCH_BLOBS = 128  # blobs per frame (at most ~4 KiB of text each)
MAX_HEADS = 100_000
MAX_WANT = 2_000


def may_hold(roster: Roster | None, machine: str, author: str, scope: str) -> bool:
    """Whether ``machine`` may hold the log of ``author`` (a machine key) for ``scope``."""
    if roster is None:
        return False
    holder, writer = roster.members.get(machine), roster.members.get(author)
    if holder is None or writer is None or not holder.active:
        return False
    if scope == "team":
        return True
    if scope == "personal":
        return holder.person == writer.person
    if scope.startswith("project:"):
        project = scope.removeprefix("project:")
        return holder.person == writer.person or projects.is_member(roster, project, holder.person)
    return False


class LessonSync:
    """One per mesh. Reads the sidecar's lesson store; sends only over the mesh's links."""

    def __init__(self, sidecar: MailHost) -> None:
        self.mesh = sidecar.mesh
        self.sc = sidecar
        self._store: lesson_store.LessonStore | None = None
        self._team: Any = None
        self._adopted: str | None = None
        self._adopting = anyio.Lock()
        self._projects: Any = None
        self.stats = {"entries_in": 0, "entries_out": 0, "blobs_in": 0, "blobs_out": 0, "refused": 0}

    @property
    def store(self) -> lesson_store.LessonStore:
        if self._store is None:
            self._store = lesson_store.of(self.sc)
            self._store.listeners.append(self._on_local_write)
        return self._store

    def _roster(self) -> Roster | None:
        team = getattr(self.sc, "team", None)
        return getattr(team, "roster", None)

    def _me(self) -> str:
        return self.mesh.team.my_key()

    def _peers(self) -> list[str]:
        return [p for p in list(self.mesh.links) if self.mesh.peer_has(p, FEATURE)]

    async def _send(self, peer: str, frame: dict[str, Any]) -> bool:
        link = self.mesh.links.get(peer)
        if link is None:
            return False
        try:
            await link.send(frame)
        except (LinkClosed, FrameError) as exc:
            log.info("could not send a %s frame to %s: %s", frame.get("t"), peer[:12], exc)
            return False
        return True

    async def _send_batches(self, peer: str, kind: str, field: str, items: Sequence[Any], size: int) -> bool:
        """Send ``items`` in frames of ``size``; False once the link is gone."""
        for start in range(0, len(items), size):
            if not await self._send(peer, {"t": kind, field: list(items[start : start + size])}):
                return False
            self.stats[f"{'entries' if kind == 'entry' else 'blobs'}_out"] += len(items[start : start + size])
        return True

    # ---- anti-entropy ----------------------------------------------------------------

    async def send_sync(self, peer: str) -> None:
        if not self.mesh.peer_has(peer, FEATURE) or self._roster() is None:
            return
        await self._send(peer, {"t": "sync", **await self._sync_body(peer)})

    async def _sync_body(self, peer: str) -> dict[str, Any]:
        """Heads of the logs ``peer`` may hold (even how many personal entries there are stays home),
        and the blobs this machine lacks."""
        roster = self._roster()
        heads = [[a, s, n] for (a, s), n in (await self.store.heads()).items() if may_hold(roster, peer, a, s)]
        return {"heads": heads, "want": await self.store.missing_blobs(MAX_WANT)}

    async def on_link_up(self, peer: str) -> None:
        self._follow_team()
        async with self._adopting:  # every link waits until its entries are signed for this team
            team_id = self.mesh.team.team_id
            if team_id and team_id != self._adopted:
                await self.store.adopt_team()  # lessons proposed before this machine joined can travel now
                self._adopted = team_id
        await self.send_sync(peer)

    def _follow_team(self) -> None:
        team = getattr(self.sc, "team", None)
        if team is not None and team is not self._team:
            self._team = team
            self._projects = self._membership()
            team.subscribe(self._on_team_change)

    def _membership(self) -> Any:
        roster = self._roster()
        return None if roster is None else {p: v.members for p, v in roster.projects.items()}

    async def _on_team_change(self, change: Any) -> None:
        """Ask again whoever may now hold logs they could not before, so those arrive without
        waiting for the next link: every peer when project membership changed or this machine
        just became active, else only the machines that just joined (their link may have come up
        before the roster named them). Asking every peer at each join made forming a team of n
        machines cost n² syncs, all through the anchor when they are relayed. Called under the
        team's lock, so the syncs run as their own task."""
        membership = self._membership()
        joined = tuple(getattr(change, "joined", ()))
        if membership != self._projects or self._me() in joined:
            ask: tuple[str, ...] | None = None
        elif joined:
            ask = joined
        else:
            return
        self._projects = membership
        tasks = getattr(self.sc, "tasks", None)
        if tasks is not None:
            tasks.start_soon(self._sync_all, ask)

    async def _sync_all(self, only: tuple[str, ...] | None = None) -> None:
        for peer in self._peers():
            if only is not None and peer not in only:
                continue
            try:
                await self.send_sync(peer)
            except Exception:  # one peer's failure must not stop the others
                log.exception("could not sync lessons with %s", peer[:12])

    async def on_sync(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        roster = self._roster()
        peer = link.peer
        theirs: dict[tuple[str, str], int] = {}
        for item in (frame.get("heads") or [])[:MAX_HEADS]:
            if (
                isinstance(item, list)
                and len(item) == 3
                and isinstance(item[0], str)
                and isinstance(item[1], str)
                and isinstance(item[2], int)
            ):
                theirs[(item[0], item[1])] = item[2]
        mine = await self.store.heads()
        me = self._me()
        behind = any(n > mine.get(k, 0) and may_hold(roster, me, k[0], k[1]) for k, n in theirs.items())
        for (author, scope), head in mine.items():
            if not may_hold(roster, peer, author, scope):
                continue
            after = theirs.get((author, scope), 0)
            while after < head:
                # A chunk at a time, bodies right after their entries: memory stays bounded however
                # far behind the peer is, and a link lost midway loses no more than a chunk.
                batch = await self.store.entries_after(author, scope, after, BATCH_ENTRIES * 4)
                if not batch:
                    break
                if not await self._send_batches(peer, "entry", "entries", batch, BATCH_ENTRIES):
                    return  # the link is gone: the next link-up syncs again
                lessons = [e["body"]["lesson"] for e in batch if e["body"].get("type") in ("lesson", "review")]
                await self._send_batches(peer, "body", "blobs", await self._blobs_for(peer, lessons), BATCH_BLOBS)
                after = batch[-1]["body"]["seq"]
        want = [h for h in (frame.get("want") or [])[:MAX_WANT] if isinstance(h, str)]
        if want:
            await self._send_batches(peer, "body", "blobs", await self._blobs_for(peer, (), want), BATCH_BLOBS)
        if behind and not frame.get("reply"):
            # The peer holds entries this machine lacks: ask once (a reply never asks back).
            await self._send(peer, {"t": "sync", "reply": True, **await self._sync_body(peer)})

    async def _blobs_for(
        self, peer: str, lesson_ids: Sequence[str], hashes: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        """The held blobs of these lessons (and by these hashes) that ``peer`` may hold."""
        roster = self._roster()
        found = await self.store.blobs_with_logs(lessons=lesson_ids, hashes=hashes)
        seen: set[str] = set()
        out = []
        for blob, author, scope in found:
            digest = L.blob_hash(blob)
            if digest not in seen and may_hold(roster, peer, author, scope):
                seen.add(digest)
                out.append(blob)
        return out

    # ---- receiving -------------------------------------------------------------------

    async def on_entry(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        roster = self._roster()
        me = self._me()
        acceptable: list[dict[str, Any]] = []
        for obj in frame.get("entries") or []:
            try:
                signed = lesson_store.signed_entry(obj)
            except LessonInvalid as exc:
                self.stats["refused"] += 1
                log.info("refused a lesson entry from %s: %s", link.peer[:12], exc.message)
                continue
            if not may_hold(roster, me, signed.by, signed.body.scope):
                self.stats["refused"] += 1
                log.warning(
                    "refused a %s entry from %s: this machine may not hold that log", signed.body.scope, link.peer[:12]
                )
                continue
            acceptable.append(obj)
        results = await self.store.ingest_many(acceptable, via=link.peer)
        added = [obj for obj, result in zip(acceptable, results, strict=True) if result == "added"]
        self.stats["entries_in"] += len(added)
        refused = [r for r in results if r not in ("added", "duplicate", "gap")]
        if refused:
            self.stats["refused"] += len(refused)
            log.info("refused %d lesson entries from %s, e.g. %s", len(refused), link.peer[:12], refused[0])
        if "gap" in results:
            await self.send_sync(link.peer)
        # Not passed on: the mesh is full, so every linked peer has it from its origin, and a peer
        # linked later syncs at link-up (relaying would send each entry N² times in an N-machine mesh).

    async def on_body(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        await self._take_blobs(list(frame.get("blobs") or []), source=link.peer)

    async def _take_blobs(self, blobs: list[Any], source: str = "", forward: bool = False) -> list[str]:
        results = await self.store.ingest_blobs(blobs)
        added = [b for b, result in zip(blobs, results, strict=True) if result == "added"]
        self.stats["blobs_in"] += len(added)
        refused = [r for r in results if r not in ("added", "duplicate")]
        if refused:
            self.stats["refused"] += len(refused)
            log.info("refused %d lesson blobs from %s, e.g. %s", len(refused), source[:12] or "here", refused[0])
        if added and forward:
            lessons = [b["lesson"] for b in added]
            hashes = {L.blob_hash(b) for b in added}
            for peer in self._peers():
                mine = [b for b in await self._blobs_for(peer, lessons) if L.blob_hash(b) in hashes]
                await self._send_batches(peer, "body", "blobs", mine, BATCH_BLOBS)
        return results

    # ---- sending what is new -----------------------------------------------------------

    async def _forward_entries(self, entries: list[dict[str, Any]]) -> None:
        roster = self._roster()
        for peer in self._peers():
            mine = [e for e in entries if may_hold(roster, peer, e["by"], e["body"]["scope"])]
            if not mine:
                continue
            try:
                encode_frame({"t": "entry", "entries": mine})
            except FrameError:
                await self._send_batches(peer, "entry", "entries", mine, 1)
                continue
            await self._send_batches(peer, "entry", "entries", mine, len(mine))

    async def _on_local_write(self, scope: str, seq: int) -> None:
        if self._roster() is None:
            return
        obj = await self.store.entry(self._me(), scope, seq)
        if obj is None:
            return
        await self._forward_entries([obj])
        lesson = obj["body"]["lesson"]
        for peer in self._peers():
            blobs = await self._blobs_for(peer, [lesson]) if obj["body"].get("type") != "tombstone" else []
            await self._send_batches(peer, "body", "blobs", blobs, BATCH_BLOBS)

    # ---- status ----------------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        heads = await self.store.heads()
        counts = {}
        for table in ("lesson_log", "lessons", "lesson_blobs", "lesson_tombstones", "lesson_reviews"):
            row = await self.store.store.fetchone(f"SELECT COUNT(*) FROM {table}")
            counts[table] = row[0] if row else 0
        team = getattr(self.sc, "team", None)
        return {
            "team_id": team.team_id() if team is not None else None,
            "me": self._me(),
            "heads": [[a, s, n] for (a, s), n in sorted(heads.items())],
            "counts": counts,
            "peers": sorted(self._peers()),
            "stats": dict(self.stats),
        }


def _not_started(sidecar: MailHost) -> LessonSync:
    raise HiveError("lesson sync has not started yet")


SYNCS: PerSidecar[LessonSync] = PerSidecar(_not_started)


def attach(sidecar: MailHost) -> None:
    """Its feature's ``frames`` (daemon.features): lesson sync speaks ``sync``, ``entry`` and ``body``."""
    mesh = sidecar.mesh
    sync = LessonSync(sidecar)
    SYNCS.put(sidecar, sync)
    mesh.add_frames(
        FEATURE, {"sync": sync.on_sync, "entry": sync.on_entry, "body": sync.on_body}, on_link_up=sync.on_link_up
    )


def sync_of(sidecar: MailHost) -> LessonSync:
    """This sidecar's lesson replication (it exists once the mesh has its frames)."""
    return SYNCS.of(sidecar)


async def op_lesson_sync_status(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Show lesson replication's state: log heads, table counts and the linked peers with the feature.

    Request: ``lessons`` (list of str, optional): ids to look up, at most 100. Returns ``{"team_id",
    "me", "heads", "counts", "peers", "stats"}``, plus with ``lessons`` what this store holds of
    each (``{"state", "has_body", "scope", "blobs", "author_machine", "text"}``) or null.
    """
    sync = sync_of(sidecar)
    result = await sync.status()
    wanted = request.get("lessons")
    if isinstance(wanted, list):
        held: dict[str, Any] = {}
        for lesson_id in wanted[:100]:
            if not isinstance(lesson_id, str):
                continue
            view = await sync.store.get(lesson_id)
            held[lesson_id] = (
                None
                if view is None
                else {
                    "state": view.state,
                    "has_body": view.has_body,
                    "scope": view.scope,
                    "blobs": await sync.store.blob_hashes_of(lesson_id),
                    "author_machine": view.author_machine,
                    "text": defang(view.text),
                }
            )
        result["lessons"] = held
    return result


async def op_lesson_sync_ingest(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Take lesson log entries or blobs from a local file or export as if a peer had sent them.

    Request: ``entries`` (list, optional): signed log entries; ``blobs`` (list, optional): lesson
    bodies and edit texts. What is new goes on to the linked peers that may hold it. Returns
    ``{"entries": [result], "blobs": [result]}``: per item ``added``, ``duplicate`` or an error code.
    Raises ``bad_request`` when either is not a list.
    """
    sync = sync_of(sidecar)
    entries = request.get("entries") or []
    blobs = request.get("blobs") or []
    if not isinstance(entries, list) or not isinstance(blobs, list):
        raise BadRequest("entries and blobs are lists")
    results = await sync.store.ingest_many(entries, via="local")
    added = [obj for obj, result in zip(entries, results, strict=True) if result == "added"]
    if added:
        await sync._forward_entries(added)
    return {"entries": results, "blobs": await sync._take_blobs(blobs, forward=True)}


OPS = {"lesson_sync_status": op_lesson_sync_status, "lesson_sync_ingest": op_lesson_sync_ingest}
