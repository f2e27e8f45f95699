"""The gate's state: what it holds between decisions, and how one decision changes it.

:class:`GateState` is the part of :class:`~hive.sidecar.gate.engine.Gate` that holds things: the
waiting and held items, the dedupe window, today's budgets and the facts urgency is computed from,
rebuilt from the database by :meth:`~GateState.load`; the records hive's observers make
(:meth:`~GateState.record`); and :meth:`~GateState._decide`, which applies one decision to an item and
queues its ledger row (:mod:`hive.sidecar.gate.ledger`), committed in one batch by ``_commit``; and
what the ops read back from that ledger (``acted``, ``ledger``, ``why``, ``digest``, ``shadow``,
``measures``). The paths an item takes through the decision steps (offers, delivery, breakpoints,
deadlines) are the engine's, on top of this.
"""

from __future__ import annotations

import datetime as dt
import heapq
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import anyio

from ..base.config import DAY
from ..base.errors import BadRequest
from ..base.store import Store
from ..person.dialog import clean, clip
from . import rules
from .ledger import Ledger
from .model import FACT_STATES, MAX_REF, OUTCOME_STATE, Decision, Deliverer, Entry, Fact, Ids, Item, Owners, Relay, Seen
from .prefs import Prefs, PrefsFile, valid_source
from .rules import fact_urgency


