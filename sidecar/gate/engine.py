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
(the decision steps), this one (the gate: the paths an item takes), :mod:`~hive.sidecar.gate.state`
(what it holds between decisions, and how one decision changes it),
:mod:`~hive.sidecar.gate.ledger` (what it writes down and reads back), :mod:`~hive.sidecar.gate.prefs`,
:mod:`~hive.sidecar.gate.sources` (what the sidecar tells it), :mod:`~hive.sidecar.gate.relay` (items
for teammates' machines), :mod:`~hive.sidecar.gate.delivery`, :mod:`~hive.sidecar.gate.ops` and
:mod:`~hive.sidecar.gate.running` (each sidecar's one gate).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from ..base.config import DAY, HOUR
from ..base.errors import BadRequest, HiveError
from ..person.dialog import clip
from . import rules
from .delivery import deliver_in_sidecar
from .ledger import digest_text as digest_text
from .model import BREAKPOINTS, MAX_REF, Deliverer, Entry, Seen
from .model import MAX_BODY as MAX_BODY
from .model import MAX_EVIDENCE as MAX_EVIDENCE
from .model import MAX_TITLE as MAX_TITLE
from .model import Decision as Decision
from .model import Evidence as Evidence
from .model import Fact as Fact
from .model import Item as Item
from .ops import OPS as OPS
from .prefs import Prefs, PrefsFile
from .relay import attach as attach
from .relay import is_local, relay_item
from .rules import fact_urgency as fact_urgency
from .running import GATES
from .running import gate_of as gate_of
from .sources import code_owners, idle_session
from .sources import observed as observed
from .state import GateState

if TYPE_CHECKING:
    from ..mail.host import MailHost

log = logging.getLogger("hive.sidecar.gate.engine")

RELAY_GIVE_UP = DAY  # an item no machine of its person's took is retried this long, then waits in the digest here


class Gate(GateState):
    """The decision procedure: the paths an item takes, over the state and ledger it inherits from
    :class:`~hive.sidecar.gate.state.GateState`.

    Call :meth:`load` (or run :meth:`run`) before the first offer. All state changes are made
    synchronously between awaits, so concurrent callers see one order of decisions; the rows
    are then committed in one batch (group commit) before any delivery and before callers return.
    """

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


async def run_gate(sidecar: MailHost, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
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
    GATES.put(sidecar, gate)
    await gate.run(task_status=task_status)
