"""What an anchor holds for members' machines that are offline: sealed frames, on disk, per recipient.

The relay (:mod:`.relay`) keeps a frame here when the machine it is for has no link to the anchor,
and delivers what is kept when that machine links. Everything is committed before the sender is
answered, so an anchor killed while holding mail loses none of it. A message stays until its
recipient's answer passes back through the anchor (it may be delivered more than once; the
recipient answers a duplicate and never deposits it twice); acks and receipts go once delivered.

Each sender machine may leave at most ``[mesh] custody_frames`` frames (5,000) and
``custody_bytes`` bytes (64 MB), the limits a receiver puts on one sender's files; past them the
sender is told ``refused`` and keeps the message in its own outbox. Nothing is held longer than
:data:`HOLD_DAYS` days, the sender's own outbox limit.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..base.config import DAY
from ..base.host import Host

HOLD_DAYS = 7


@dataclass(frozen=True)
class Held:
    seq: int
    kind: str
    sealed: dict[str, Any]


class Custody:
    """The anchor's custody table (``custody``, one row per sealed frame)."""

    def __init__(self, sidecar: Host, max_frames: int, max_bytes: int) -> None:
        self.sc = sidecar  # its store opens after the mesh is made
        self.max_frames = max_frames  # per sender machine
        self.max_bytes = max_bytes

    @property
    def store(self) -> Any:
        return self.sc.store

    async def keep(self, peer: str, origin: str, kind: str, frame_id: str, sealed: dict[str, Any]) -> str | None:
        """Hold a sealed frame for ``peer``; None once it is on disk, else why it was not kept."""
        text = json.dumps(sealed, separators=(",", ":"), ensure_ascii=False)
        row = await self.store.fetchone(
            "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM custody WHERE origin = ?", (origin,)
        )
        frames, size = (int(row[0]), int(row[1])) if row else (0, 0)
        if frames >= self.max_frames or size + len(text) > self.max_bytes:
            return (
                f"the anchor holds {frames} frames ({size // 1024} KB) from this machine already, its limit; "
                "the message stays in this machine's outbox"
            )
        await self.store.write(
            [
                (
                    "INSERT OR IGNORE INTO custody (peer, origin, kind, frame_id, sealed, size, at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (peer, origin, kind, frame_id, text, len(text), time.time()),
                )
            ]
        )
        return None

    async def waiting(self, peer: str) -> list[Held]:
        """What is held for ``peer``, oldest first; past :data:`HOLD_DAYS` it is dropped first."""
        await self.store.write([("DELETE FROM custody WHERE at < ?", (time.time() - HOLD_DAYS * DAY,))])
        rows = await self.store.fetchall("SELECT seq, kind, sealed FROM custody WHERE peer = ? ORDER BY seq", (peer,))
        return [Held(int(r[0]), str(r[1]), json.loads(r[2])) for r in rows]

    async def delivered(self, seqs: list[int]) -> None:
        """Acks and receipts handed over: they are not kept."""
        if seqs:
            await self.store.write([("DELETE FROM custody WHERE seq = ?", (seq,)) for seq in seqs])

    async def answered(self, peer: str, message_id: str) -> None:
        """``peer`` answered the message ``message_id``: the anchor holds it no longer."""
        await self.store.write(
            [("DELETE FROM custody WHERE peer = ? AND kind = 'msg' AND frame_id = ?", (peer, message_id))]
        )

    async def holding(self) -> dict[str, int]:
        """How many frames are held per recipient machine (``hive status``, tests)."""
        rows = await self.store.fetchall("SELECT peer, COUNT(*) FROM custody GROUP BY peer")
        return {str(r[0]): int(r[1]) for r in rows}