class GateState:
    """The gate's in-memory state and its ledger in the sidecar's database, and how one decision changes them."""

    def __init__(
        self,
        store: Store,
        prefs: PrefsFile,
        *,
        clock: Callable[[], float] = time.time,
        deliver: Deliverer | None = None,
        owners: Owners | None = None,
        is_local: Callable[[Item], bool] | None = None,
        relay: Relay | None = None,
        idle_session: Callable[[Item, float], str] | None = None,
    ) -> None:
        self.store = store
        self.prefs_file = prefs
        self.clock = clock
        self.default_deliver = deliver
        self.owners = owners
        self.is_local = is_local
        self.relay = relay
        self.idle_session = idle_session  # (item, idle_after) -> a session of its that is idle that long, or ""
        self.deliverers: dict[str, Deliverer] = {}
        self.open: dict[str, Entry] = {}  # waiting and held items, by id
        self.waiting: dict[str, dict[str, Entry]] = defaultdict(dict)  # person -> waiting items
        self.seen: dict[str, Seen] = {}  # fingerprint -> last non-duplicate
        self._seen_order: list[tuple[float, str]] = []  # (at, fingerprint) heap, to forget old fingerprints
        self.budget = rules.Budget()
        self.facts: dict[tuple[str, str], Fact] = {}
        self._due: list[tuple[float, str]] = []  # (due, id) heap; stale pairs are skipped
        self._rearm = anyio.Event()
        self._armed: float | None = None
        self.book = Ledger(store, clock)
        self.loaded = False
        self._ids = Ids()

    # ---- start ---------------------------------------------------------------------------

    async def load(self) -> None:
        """Rebuild the in-memory state (open items, dedupe window, today's budgets, facts) from the database."""
        now = self.clock()
        window = self.prefs_file.settings.window
        for entry in await self.book.open_entries():
            self.open[entry.id] = entry
            if entry.state == "pending":
                self.waiting[entry.item.person][entry.id] = entry
            if entry.due is not None:
                heapq.heappush(self._due, (entry.due, entry.id))
        for fingerprint, seen in await self.book.firsts(now - window):
            self._remember(fingerprint, seen)
        since = (dt.datetime.fromtimestamp(now, dt.UTC) - dt.timedelta(days=2)).date().isoformat()
        for row in await self.book.spending(since):
            self.budget.count(row["person"], row["spent"], row["source"], row["proposer"], row["state"] == "shadow", 1)
        for fact in await self.book.facts():
            self.facts[(fact.kind, fact.ref)] = fact
        self.loaded = True

    def register(self, source: str, deliver: Deliverer) -> None:
        """Have ``deliver(item, decision)`` show this source's items instead of the default delivery."""
        if not valid_source(source):
            raise ValueError(f"not a source name: {source!r}")
        self.deliverers[source] = deliver

    def prefs(self, person: str) -> Prefs:
        return self.prefs_file.prefs(person)

    # ---- facts ---------------------------------------------------------------------------

    async def record(
        self, kind: str, ref: str, state: str, *, due: float | None = None, detail: str = "", at: float | None = None
    ) -> Fact:
        """Record what hive's own observers saw (a test run's result, a deadline, who is blocked).

        Raises:
            BadRequest: an unknown kind or a state that kind does not have.
        """
        if kind not in FACT_STATES:
            raise BadRequest(f"a fact's kind is one of {', '.join(FACT_STATES)}")
        if state not in FACT_STATES[kind]:
            raise BadRequest(f"a {kind} fact's state is one of {', '.join(FACT_STATES[kind])}")
        if not isinstance(ref, str) or not ref or len(ref) > MAX_REF:
            raise BadRequest(f"a fact's ref is a non-empty string of at most {MAX_REF} characters")
        if kind == "deadline" and state == "open" and due is None:
            raise BadRequest("an open deadline needs its due time")
        now = self.clock() if at is None else at
        before = self.facts.get((kind, ref))
        same = before is not None and before.state == state
        fact = Fact(
            kind,
            ref,
            state,
            before.since if same and before else now,
            now,
            before.runs + 1 if same and before else 1,
            due,
            clip(clean(detail), MAX_REF),
        )
        self.facts[(kind, ref)] = fact
        self.book.fact(fact)
        # Compared with what the last record meant when it was made: a failure that has now run long
        # enough, or often enough, to be an alarm escalated.
        if fact_urgency(fact, now)[0] == "alarm" and (before is None or fact_urgency(before, before.at)[0] != "alarm"):
            await self._escalated(kind, ref, now)
        await self._commit()
        return fact

    async def _escalated(self, kind: str, ref: str, now: float) -> None:
        """A fact just became an alarm: items about it that were not delivered turned out to matter."""
        for item_id in await self.book.undelivered_about(kind, ref, now - 7 * DAY):
            self._signal(item_id, "escalated", f"{kind} {ref}", now)

    def facts_for(self, item: Item) -> list[Fact]:
        """The records this gate holds about what ``item``'s evidence points at (they travel with a relay)."""
        found = (self.facts.get((e.kind, e.ref)) for e in item.evidence)
        return [f for f in found if f is not None]

    async def merge_facts(self, facts: Iterable[Fact]) -> None:
        """Take records another machine's hive made, where they are newer than this gate's own."""
        for fact in facts:
            mine = self.facts.get((fact.kind, fact.ref))
            if mine is not None and mine.at >= fact.at:
                continue
            self.facts[(fact.kind, fact.ref)] = fact
            self.book.fact(fact)
        await self._commit()

    # ---- dedupe memory -------------------------------------------------------------------

    def _prior(self, fingerprint: str, now: float) -> Seen | None:
        seen = self.seen.get(fingerprint)
        if seen is None or now - seen.at > self.prefs_file.settings.window:
            return None
        return seen

    def _remember(self, fingerprint: str, seen: Seen) -> None:
        self.seen[fingerprint] = seen
        heapq.heappush(self._seen_order, (seen.at, fingerprint))
        horizon = seen.at - self.prefs_file.settings.window
        while self._seen_order and self._seen_order[0][0] < horizon:
            at, old = heapq.heappop(self._seen_order)
            if (found := self.seen.get(old)) is not None and found.at == at:
                del self.seen[old]

    # ---- recording -----------------------------------------------------------------------

    def _decide(
        self,
        entry: Entry,
        outcome: str,
        rule: str,
        reason: str,
        now: float,
        *,
        due: float | None = None,
        channel: str = "",
        session: str = "",
    ) -> Decision:
        """Apply one decision to ``entry`` and queue its ledger row; shadow items only record it."""
        would = ""
        if entry.shadow and outcome in ("deliver", "wait", "hold", "digest") and rule != "floor.security":
            would, outcome = outcome, "shadow"
            reason = f"shadow ({entry.item.source} is not live for {entry.item.person}): would {would}: {reason}"
            due, channel = None, ""
        if outcome != "wait" and entry.id in self.open:
            self._close(entry)
        if outcome in ("silence", "digest") and entry.spent and rule != "deliver.failed":
            self.budget.refund(entry)
        entry.state, entry.would, entry.due, entry.channel = OUTCOME_STATE[outcome], would, due, channel
        if outcome in ("wait", "hold"):
            self.open[entry.id] = entry
            if outcome == "wait":
                self.waiting[entry.item.person][entry.id] = entry
            assert due is not None
            heapq.heappush(self._due, (due, entry.id))
            if self._armed is None or due < self._armed:
                self._rearm.set()
        seen = self.seen.get(entry.fingerprint)
        if seen is not None and seen.id == entry.id:
            seen.state = entry.state
        decision = Decision(
            item_id=entry.id,
            fingerprint=entry.fingerprint,
            source=entry.item.source,
            person=entry.item.person,
            outcome=outcome,
            rule=rule,
            reason=reason,
            urgency=entry.urgency,
            at=now,
            due=due,
            channel=channel,
            session=session,
            would=would,
        )
        self.book.decided(entry, outcome, rule, reason, now, channel)
        return decision

    def _step(self, entry: Entry, step: rules.Step, now: float) -> Decision:
        return self._decide(
            entry, step.outcome, step.rule, step.reason, now, due=step.due, channel=step.channel, session=step.session
        )

    def _close(self, entry: Entry) -> None:
        self.open.pop(entry.id, None)
        self.waiting[entry.item.person].pop(entry.id, None)
        if not self.waiting[entry.item.person]:
            del self.waiting[entry.item.person]

    def _signal(self, item_id: str, kind: str, detail: str, now: float) -> None:
        self.book.signal(item_id, kind, detail, now)

    async def _commit(self) -> None:
        """Write every queued row in one transaction and wait for it to be on disk (group commit)."""
        await self.book.commit()

    # ---- signals and reading: the ledger's ----------------------------------------------

    async def acted(self, ref: str, how: str) -> dict[str, Any]:
        """The person or their session acted on an item (cited it, replied, changed the file)."""
        return await self.book.acted(ref, how)

    async def note(self, ref: str, kind: str, detail: str = "") -> list[str]:
        """Say what became of the items with this id or fingerprint, or about this message (who
        settled a held message): a signal on each, in ``hive gate why``. Returns their ids."""
        return await self.book.note(ref, kind, detail)

    async def ledger(
        self, since: float | None = None, person: str | None = None, limit: int = 500, item: str | None = None
    ) -> list[dict[str, Any]]:
        """Ledger rows, oldest first, with each item's title."""
        return await self.book.rows(since, person, limit, item)

    async def why(self, ref: str, asked: bool = False) -> dict[str, Any]:
        """Every item with this id or fingerprint, its ledger rows, and the answer in one sentence each.

        ``asked``: the person asked (not an agent): an item they were not told about mattered.
        """
        return await self.book.why(ref, asked)

    async def digest(self, person: str, since: float | None = None, mark: bool = True) -> dict[str, Any]:
        """What was held for ``person`` since the last digest, grouped and ordered by what it unblocks,
        plus what the gate checked and how much it silenced (a silent gate is visibly working)."""
        return await self.book.digest(person, self.facts, since, mark)

    async def shadow(self, person: str, limit: int = 20) -> dict[str, Any]:
        """For each source of ``person`` in shadow: what it would have done, and what the person wanted."""
        return await self.book.shadow(self.prefs(person), limit)

    async def measures(self, person: str | None = None, since: float | None = None) -> dict[str, Any]:
        """From the ledger: items delivered per person per day, the share acted on, the share of held
        items a later event showed mattered (asked about, escalated, acted on from the digest)."""
        return await self.book.measures(self.prefs, person, since)
