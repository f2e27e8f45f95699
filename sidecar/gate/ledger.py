"""The gate's ledger: its tables in the sidecar's database, what each decision writes there and how it is read back.

Decisions queue their rows (the item's current state, one ledger row, signals, facts) while the
gate decides, synchronously; :meth:`Ledger.commit` writes everything queued in one transaction
(group commit). The reading side is what people ask of it: the ledger itself, why an item was or
was not delivered, the digest, what sources in shadow would have done, and the gate's measures.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.lowlevel

from ..base.config import DAY
from ..base.errors import BadRequest, HiveError, NotFound
from ..base.store import Store
from ..base.ulid import is_ulid
from .model import ACTED, FACT_STATES, RANK, Entry, Evidence, Fact, Facts, Item, Seen
from .prefs import Prefs

# Signals that count for the measures: acted on (a delivered item), mattered (a held or silenced one).
ACTED_ON = "('cited', 'replied', 'changed', 'wanted')"
MATTERED = "('asked', 'escalated', 'cited', 'replied', 'changed', 'wanted')"
MAX_LEDGER = 5000
DIGEST_DEFAULT = DAY  # a first digest looks back this far


class Ledger:
    """The gate's rows: queued by its decisions, committed in batches, and read back for people."""

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self._items: dict[str, tuple[Any, ...]] = {}  # rows to upsert, by id (the latest state wins)
        self._ledger: list[tuple[Any, ...]] = []
        self._signals: list[tuple[Any, ...]] = []
        self._facts_rows: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._queued = 0
        self._written = 0
        self._failed = 0
        self._writing: anyio.Event | None = None

    # ---- queueing ------------------------------------------------------------------------

    def decided(self, entry: Entry, outcome: str, rule: str, reason: str, now: float, channel: str) -> None:
        """Queue a decision: the item's row in its new state and its ledger row."""
        self._items[entry.id] = _item_row(entry, now)
        self._ledger.append((entry.id, entry.item.person, entry.item.source, now, outcome, rule, reason, channel))
        self._queued += 1

    def signal(self, item_id: str, kind: str, detail: str, now: float) -> None:
        self._signals.append((item_id, kind, detail, now))
        self._queued += 1

    def fact(self, fact: Fact) -> None:
        self._facts_rows[(fact.kind, fact.ref)] = (
            fact.kind,
            fact.ref,
            fact.state,
            fact.since,
            fact.at,
            fact.runs,
            fact.due,
            fact.detail,
        )
        self._queued += 1

    async def commit(self) -> None:
        """Write every queued row in one transaction and wait for it to be on disk (group commit)."""
        target = self._queued
        # One turn of the event loop first: callers that are ready now queue their rows too and
        # share this commit, instead of each waiting for a commit of its own.
        await anyio.lowlevel.checkpoint()
        # One writer at a time; the others wait for the write in progress on one event (all woken
        # at once), then one of them writes whatever queued meanwhile. A lock handed from waiter to
        # waiter cost a turn of the event loop each.
        while self._written < target:
            if self._failed >= target:
                raise HiveError("the gate could not write its ledger; see sidecar.log")
            if self._writing is not None:
                await self._writing.wait()
                continue
            self._writing = anyio.Event()
            try:
                await self._write()
            finally:
                self._writing.set()
                self._writing = None

    async def _write(self) -> None:
        target = self._queued
        try:
            items, ledger, signals = list(self._items.values()), self._ledger, self._signals
            facts = list(self._facts_rows.values())
            self._items, self._ledger, self._signals, self._facts_rows = {}, [], [], {}
            db = self.store.db
            if items:
                await db.executemany(_UPSERT_ITEM, items)
            if ledger:
                await db.executemany(
                    "INSERT INTO gate_ledger (item, person, source, at, outcome, rule, reason, channel) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    ledger,
                )
            if signals:
                await db.executemany("INSERT INTO gate_signals (item, kind, detail, at) VALUES (?, ?, ?, ?)", signals)
            if facts:
                await db.executemany(
                    "INSERT OR REPLACE INTO gate_facts (kind, ref, state, since, at, runs, due, detail) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    facts,
                )
            await self.store.write([])  # commits the above with the sidecar's own group commit
        except BaseException:
            self._failed = target  # these rows are gone: their callers hear so rather than wait
            raise
        self._written = target

    # ---- what the gate rebuilds its state from -------------------------------------------

    async def open_entries(self) -> list[Entry]:
        """The items that wait for a breakpoint or are held."""
        return [
            _entry_from_row(row)
            for row in await self.store.fetchall("SELECT * FROM gate_items WHERE state IN ('pending', 'held')")
        ]

    async def firsts(self, since: float) -> list[tuple[str, Seen]]:
        """(fingerprint, what dedupe compares with) for every item offered since ``since`` that was no duplicate."""
        rows = await self.store.fetchall(
            "SELECT i.id, i.fingerprint, i.offered_at, i.urgency, i.state FROM gate_items i WHERE i.offered_at >= ? "
            "AND NOT EXISTS (SELECT 1 FROM gate_ledger l WHERE l.item = i.id AND l.rule = 'duplicate') "
            "ORDER BY i.offered_at",
            (since,),
        )
        return [(row["fingerprint"], Seen(row["id"], row["offered_at"], row["urgency"], row["state"])) for row in rows]

    async def spending(self, since: str) -> list[Any]:
        """Items that spent a unit of a budget on a day since ``since`` (an ISO date)."""
        return await self.store.fetchall(
            "SELECT person, source, proposer, state, spent FROM gate_items WHERE spent >= ?", (since,)
        )

    async def facts(self) -> list[Fact]:
        return [
            Fact(row["kind"], row["ref"], row["state"], row["since"], row["at"], row["runs"], row["due"], row["detail"])
            for row in await self.store.fetchall("SELECT * FROM gate_facts")
        ]

    async def undelivered_about(self, kind: str, ref: str, since: float) -> list[str]:
        """Items updated since ``since`` that did not reach their person and point at the fact ``(kind, ref)``."""
        rows = await self.store.fetchall(
            "SELECT id, evidence FROM gate_items WHERE state IN ('pending', 'held', 'digest', 'silenced', 'shadow') "
            "AND updated_at >= ? AND evidence LIKE ?",
            (since, f"%{json.encoder.encode_basestring(ref)[1:-1]}%"),
        )
        return [
            row["id"]
            for row in rows
            if any(e.get("kind") == kind and e.get("ref") == ref for e in json.loads(row["evidence"]))
        ]

    # ---- reading -------------------------------------------------------------------------

    async def acted(self, ref: str, how: str) -> dict[str, Any]:
        """The person or their session acted on an item (cited it, replied, changed the file)."""
        if how not in ACTED:
            raise BadRequest(f"how is one of {', '.join(ACTED)}")
        return {"items": await self.note(ref, how), "how": how}

    async def note(self, ref: str, kind: str, detail: str = "") -> list[str]:
        """Add a signal to every item with this id or fingerprint, or about this message; their ids."""
        rows = await self.find(ref)
        now = self.clock()
        for row in rows:
            self.signal(row["id"], kind, detail, now)
        await self.commit()
        return [row["id"] for row in rows]

    async def find(self, ref: str) -> list[Any]:
        if not isinstance(ref, str) or not ref or len(ref) > 64:
            raise BadRequest("name an item by its id or its fingerprint, or a message by its id")
        if is_ulid(ref.upper()):
            rows = await self.store.fetchall("SELECT * FROM gate_items WHERE id = ?", (ref.upper(),))
            if not rows:  # a message's id: the items offered about it (a notification, a screening hold)
                rows = await self.store.fetchall(
                    "SELECT * FROM gate_items WHERE json_extract(data, '$.message') = ? ORDER BY offered_at",
                    (ref.upper(),),
                )
        else:
            rows = await self.store.fetchall(
                "SELECT * FROM gate_items WHERE fingerprint = ? ORDER BY offered_at", (ref.lower(),)
            )
        if not rows:
            raise NotFound(f"the gate has no item {ref!r}; ids and fingerprints are in `hive gate ledger`")
        return rows

    async def rows(
        self, since: float | None = None, person: str | None = None, limit: int = 500, item: str | None = None
    ) -> list[dict[str, Any]]:
        """Ledger rows, oldest first, with each item's title."""
        clauses: list[str] = ["l.at >= ?"]
        params: list[float | str] = [since or 0.0]
        if person:
            clauses.append("l.person = ?")
            params.append(person)
        if item:
            clauses.append("l.item = ?")
            params.append(item)
        limit = max(1, min(int(limit), MAX_LEDGER))
        rows = await self.store.fetchall(
            "SELECT * FROM (SELECT l.seq, l.item, l.person, l.source, l.at, l.outcome, l.rule, l.reason, l.channel, "
            "i.title, i.urgency, i.fingerprint FROM gate_ledger l JOIN gate_items i ON i.id = l.item "
            f"WHERE {' AND '.join(clauses)} ORDER BY l.seq DESC LIMIT ?) ORDER BY seq",
            (*params, limit),
        )
        return [dict(row) for row in rows]

    async def why(self, ref: str, asked: bool = False) -> dict[str, Any]:
        """Every item with this id or fingerprint, its ledger rows, and the answer in one sentence each.

        ``asked``: the person asked (not an agent): an item they were not told about mattered.
        """
        rows = await self.find(ref)
        now = self.clock()
        answers = []
        for row in rows:
            decisions = await self.rows(item=row["id"], limit=MAX_LEDGER)
            last = decisions[-1] if decisions else None
            if row["state"] == "delivered":
                answer = f"You were told because: {last['reason'] if last else '?'}"
            elif row["state"] in ("pending", "held"):
                answer = f"Not yet: {last['reason'] if last else '?'}"
            elif row["state"] == "relayed":
                answer = (
                    f"Decided on {row['person']}'s own machine (`hive gate why` there): "
                    f"{last['reason'] if last else '?'}"
                )
            else:
                answer = f"You were not told because: {last['reason'] if last else '?'}"
                if asked:
                    self.signal(row["id"], "asked", "the person asked why", now)
            signals = await self.store.fetchall(
                "SELECT kind, detail, at FROM gate_signals WHERE item = ? ORDER BY at", (row["id"],)
            )
            answers.append(
                {
                    "item": _item_public(row),
                    "decisions": decisions,
                    "answer": answer,
                    "signals": [dict(s) for s in signals],
                }
            )
        await self.commit()
        return {"items": answers}

    async def digest(self, person: str, facts: Facts, since: float | None = None, mark: bool = True) -> dict[str, Any]:
        """What was held for ``person`` since the last digest, grouped and ordered by what it unblocks,
        plus what the gate checked and how much it silenced (a silent gate is visibly working)."""
        now = self.clock()
        marker = f"gate.digest.{person}"
        if since is None:
            last = await self.store.get_kv(marker)
            since = float(last) if last else now - DIGEST_DEFAULT
        rows = await self.store.fetchall(
            "SELECT * FROM gate_items WHERE person = ? AND state IN ('digest', 'held', 'pending') AND updated_at >= ? "
            "ORDER BY offered_at",
            (person, since),
        )
        latest = {
            r["item"]: r
            for r in await self.store.fetchall(
                "SELECT item, rule, reason FROM gate_ledger WHERE seq IN (SELECT MAX(seq) FROM gate_ledger "
                "WHERE person = ? AND at >= ? GROUP BY item)",
                (person, since),
            )
        }
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            public = _item_public(row)
            public["unblocks"] = _unblocks(facts, row)
            decided = latest.get(row["id"])
            public["rule"], public["reason"] = (decided["rule"], decided["reason"]) if decided else ("", "")
            groups[row["source"]].append(public)
        ordered = []
        for source, entries in groups.items():
            entries.sort(key=lambda e: (-e["unblocks"], -RANK[e["urgency"]], e["offered_at"]))
            ordered.append({"source": source, "unblocks": sum(e["unblocks"] for e in entries), "items": entries})
        ordered.sort(key=lambda g: (-g["unblocks"], -max(RANK[e["urgency"]] for e in g["items"]), g["source"]))
        checked = await self._checked(person, since)
        if mark:
            await self.store.set_kv(marker, repr(now))
        return {
            "person": person,
            "since": since,
            "until": now,
            "groups": ordered,
            "held": sum(len(g["items"]) for g in ordered),
            **checked,
        }

    async def _checked(self, person: str, since: float) -> dict[str, Any]:
        rows = await self.store.fetchall(
            "SELECT outcome, rule, source, COUNT(*) AS n, COUNT(DISTINCT item) AS items FROM gate_ledger "
            "WHERE person = ? AND at >= ? GROUP BY outcome, rule, source",
            (person, since),
        )
        offered = await self.store.fetchone(
            "SELECT COUNT(*) AS n, COUNT(DISTINCT source) AS sources FROM gate_items "
            "WHERE person = ? AND offered_at >= ?",
            (person, since),
        )
        outcomes: Counter[str] = Counter()
        silenced: Counter[str] = Counter()
        sources: Counter[str] = Counter()
        for row in rows:
            outcomes[row["outcome"]] += row["items"]
            if row["outcome"] == "silence":
                silenced[row["rule"]] += row["items"]
            sources[row["source"]] += row["n"]
        evidence = await self.store.fetchall(
            "SELECT evidence FROM gate_items WHERE person = ? AND offered_at >= ? AND evidence != '[]'", (person, since)
        )
        kinds: Counter[str] = Counter()
        for row in evidence:
            for e in json.loads(row["evidence"]):
                if e.get("kind") in FACT_STATES:  # looked up for urgency and floors
                    kinds[e["kind"]] += 1
        return {
            "checked": {
                "items": offered["n"] if offered else 0,
                "sources": offered["sources"] if offered else 0,
                "decisions": sum(r["n"] for r in rows),
                "facts_consulted": dict(kinds),
                "by_source": dict(sources),
            },
            "delivered": outcomes["deliver"],
            "silenced": sum(silenced.values()),
            "silenced_by": dict(silenced),
            "shadow": outcomes["shadow"],
        }

    async def shadow(self, prefs: Prefs, limit: int = 20) -> dict[str, Any]:
        """For each source of ``prefs.person`` in shadow: what it would have done, and what the person wanted."""
        person = prefs.person
        rows = await self.store.fetchall(
            "SELECT i.source, i.would, i.state, COUNT(*) AS n, "
            "SUM(EXISTS (SELECT 1 FROM gate_signals s WHERE s.item = i.id AND s.kind IN "
            "('wanted', 'acted', 'cited', 'replied', 'changed', 'asked'))) AS wanted "
            "FROM gate_items i WHERE i.person = ? GROUP BY i.source, i.would, i.state",
            (person,),
        )
        sources: dict[str, dict[str, Any]] = {}
        for row in rows:
            info = sources.setdefault(
                row["source"],
                {
                    "source": row["source"],
                    "live": prefs.is_live(row["source"]),
                    "offered": 0,
                    "would": Counter(),
                    "silenced": 0,
                    "wanted_when_delivered": 0,
                    "missed": 0,
                    "recent": [],
                },
            )
            info["offered"] += row["n"]
            if row["state"] == "shadow":
                info["would"][row["would"]] += row["n"]
                if row["would"] == "deliver" or row["would"] == "wait":
                    info["wanted_when_delivered"] += row["wanted"] or 0
                else:
                    info["missed"] += row["wanted"] or 0  # held or digested, and the person wanted it
            elif row["state"] == "silenced":
                info["silenced"] += row["n"]
        for source, info in sources.items():
            info["would"] = dict(info["would"])
            recent = await self.store.fetchall(
                "SELECT * FROM gate_items WHERE person = ? AND source = ? AND state = 'shadow' "
                "ORDER BY offered_at DESC LIMIT ?",
                (person, source, limit),
            )
            info["recent"] = [_item_public(r) for r in recent]
        listed = sorted(sources.values(), key=lambda s: (s["live"], s["source"]))
        return {"person": person, "live": sorted(prefs.live), "sources": listed}

    async def measures(
        self, prefs: Callable[[str], Prefs], person: str | None = None, since: float | None = None
    ) -> dict[str, Any]:
        """From the ledger: items delivered per person per day, the share acted on, the share of held
        items a later event showed mattered (asked about, escalated, acted on from the digest)."""
        now = self.clock()
        since = now - 7 * DAY if since is None else since
        only, params = (" AND person = ?", (since, person)) if person else ("", (since,))
        counts = await self.store.fetchall(
            "SELECT i.state, COUNT(*) AS n, SUM(COALESCE(s.acted, 0)) AS acted, "
            "SUM(COALESCE(s.mattered, 0)) AS mattered FROM gate_items i LEFT JOIN ("
            f"  SELECT item, MAX(kind IN {ACTED_ON}) AS acted, MAX(kind IN {MATTERED}) AS mattered "
            "  FROM gate_signals GROUP BY item) s ON s.item = i.id "
            f"WHERE i.offered_at >= ?{only.replace('person', 'i.person')} GROUP BY i.state",
            params,
        )
        by_state = {row["state"]: row for row in counts}

        def total(states: tuple[str, ...], column: str) -> int:
            return sum(int(by_state[s][column] or 0) for s in states if s in by_state)

        delivered, acted = total(("delivered",), "n"), total(("delivered",), "acted")
        held, mattered = total(("digest", "held", "pending"), "n"), total(("digest", "held", "pending"), "mattered")
        silenced, silenced_mattered = total(("silenced",), "n"), total(("silenced",), "mattered")
        # Deliveries per local day: counted per quarter hour in SQL (every zone's offset is a multiple
        # of 15 minutes), each quarter then placed in its person's own day.
        quarters = await self.store.fetchall(
            "SELECT person, CAST(at / 900 AS INTEGER) AS quarter, COUNT(*) AS n FROM gate_ledger "
            f"WHERE outcome = 'deliver' AND at >= ?{only} GROUP BY person, quarter",
            params,
        )
        per_day: dict[str, Counter[str]] = defaultdict(Counter)
        for row in quarters:
            per_day[row["person"]][prefs(row["person"]).day(row["quarter"] * 900.0)] += row["n"]
        return {
            "since": since,
            "until": now,
            "person": person,
            "delivered_per_day": {p: dict(sorted(days.items())) for p, days in sorted(per_day.items())},
            "delivered": delivered,
            "acted_on": acted,
            "acted_share": _share(acted, delivered),
            "held": held,
            "held_mattered": mattered,
            "held_mattered_share": _share(mattered, held),
            "silenced": silenced,
            "silenced_mattered": silenced_mattered,
            "silenced_mattered_share": _share(silenced_mattered, silenced),
        }


