"""The gate: the one place where a proactive item becomes an interruption, and the ledger of why.

Sessions and watchers *propose* items (overlap notices, lesson recalls, review requests, notify
pop-ups, held mail); only the gate decides whether and when one reaches its person, and every
decision is written down with the rule that made it (constraint 4 of the design).

Using it (the API the sources call)
-----------------------------------

In the sidecar process::

    from hive.sidecar.gate.engine import Evidence, Item, gate_of

    gate = gate_of(sidecar)
    decision = await gate.offer(Item(
        source="overlap",                     # a-z0-9-; new sources start in shadow, overlap starts live
        person="alice",                       # the owner: who it is for
        session="alice/api",                  # optional: the one session it is for
        title="bob/web is editing src/auth.py too",
        body="…",                             # optional detail, shown with the title
        evidence=(Evidence("file", "acme/api:src/auth.py"), Evidence("ci", "acme/api@main")),
        key="overlap:acme/api:src/auth.py:bob/web",   # optional stable name: the dedupe fingerprint
        proposer="alice/api",                 # optional: the proposing session or watcher (its own share)
        data={"other": "bob/web"},            # optional: handed back to the source's deliverer
    ))
    decision.outcome   # deliver | wait | hold | digest | silence | shadow
    decision.rule, decision.reason, decision.item_id, decision.due

    gate.register("overlap", deliver)   # async deliver(item, decision): show it (else the default:
                                        # a message into the session's mailbox, or a desktop pop-up)
    await gate.breakpoint("alice", "alice/api", "commit")   # commit | test | idle | turn | pr
    await gate.record("ci", "acme/api@main", "failing")     # a record urgency is computed from
    await gate.acted(decision.item_id, "cited")             # cited | replied | changed | asked | wanted

Out of process, the same over the socket: ``gate_offer {"item": {...}}``, ``gate_breakpoint
{"session", "kind", "person"?}``, ``gate_fact {"kind", "ref", "state", "due"?, "detail"?}``,
``gate_acted {"item", "how"}``; and for people ``gate_ledger``, ``gate_why``, ``gate_prefs``,
``gate_shadow``, ``gate_promote``, ``gate_measures`` and ``digest``. Sessions are named by
address (``person/name``); the ops also take a session key or name on this machine.

Breakpoints come from the hooks: a turn ending, and the commands a session ran (test runs, commits,
pull requests); a session idle for ``idle_after`` seconds is at one already
(:mod:`hive.sidecar.gate.sources`). Report only real ones: a false breakpoint costs more than a
missed one, because a waiting item's bound delivers it anyway.

Sources that go through it: overlap notices (:mod:`hive.sidecar.presence.observe`, ``offer``), notify
pop-ups (:mod:`hive.sidecar.person.ask`), review pop-ups for lesson proposals and turn-tier lesson lines
(:mod:`hive.sidecar.lessons.ops`, :mod:`hive.sidecar.lessons.turn`), the last three with
:meth:`Gate.offer_now`: shown now or not at all. A proposal nobody answered for a day is offered
again (``review``, through ``offer``) when its reviewer's digest is read (the lessons feature's ``before_digest``).

Across machines: an item for a person whose machines are elsewhere in the team (or for a session
on another machine) is decided by that machine's gate with that person's preferences
(:mod:`hive.sidecar.gate.relay`); if none takes it, it waits in the digest here.

The decision procedure, step by step, and how urgency is computed from facts are in
:mod:`hive.sidecar.gate.rules`. Time is the ``clock`` given to :class:`Gate` (default ``time.time``),
so a replayed day with fixed timestamps decides the same way every time. Nothing polls: waiting and
held items are decided again at breakpoints and at their own deadline (the end of quiet hours, the
bound of a wait), for which :meth:`Gate.run` keeps one timer armed for the earliest.

The gate's modules: :mod:`~hive.sidecar.gate.model` (its records), :mod:`~hive.sidecar.gate.rules`
(the decision steps), this one (the gate: its state and the paths an item takes),
:mod:`~hive.sidecar.gate.ledger` (what it writes down and reads back), :mod:`~hive.sidecar.gate.prefs`,
:mod:`~hive.sidecar.gate.sources` (what the sidecar tells it), :mod:`~hive.sidecar.gate.relay` (items
for teammates' machines), :mod:`~hive.sidecar.gate.delivery`, :mod:`~hive.sidecar.gate.ops` and
:mod:`~hive.sidecar.gate.running` (each sidecar's one gate).
"""

from __future__ import annotations