def _unblocks(facts: Facts, row: Any) -> int:
    """How many sessions, branches or obligations wait on this item: its evidence that a fact says is blocked."""
    refs = {
        e["ref"] for e in json.loads(row["evidence"]) if e.get("kind") in ("blocked", "session", "branch", "obligation")
    }
    return sum(1 for ref in refs if (f := facts.get(("blocked", ref))) is not None and f.state == "blocked")


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


_UPSERT_ITEM = (
    "INSERT INTO gate_items (id, fingerprint, source, proposer, person, session, title, body, evidence, data, "
    "urgency, state, would, due, channel, spent, offered_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET urgency = excluded.urgency, state = excluded.state, would = excluded.would, "
    "due = excluded.due, channel = excluded.channel, spent = excluded.spent, updated_at = excluded.updated_at"
)


def _item_row(entry: Entry, now: float) -> tuple[Any, ...]:
    item = entry.item
    return (
        entry.id,
        entry.fingerprint,
        item.source,
        item.proposer,
        item.person,
        item.session,
        item.title,
        item.body,
        item.evidence_json,
        item.data_json,
        entry.urgency,
        entry.state,
        entry.would,
        entry.due,
        entry.channel,
        entry.spent,
        entry.offered_at,
        now,
    )


def _entry_from_row(row: Any) -> Entry:
    item = Item(
        source=row["source"],
        person=row["person"],
        title=row["title"],
        body=row["body"],
        session=row["session"],
        key="",
        proposer=row["proposer"],
        data=json.loads(row["data"]),
        evidence=tuple(Evidence(e["kind"], e["ref"], e.get("note", "")) for e in json.loads(row["evidence"])),
    )
    # A restored item is not offered again, so its fingerprint is taken as stored, not recomputed.
    return Entry(
        id=row["id"],
        item=item,
        fingerprint=row["fingerprint"],
        urgency=row["urgency"],
        offered_at=row["offered_at"],
        state=row["state"],
        would=row["would"],
        due=row["due"],
        channel=row["channel"],
        spent=row["spent"],
        shadow=False,
    )


def _item_public(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "fingerprint": row["fingerprint"],
        "source": row["source"],
        "person": row["person"],
        "session": row["session"],
        "proposer": row["proposer"],
        "title": row["title"],
        "body": row["body"],
        "evidence": json.loads(row["evidence"]),
        "urgency": row["urgency"],
        "state": row["state"],
        "would": row["would"],
        "due": row["due"],
        "offered_at": row["offered_at"],
        "updated_at": row["updated_at"],
    }


def digest_text(result: Mapping[str, Any], when: Callable[[float], str] | None = None) -> str:
    """The digest in plain text: held items by group, most unblocking first, then what the gate checked."""
    when = when or (lambda at: time.strftime("%Y-%m-%d %H:%M", time.localtime(at)))
    lines = [
        f"Digest for {result['person']} since {when(result['since'])}: "
        f"{result['held']} held" + ("" if result["held"] else ", nothing waits for you")
    ]
    for group in result["groups"]:
        unblocks = f" (unblocks {group['unblocks']})" if group["unblocks"] else ""
        lines.append(f"  {group['source']}{unblocks}")
        for item in group["items"]:
            note = f", unblocks {item['unblocks']}" if item["unblocks"] else ""
            state = {"held": "held for quiet hours", "pending": "waiting for a pause"}.get(item["state"], "held")
            lines.append(f"    - [{item['urgency']}{note}] {item['title']} ({state}: {item['rule']}) {item['id']}")
    checked = result["checked"]
    facts = ", ".join(f"{k} {n}" for k, n in sorted(checked["facts_consulted"].items())) or "none"
    silenced = ", ".join(f"{rule} {n}" for rule, n in sorted(result["silenced_by"].items()))
    lines.append(
        f"The gate checked {checked['items']} items from {checked['sources']} source(s) "
        f"({checked['decisions']} decisions; records consulted: {facts}); delivered {result['delivered']}, "
        f"silenced {result['silenced']}"
        + (f" ({silenced})" if silenced else "")
        + f", {result['shadow']} recorded in shadow."
    )
    return "\n".join(lines)