import datetime as dt
import heapq
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from ..base.config import DAY, HOUR
from ..base.errors import BadRequest, HiveError
from ..base.store import Store
from ..person.dialog import clean, clip
from . import rules
from .delivery import deliver_in_sidecar
from .ledger import Ledger
from .ledger import digest_text as digest_text
from .model import BREAKPOINTS, FACT_STATES, MAX_REF, OUTCOME_STATE, Deliverer, Entry, Ids, Owners, Relay, Seen
from .model import MAX_BODY as MAX_BODY
from .model import MAX_EVIDENCE as MAX_EVIDENCE
from .model import MAX_TITLE as MAX_TITLE
from .model import Decision as Decision
from .model import Evidence as Evidence
from .model import Fact as Fact
from .model import Item as Item
from .ops import OPS as OPS
from .prefs import Prefs, PrefsFile, valid_source
from .relay import attach as attach
from .relay import is_local, relay_item
from .rules import fact_urgency as fact_urgency
from .running import GATES
from .running import gate_of as gate_of
from .sources import code_owners, idle_session
from .sources import observed as observed

if TYPE_CHECKING:
    from ..daemon.server import Sidecar

log = logging.getLogger("hive.sidecar.gate.engine")

RELAY_GIVE_UP = DAY  # an item no machine of its person's took is retried this long, then waits in the digest here


class Gate:
    """The decision procedure, its in-memory state and its ledger in the sidecar's database.

    Call :meth:`load` (or run :meth:`run`) before the first offer. All state changes are made
    synchronously between awaits, so concurrent callers see one order of decisions; the rows
    are then committed in one batch (group commit) before any delivery and before callers return.
    """

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

    # ---- offers --------------------------------------------------------------------------

    async def offer(self, item: Item) -> Decision:
        """Decide what happens to ``item`` now; the decision is in the ledger when this returns."""
        return (await self.offer_many([item]))[0]

    async def offer_many(self, items: Iterable[Item], *, relayed: bool = False) -> list[Decision]:
        """Offer several items at once: one commit for all their ledger rows.

        The decisions come in the order of ``items``; a security finding's copies for the owners
        of its code follow the item they came from. ``relayed``: the items came from another
        machine, whose gate already found their code owners.
        """
        offered: list[tuple[Item, str]] = []
        for item in items:
            note = item.data.get("code_owner") if relayed else ""  # why the other machine sent it here
            offered.append((item, clip(note, MAX_REF) if isinstance(note, str) else ""))
            if not relayed and self.owners is not None and rules.open_finding(self.facts, item):
                # The first floor: a security finding reaches the owner of the code too, not
                # only whoever it was proposed for.
                for person, why in await self.owners(item):
                    if person != item.person and all(o.person != person for o, _ in offered):
                        offered.append((_for_person(item, person, why), why))
        now = self.clock()
        decided = [self._offer(item, now, owner) for item, owner in offered]
        await self._commit()
        return await self._dispatch(decided)

    def _offer(self, item: Item, now: float, owner: str = "") -> tuple[Entry, Decision]:
        fingerprint = item.fingerprint
        # 0. A person on another machine: their own machine's gate decides, with their preferences.
        if self.is_local is not None and self.relay is not None and not self.is_local(item):
            entry = Entry(id=self._ids.new(now), item=item, fingerprint=fingerprint, urgency="info", offered_at=now)
            entry.urgency = rules.urgency(self.facts, item, now)[0]
            return entry, self._decide(
                entry,
                "relay",
                "relay",
                f"for {item.person}, whose own machine decides with their preferences: "
                "relayed there" + (f" ({owner})" if owner else ""),
                now,
            )
        prefs = self.prefs(item.person)
        level, because = rules.urgency(self.facts, item, now)
        entry = Entry(
            id=self._ids.new(now),
            item=item,
            fingerprint=fingerprint,
            urgency=level,
            offered_at=now,
            shadow=not prefs.is_live(item.source),
        )
        window = self.prefs_file.settings.window
        prior = self._prior(fingerprint, now)
        # 1. Floors, fixed in code: nothing below may lower them.
        if (floor := rules.floor(self.facts, item, prefs.alarm_channel, owner=owner)) is not None:
            # Told already, at this urgency: telling again is noise, not a floor.
            if (step := rules.duplicate(prior, level, prefs, window, now, told=True)) is not None:
                return entry, self._step(entry, step, now)
            self._remember(fingerprint, Seen(entry.id, now, level, "delivered"))
            return entry, self._step(entry, floor, now)
        # 2. The person's preferences. 3. Dedupe, unless the same thing became more urgent.
        if (step := rules.mute(prefs, item) or rules.duplicate(prior, level, prefs, window, now)) is not None:
            return entry, self._step(entry, step, now)
        if prior is not None and prior.state != "delivered":  # more urgent now: the first one mattered
            self._signal(prior.id, "escalated", f"offered again as {level}: {because}", now)
        self._remember(fingerprint, Seen(entry.id, now, level, "new"))
        return entry, self._route(entry, prefs, now, because, fresh=True)

    async def offer_now(
        self, item: Item, deliver: Deliverer, *, channel: str = "popup", budget: bool = False
    ) -> Decision:
        """Decide an item that is worth showing now or not at all, and show it with ``deliver``.

        For a pop-up about a message that is already in its mailbox (``notify``), a review request
        (``review``) or a lesson line in a hook's reply (``lesson``, ``channel="session"``): floors,
        the person's mutes, dedupe, the digest-only channel, shadow and quiet hours apply, and the
        ledger records it; urgency and breakpoints do not, because holding it for later is
        pointless (what it is about waits where it is: the message in its mailbox, the proposal in
        ``hive lessons pending``, the lesson for a later search). ``budget``: it also spends a unit
        of its source's share of the daily budget (and its proposer's part), as an interruption of
        the person does; without it the source is rate-limited where the item is made. An item that
        is not shown is in the digest, never lost.
        """
        now = self.clock()
        entry, decision = self._offer_now(item, now, channel, budget)
        await self._commit()
        return (await self._dispatch([(entry, decision)], deliver=deliver))[0]

    def _offer_now(
        self, item: Item, now: float, channel: str = "popup", budget: bool = False
    ) -> tuple[Entry, Decision]:
        prefs = self.prefs(item.person)
        level = rules.urgency(self.facts, item, now)[0]
        entry = Entry(
            id=self._ids.new(now),
            item=item,
            fingerprint=item.fingerprint,
            urgency=level,
            offered_at=now,
            shadow=not prefs.is_live(item.source),
        )
        if (step := rules.floor(self.facts, item, channel) or rules.mute(prefs, item)) is not None:
            return entry, self._step(entry, step, now)
        prior = self._prior(entry.fingerprint, now)
        if (step := rules.duplicate(prior, level, prefs, self.prefs_file.settings.window, now)) is not None:
            return entry, self._step(entry, step, now)
        self._remember(entry.fingerprint, Seen(entry.id, now, level, "new"))
        shown = "a pop-up" if channel == "popup" else "a line in the session"
        if (step := rules.digest_only(prefs, item) or rules.quiet(prefs, now, shown=shown)) is not None:
            return entry, self._step(entry, step, now)
        spent = ""
        if budget:
            taken, rule, why = self.budget.take(entry, prefs, now)
            if not taken:
                return entry, self._decide(entry, "digest", rule, why, now)
            spent = f"; {why}"
        return entry, self._decide(
            entry,
            "deliver",
            "now.requested",
            f"{item.proposer or 'its sender'} asked for it to be shown now; {item.person} "
            f"takes {item.source} items as {shown} and is outside quiet hours{spent}",
            now,
            channel=channel,
            session=item.session,
        )

    def _route(self, entry: Entry, prefs: Prefs, now: float, because: str, fresh: bool, prefix: str = "") -> Decision:
        """Steps from the channel on: for a new item, and again for a held one when its quiet hours end."""
        item = entry.item
        if not fresh:
            entry.urgency, because = rules.urgency(self.facts, item, now)  # facts may have changed while it was held
            if (
                step := rules.floor(self.facts, item, prefs.alarm_channel, prefix=prefix)
                or rules.mute(prefs, item, prefix=prefix)
            ) is not None:
                return self._step(entry, step, now)
        step = (
            rules.digest_only(prefs, item, prefix=prefix)
            or rules.alarm(entry.urgency, because, prefs, item, prefix=prefix)
            or rules.quiet(prefs, now, prefix=prefix)
            or rules.info(entry.urgency, prefix=prefix)
        )
        if step is not None:
            return self._step(entry, step, now)
        settings = self.prefs_file.settings
        if entry.urgency == "alarm":  # alarms off: it waits like attention, on a shorter bound, off-budget
            due = now + settings.hold_alarm
            return self._wait(entry, prefs, now, due, prefix + f"alarm ({because}) with alarms off: ")
        taken, rule, why = self.budget.take(entry, prefs, now)
        if not taken:
            return self._decide(entry, "digest", rule, prefix + why, now)
        return self._wait(entry, prefs, now, now + settings.hold_attention, prefix + f"attention ({because}); {why}; ")

    def _wait(self, entry: Entry, prefs: Prefs, now: float, due: float, why: str) -> Decision:
        """Wait for a breakpoint, unless its session (or, for the person, one of theirs) is at one: idle."""
        idle_after = self.prefs_file.settings.idle_after
        where = self.idle_session(entry.item, idle_after) if self.idle_session is not None else ""
        if where:
            return self._decide(
                entry,
                "deliver",
                "breakpoint.idle",
                f"{why}{where} has been idle for {rules.span(idle_after)} or more: a natural pause",
                now,
                channel=rules.channel_for(prefs, entry.urgency),
                session=where,
            )
        return self._decide(
            entry,
            "wait",
            "wait",
            f"{why}waits for a breakpoint, at most until {rules.when(prefs, due, now)}",
            now,
            due=due,
        )

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

    # ---- delivery ------------------------------------------------------------------------

    async def _dispatch(
        self, decided: list[tuple[Entry, Decision]], deliver: Deliverer | None = None
    ) -> list[Decision]:
        """Hand delivered items to their deliverers (or ``deliver``), after their ledger rows are committed."""
        results = []
        failed = False
        for entry, decision in decided:
            if decision.outcome == "relay":
                results.append(await self._relay(entry))
                failed = True  # its outcome there is a ledger row here too
                continue
            if decision.outcome != "deliver":
                results.append(decision)
                continue
            show = deliver or self.deliverers.get(entry.item.source, self.default_deliver)
            try:
                if show is not None:
                    await show(entry.item, decision)
            except Exception as exc:
                message = exc.message if isinstance(exc, HiveError) else "see sidecar.log"
                if not isinstance(exc, HiveError):
                    log.exception("delivering gate item %s failed", entry.id)
                failed = True
                results.append(
                    self._decide(
                        entry,
                        "digest",
                        "deliver.failed",
                        f"delivery on {decision.channel} failed ({message}); in the digest instead",
                        self.clock(),
                    )
                )
                continue
            results.append(decision)
        if failed:
            await self._commit()
        return results

    async def _relay(self, entry: Entry) -> Decision:
        """Hand a relayed item to its person's machine; if none takes it, try again later, and after
        RELAY_GIVE_UP keep it in the digest here, so nothing is lost."""
        assert self.relay is not None
        try:
            where = await self.relay(entry.item, self.facts_for(entry.item))
        except Exception as exc:
            message = exc.message if isinstance(exc, HiveError) else "see sidecar.log"
            if not isinstance(exc, HiveError):
                log.exception("relaying gate item %s failed", entry.id)
            now = self.clock()
            if now - entry.offered_at >= RELAY_GIVE_UP:
                return self._decide(
                    entry,
                    "digest",
                    "relay.failed",
                    f"no machine of {entry.item.person}'s took it for "
                    f"{rules.span(now - entry.offered_at)} ({message}); in the digest here instead",
                    now,
                )
            # Backing off with the time it has waited, so a machine away for a day costs a few rows.
            due = now + max(self.prefs_file.settings.relay_retry, min(HOUR, (now - entry.offered_at) / 2))
            return self._decide(
                entry,
                "hold",
                "relay.wait",
                f"{entry.item.person}'s machine did not take it ({message}); tried again at "
                f"{rules.when(self.prefs(entry.item.person), due, now)}",
                now,
                due=due,
            )
        return self._decide(entry, "relay", "relay.taken", where, self.clock())

    # ---- breakpoints and deadlines -------------------------------------------------------

    async def breakpoint(self, person: str, session: str, kind: str) -> list[Decision]:
        """A natural pause for ``person`` (in ``session``): deliver what waits for them there.

        An item for one session waits for a breakpoint in that session; an item for the person
        goes to the session where the breakpoint happened.

        Raises:
            BadRequest: an unknown breakpoint kind.
        """
        if kind not in BREAKPOINTS:
            raise BadRequest(f"a breakpoint is one of {', '.join(BREAKPOINTS)}")
        now = self.clock()
        waiting = [e for e in self.waiting.get(person, {}).values() if e.item.session in ("", session)]
        where = f" in {session}" if session else ""
        decided = [
            (
                e,
                self._release(
                    e,
                    now,
                    "breakpoint." + kind,
                    f"at a breakpoint: {BREAKPOINTS[kind]}{where}",
                    session or e.item.session,
                ),
            )
            for e in sorted(waiting, key=lambda e: e.offered_at)
        ]
        await self._commit()
        return await self._dispatch(decided)

    def _release(self, entry: Entry, now: float, rule: str, reason: str, session: str) -> Decision:
        """A waiting item's moment came: deliver it, unless the person's preferences changed meanwhile."""
        prefs = self.prefs(entry.item.person)
        step = (
            rules.mute(prefs, entry.item, waited=True)
            or rules.digest_only(prefs, entry.item, waited=True)
            or rules.quiet(prefs, now, prefix=f"{reason}, but in ")
        )
        if step is not None:
            return self._step(entry, step, now)
        return self._decide(
            entry,
            "deliver",
            rule,
            f"{entry.urgency}: delivered {reason}",
            now,
            channel=rules.channel_for(prefs, entry.urgency),
            session=session,
        )

    def next_due(self) -> float | None:
        """When the earliest waiting or held item must be decided again."""
        while self._due:
            due, entry_id = self._due[0]
            entry = self.open.get(entry_id)
            if entry is not None and entry.due == due:
                return due
            heapq.heappop(self._due)  # decided since: a stale reminder
        return None

    async def wake(self) -> list[Decision]:
        """Decide again every item whose time came: quiet hours over, or a wait at its bound."""
        now = self.clock()
        decided = []
        while (due := self.next_due()) is not None and due <= now:
            _, entry_id = heapq.heappop(self._due)
            entry = self.open[entry_id]
            prefs = self.prefs(entry.item.person)
            if (
                entry.state == "held"
                and self.is_local is not None
                and self.relay is not None
                and not self.is_local(entry.item)
            ):
                self._close(entry)
                decided.append(
                    (entry, self._decide(entry, "relay", "relay", f"for {entry.item.person}: relayed again", now))
                )
            elif entry.state == "held":
                # The wait for quiet hours to end is over: the item is decided again from its channel on.
                self._close(entry)
                decided.append(
                    (
                        entry,
                        self._route(entry, prefs, now, "", fresh=False, prefix="quiet hours ended; decided again: "),
                    )
                )
            else:
                bound = rules.span(now - entry.offered_at)
                decided.append(
                    (
                        entry,
                        self._release(
                            entry,
                            now,
                            "max-hold",
                            f"at its bound: no breakpoint came within {bound}",
                            entry.item.session,
                        ),
                    )
                )
        if decided:
            await self._commit()
        return await self._dispatch(decided)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Load, then keep one timer armed for the earliest deadline; wake up only for that."""
        if not self.loaded:
            await self.load()
        task_status.started()
        while True:
            self._rearm = anyio.Event()
            due = self.next_due()
            self._armed = due
            delay = None if due is None else due - self.clock()
            if delay is not None and delay <= 0:
                try:
                    await self.wake()
                except Exception:
                    log.exception("the gate's wake-up failed")
                    await anyio.sleep(1.0)  # do not spin on a broken database
                continue
            with anyio.move_on_after(delay if delay is not None else float("inf")):
                await self._rearm.wait()  # an earlier deadline arrived: re-arm for it

    # ---- signals and reading: the ledger's ----------------------------------------------

    async def acted(self, ref: str, how: str) -> dict[str, Any]:
        """The person or their session acted on an item (cited it, replied, changed the file)."""
        return await self.book.acted(ref, how)

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


def _for_person(item: Item, person: str, why: str) -> Item:
    """A copy of ``item`` for a code owner: for them, not for one of the proposer's sessions."""
    return Item(
        source=item.source,
        person=person,
        title=item.title,
        body=item.body,
        session="",
        evidence=item.evidence,
        key=item.key,
        proposer=item.proposer,
        data={**item.data, "code_owner": why},
    )


async def run_gate(sidecar: Sidecar, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """The sidecar's hook: build its gate, load it, and run its one timer in the sidecar's task group."""
    gate = Gate(
        sidecar.store,
        PrefsFile(sidecar.paths.config),
        deliver=lambda item, decision: deliver_in_sidecar(sidecar, item, decision),
        owners=lambda item: code_owners(sidecar, item),
        is_local=lambda item: is_local(sidecar, item),
        relay=lambda item, facts: relay_item(sidecar, item, facts),
        idle_session=lambda item, idle_after: idle_session(sidecar, item, idle_after),
    )
    GATES[sidecar] = gate
    await gate.run(task_status=task_status)
