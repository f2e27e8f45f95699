"""The gate: the one place where a proactive item becomes an interruption, and the ledger of why.

Sessions and watchers *propose* items (overlap notices, lesson recalls, review requests, notify
pop-ups, held mail); only the gate decides whether and when one reaches its person, and every
decision is written down with the rule that made it (constraint 4 of the design).

Using it (the API the sources call)
-----------------------------------

In the sidecar process::

    from hive.sidecar.gate import Evidence, Item, gate_of

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

Breakpoints come from the hooks: a turn ending (the Stop hook), and from the commands a session
ran (:func:`observed`): a test run finishing, a commit, a pull request opened. A session its hooks
say has been idle for ``idle_after`` seconds (60) is at a breakpoint already: an item that would
wait for one is delivered to it at once (``breakpoint.idle``). Report only real ones: a false
breakpoint costs more than a missed one, because the bound below delivers a waiting item anyway.

Sources that go through it: overlap notices (:mod:`hive.sidecar.observe`, ``offer``), notify
pop-ups (:mod:`hive.sidecar.ask`), review pop-ups for lesson proposals and turn-tier lesson lines
(:mod:`hive.sidecar.lesson_ops`, :mod:`hive.sidecar.lesson_turn`), the last three with
:meth:`Gate.offer_now`: shown now or not at all. A proposal nobody answered for a day is offered
again (``review``, through ``offer``) when its reviewer's digest is read (:data:`BEFORE_DIGEST`).

Across machines: an item for a person whose machines are elsewhere in the team (or for a session
on another machine) is relayed there (rule ``relay``, then ``relay.taken`` with what that gate
did), with the records its evidence points at, and decided by that machine's gate with that
person's preferences; a machine that does not take it gets it again after ``relay_retry``
seconds, backing off to an hour, for a day; then it waits in the digest here (``relay.wait``,
``relay.failed``).

Urgency
-------

``info``, ``attention`` or ``alarm``, computed only from *facts*: records hive's own observers
write with :meth:`Gate.record` (op ``gate_fact``), one current record per ``(kind, ref)``:

    test, ci     passing | failing      failing: attention; 3 runs in a row or 4 h: alarm
    deadline     open | done (+ due)    due within a day: attention; within an hour or past: alarm
    blocked      blocked | unblocked    attention (and the digest counts what an item unblocks)
    security     open | fixed           alarm, and the floor

A session's test runs record ``test`` facts by themselves, ref ``{repo}@{branch}`` as sessions
name them (:func:`ref_for_tests`), when the hook reports the exit code.

An item's evidence points at facts (``Evidence("ci", "acme/api@main")``); the item cannot
carry its own urgency (a wire item's ``urgency`` field is ignored, and the reply says so), and
its wording counts for nothing, so an item that says URGENT is ``info`` unless a fact says
otherwise. The rules are :func:`fact_urgency`; a later offer of the same fingerprint at a
higher urgency, or its fact turning into an alarm, marks an undelivered item as having
mattered (the measures count it).

The decision procedure
----------------------

Each step writes a ledger row (item, rule, reason, time) when it decides::

    floor            a security finding (an open ``security`` fact in the evidence) reaches its
                     person at once, on their alarm channel: no preference, shadow, quiet hours
                     or budget stops it; and a copy reaches each roster person who owns the
                     files in its ``file`` evidence by the repository's CODEOWNERS .. floor.security
    preferences      the person muted the source .............................. pref.mute
    dedupe           the same fingerprint within the window, unless more urgent ... duplicate
    channel          the person takes everything as a digest ...................... pref.digest
    urgency          an alarm, with the person's alarms on, goes out at once ...... urgency.alarm
    quiet hours      held until they end, then decided again ...................... quiet
    info             nothing checkable makes it urgent: the digest ................ urgency.info
    budget           attention items per local day, split into per-source shares
                     (and a proposer's part of its source's share) ... budget.share/proposer/daily
    breakpoint       an item that fits the budget waits for its person's next breakpoint
                     (wait), delivered there (breakpoint.<kind>) or at its bound (max-hold)

The channel preference takes effect after dedupe so a digest never lists a duplicate. With
alarms off, an alarm waits for a breakpoint like an attention item, on the shorter
``hold_alarm`` bound and without spending the budget. An item from a source in shadow goes
through the same steps; where a live item would be delivered, wait, be held or go to the
digest, it is recorded as ``shadow`` with what it would have done (spending only its own
source's share), and nothing reaches anyone. A delivery that fails puts the item in the digest
(rule ``deliver.failed``), so nothing the gate let through is lost.

Time is the ``clock`` given to :class:`Gate` (default ``time.time``), so a replayed day with
fixed timestamps decides the same way every time. Nothing polls: waiting and held items are
decided again at breakpoints and at their own deadline (the end of quiet hours, the bound of a
wait), for which :meth:`Gate.run` keeps one timer armed for the earliest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import heapq
import json
import logging
import os
import re
import time
import weakref
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus

from . import codeowners
from .config import DAY, HOUR, slug
from .defang import one_line
from .dialog import Prompt, backend_for, clean, clip, find_desktop
from .errors import BadRequest, HiveError, NeedsPerson, NoDesktop, NotFound, Refused
from .gate_prefs import Prefs, PrefsFile, format_quiet, parse_change, valid_source, write_changes
from .person import asks_person, confirm_by_person
from .render import Message
from .store import Store
from .transport import FrameError, Link, LinkClosed
from .ulid import is_ulid, new_ulid

if TYPE_CHECKING:
    from .mesh import Mesh
    from .server import Connection, Sidecar

log = logging.getLogger("hive.sidecar.gate")

URGENCIES = ("info", "attention", "alarm")
RANK = {u: i for i, u in enumerate(URGENCIES)}
BREAKPOINTS = {"commit": "a commit", "test": "a test run finished", "idle": "the session idle for 60 s",
               "turn": "a turn ended", "pr": "a pull request opened"}
# What each checkable record kind may say, and what its facts mean for urgency (fact_urgency).
FACT_STATES = {"test": ("passing", "failing"), "ci": ("passing", "failing"), "deadline": ("open", "done"),
               "blocked": ("blocked", "unblocked"), "security": ("open", "fixed"),
               "overlap": ("open", "resolved")}
ACTED = ("cited", "replied", "changed", "asked", "wanted")
# Signals that count for the measures: acted on (a delivered item), mattered (a held or silenced one).
ACTED_ON = "('cited', 'replied', 'changed', 'wanted')"
MATTERED = "('asked', 'escalated', 'cited', 'replied', 'changed', 'wanted')"
OUTCOME_STATE = {"deliver": "delivered", "wait": "pending", "hold": "held", "digest": "digest",
                 "silence": "silenced", "shadow": "shadow", "relay": "relayed"}
RELAY_GIVE_UP = DAY  # an item no machine of its person's took is retried this long, then waits in the digest here
ESCALATE_RUNS = 3  # a test or CI failing this many runs in a row is an alarm
ESCALATE_AFTER = 4 * HOUR  # ...and so is one failing this long
DEADLINE_ALARM = HOUR  # a deadline this close (or past) is an alarm
DEADLINE_ATTENTION = DAY  # ...this close, attention

MAX_TITLE = 300
MAX_BODY = 4000
MAX_EVIDENCE = 32
MAX_REF = 300
MAX_DATA = 16 * 1024
MAX_LEDGER = 5000
DIGEST_DEFAULT = DAY  # a first digest looks back this far

_KIND = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
# Built once: json.dumps with options builds an encoder per call.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]


_STR = json.encoder.encode_basestring  # what _JSON writes a string as (C-accelerated)


def _evidence_json(evidence: Iterable[Evidence]) -> str:
    """``_JSON.encode([e.public() for e in evidence])``, byte for byte, without the dicts: written per item."""
    return "[" + ",".join(
        f'{{"kind":{_STR(e.kind)},"ref":{_STR(e.ref)},"note":{_STR(e.note)}}}' if e.note
        else f'{{"kind":{_STR(e.kind)},"ref":{_STR(e.ref)}}}' for e in evidence) + "]"


class _Ids:
    """ULIDs for gate items (``ulid.new_ulid``'s format), ten bits per step: the gate mints one per offer."""

    def __init__(self) -> None:
        self.ms = -1
        self.rand = 0

    def new(self, now: float) -> str:
        ms = int(now * 1000)
        if ms <= self.ms:
            ms, self.rand = self.ms, self.rand + 1  # same millisecond (or a clock that went back): keep order
        else:
            self.rand = int.from_bytes(os.urandom(10), "big") >> 1  # room to count up within the millisecond
        self.ms = ms
        value = (ms << 80) | (self.rand & ((1 << 80) - 1))
        return "".join([_PAIRS[(value >> shift) & 1023] for shift in range(120, -10, -10)])


# ---- items ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Evidence:
    """A pointer hive can follow. ``test``/``ci``/``deadline``/``blocked``/``security`` name facts;
    other kinds (``file``, ``message``, ``lesson``, ``commit``, ``session``, a URL) are pointers only."""

    kind: str
    ref: str
    note: str = ""

    def public(self) -> dict[str, str]:
        return {"kind": self.kind, "ref": self.ref, **({"note": self.note} if self.note else {})}


@dataclass(frozen=True)
class Item:
    """A proactive item as a source proposes it. It has no urgency field: the gate computes it."""

    source: str
    person: str
    title: str
    body: str = ""
    session: str = ""
    evidence: tuple[Evidence, ...] = ()
    key: str = ""
    proposer: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """Stable across offers of the same thing: the key, else the evidence, else the normalised title."""
        return self._cached("fingerprint", self._fingerprint)

    def _fingerprint(self) -> str:
        if self.key:
            basis: Any = ["key", self.key]
        elif self.evidence:
            basis = ["evidence", sorted([e.kind, e.ref] for e in self.evidence)]
        else:
            basis = ["title", " ".join(re.findall(r"[a-z0-9]+", self.title.lower()))]
        raw = _JSON.encode([self.source, self.person, self.session, basis])
        return hashlib.blake2b(raw.encode(), digest_size=8).hexdigest()

    # Written with every ledger update of the item: encoded once.
    @property
    def evidence_json(self) -> str:
        return self._cached("evidence_json", lambda: _evidence_json(self.evidence) if self.evidence else "[]")

    @property
    def data_json(self) -> str:
        return self._cached("data_json", lambda: _JSON.encode(dict(self.data)) if self.data else "{}")

    def _cached(self, name: str, make: Callable[[], str]) -> str:
        # A frozen item computes these once; functools.cached_property takes a lock per read on 3.11.
        found = self.__dict__.get(name)
        if found is None:
            found = self.__dict__[name] = make()
        return found

    def public(self) -> dict[str, Any]:
        return {"source": self.source, "person": self.person, "session": self.session, "title": self.title,
                "body": self.body, "evidence": [e.public() for e in self.evidence], "key": self.key,
                "proposer": self.proposer, "data": dict(self.data)}

    @classmethod
    def from_wire(cls, raw: Any, default_person: str = "") -> Item:
        """Validate an item from a request. Raises BadRequest."""
        if not isinstance(raw, Mapping):
            raise BadRequest("an item is an object: source, person, title, and optionally session, body, "
                             "evidence, key, proposer, data")

        def text(name: str, limit: int, required: bool = False) -> str:
            value = raw.get(name, "")
            if value is None:
                value = ""
            if not isinstance(value, str):
                raise BadRequest(f"item.{name} must be a string")
            value = clean(value)
            if required and not value:
                raise BadRequest(f"an item needs a non-empty {name}")
            if len(value) > limit:
                raise BadRequest(f"item.{name} is limited to {limit} characters")
            return value

        source = raw.get("source")
        if not valid_source(source):
            raise BadRequest("item.source is a source name: a-z, 0-9 and -, at most 32 characters")
        person = slug(str(raw.get("person") or default_person))
        if not person:
            raise BadRequest("an item needs a person: who it is for")
        evidence_raw = raw.get("evidence") or []
        if not isinstance(evidence_raw, list) or len(evidence_raw) > MAX_EVIDENCE:
            raise BadRequest(f"item.evidence is a list of at most {MAX_EVIDENCE} {{kind, ref}} objects")
        evidence = []
        for e in evidence_raw:
            if not isinstance(e, Mapping) or not isinstance(e.get("kind"), str) or not _KIND.match(e["kind"]):
                raise BadRequest("each piece of evidence has a kind (a-z, 0-9, - and _) and a ref")
            ref, note = e.get("ref"), e.get("note", "")
            if not isinstance(ref, str) or not ref or len(ref) > MAX_REF or not isinstance(note, str):
                raise BadRequest(f"an evidence ref is a non-empty string of at most {MAX_REF} characters")
            evidence.append(Evidence(e["kind"], ref, clip(clean(note), MAX_REF)))
        data = raw.get("data") or {}
        if not isinstance(data, Mapping) or len(json.dumps(data, ensure_ascii=False)) > MAX_DATA:
            raise BadRequest(f"item.data is an object of at most {MAX_DATA} bytes as JSON")
        return cls(source=str(source), person=person, title=text("title", MAX_TITLE, required=True),
                   body=text("body", MAX_BODY), session=text("session", MAX_REF), evidence=tuple(evidence),
                   key=text("key", MAX_REF), proposer=text("proposer", MAX_REF), data=dict(data))


@dataclass(frozen=True)
class Fact:
    """The latest record hive holds about one thing: ``runs`` counts records in a row with this state."""

    kind: str
    ref: str
    state: str
    since: float
    at: float
    runs: int = 1
    due: float | None = None
    detail: str = ""

    def public(self) -> dict[str, Any]:
        return {"kind": self.kind, "ref": self.ref, "state": self.state, "since": self.since, "at": self.at,
                "runs": self.runs, "due": self.due, "detail": self.detail}


def fact_urgency(fact: Fact, now: float) -> tuple[str, str]:
    """The urgency one fact gives an item that points at it, and the reason in words."""
    name = f"{fact.kind} {fact.ref}"
    if fact.kind in ("test", "ci") and fact.state == "failing":
        if fact.runs >= ESCALATE_RUNS:
            return "alarm", f"{name} failed {fact.runs} runs in a row"
        if now - fact.since >= ESCALATE_AFTER:
            return "alarm", f"{name} has been failing for {_span(now - fact.since)}"
        return "attention", f"{name} is failing"
    if fact.kind == "deadline" and fact.state == "open" and fact.due is not None:
        left = fact.due - now
        if left <= 0:
            return "alarm", f"{name} passed {_span(-left)} ago"
        if left <= DEADLINE_ALARM:
            return "alarm", f"{name} is due in {_span(left)}"
        if left <= DEADLINE_ATTENTION:
            return "attention", f"{name} is due in {_span(left)}"
    if fact.kind == "blocked" and fact.state == "blocked":
        return "attention", f"{fact.ref} is blocked" + (f" ({fact.detail})" if fact.detail else "")
    if fact.kind == "overlap" and fact.state == "open":
        # hive saw both sessions modify the file itself: a collision in the making, worth a turn.
        return "attention", f"two live sessions are modifying {fact.ref}"
    if fact.kind == "security" and fact.state == "open":
        return "alarm", f"security finding {fact.ref} is open"
    return "info", ""


def _span(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * HOUR:
        return f"{seconds / HOUR:.1f} h".replace(".0 h", " h")
    return f"{seconds / DAY:.0f} days"


@dataclass(frozen=True)
class Decision:
    """One ledger row: what the gate did with an item, by which rule, when (and until when)."""

    item_id: str
    fingerprint: str
    source: str
    person: str
    outcome: str  # deliver | wait | hold | digest | silence | shadow
    rule: str
    reason: str
    urgency: str
    at: float
    due: float | None = None  # wait/hold: when it is decided again at the latest
    channel: str = ""  # deliver: session | popup
    session: str = ""  # deliver: the session it went to ("" for the person)
    would: str = ""  # shadow: the outcome a live source would have had

    def public(self) -> dict[str, Any]:
        return {"item": self.item_id, "fingerprint": self.fingerprint, "source": self.source,
                "person": self.person, "outcome": self.outcome, "rule": self.rule, "reason": self.reason,
                "urgency": self.urgency, "at": self.at, "due": self.due, "channel": self.channel,
                "session": self.session, "would": self.would}


@dataclass
class Entry:
    """An offered item as the gate tracks it."""

    id: str
    item: Item
    fingerprint: str
    urgency: str
    offered_at: float
    state: str = "new"
    would: str = ""
    due: float | None = None
    channel: str = ""
    spent: str = ""  # the local day whose budget it spent a unit of
    shadow: bool = False


@dataclass
class Seen:
    """The last item with a fingerprint that was not itself a duplicate: what dedupe compares with."""

    id: str
    at: float
    urgency: str
    state: str


Deliverer = Callable[[Item, Decision], Awaitable[None]]
# (person, why): the roster persons who own the code an item's evidence points at (CODEOWNERS).
Owners = Callable[[Item], Awaitable[list[tuple[str, str]]]]
# Hand an item, with the facts its evidence points at, to its person's own machine; returns where
# it went and what that machine's gate did. Raises HiveError when no machine of theirs took it.
Relay = Callable[[Item, list[Fact]], Awaitable[str]]


# ---- the gate ------------------------------------------------------------------------------

class Gate:
    """The decision procedure, its in-memory state and its ledger in the sidecar's database.

    Call :meth:`load` (or run :meth:`run`) before the first offer. All state changes are made
    synchronously between awaits, so concurrent callers see one order of decisions; the rows
    are then committed in one batch (group commit) before any delivery and before callers return.
    """

    def __init__(self, store: Store, prefs: PrefsFile, *, clock: Callable[[], float] = time.time,
                 deliver: Deliverer | None = None, owners: Owners | None = None,
                 is_local: Callable[[Item], bool] | None = None, relay: Relay | None = None,
                 idle_session: Callable[[Item, float], str] | None = None) -> None:
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
        self.spent: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)  # (person, day) -> counts
        self.facts: dict[tuple[str, str], Fact] = {}
        self._due: list[tuple[float, str]] = []  # (due, id) heap; stale pairs are skipped
        self._rearm = anyio.Event()
        self._armed: float | None = None
        self._items: dict[str, tuple[Any, ...]] = {}  # rows to upsert, by id (the latest state wins)
        self._ledger: list[tuple[Any, ...]] = []
        self._signals: list[tuple[Any, ...]] = []
        self._facts_rows: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._queued = 0
        self._written = 0
        self._failed = 0
        self._writing: anyio.Event | None = None
        self.loaded = False
        self._ids = _Ids()

    # ---- start ---------------------------------------------------------------------------

    async def load(self) -> None:
        """Rebuild the in-memory state (open items, dedupe window, today's budgets, facts) from the database."""
        now = self.clock()
        window = self.prefs_file.settings.window
        for row in await self.store.fetchall("SELECT * FROM gate_items WHERE state IN ('pending', 'held')"):
            entry = _entry_from_row(row)
            self.open[entry.id] = entry
            if entry.state == "pending":
                self.waiting[entry.item.person][entry.id] = entry
            if entry.due is not None:
                heapq.heappush(self._due, (entry.due, entry.id))
        rows = await self.store.fetchall(
            "SELECT i.id, i.fingerprint, i.offered_at, i.urgency, i.state FROM gate_items i WHERE i.offered_at >= ? "
            "AND NOT EXISTS (SELECT 1 FROM gate_ledger l WHERE l.item = i.id AND l.rule = 'duplicate') "
            "ORDER BY i.offered_at", (now - window,))
        for row in rows:
            self._remember(row["fingerprint"], Seen(row["id"], row["offered_at"], row["urgency"], row["state"]))
        since = (dt.datetime.fromtimestamp(now, dt.UTC) - dt.timedelta(days=2)).date().isoformat()
        for row in await self.store.fetchall(
                "SELECT person, source, proposer, state, spent FROM gate_items WHERE spent >= ?", (since,)):
            self._count(row["person"], row["spent"], row["source"], row["proposer"], row["state"] == "shadow", 1)
        for row in await self.store.fetchall("SELECT * FROM gate_facts"):
            fact = Fact(row["kind"], row["ref"], row["state"], row["since"], row["at"], row["runs"], row["due"],
                        row["detail"])
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

    async def record(self, kind: str, ref: str, state: str, *, due: float | None = None, detail: str = "",
                     at: float | None = None) -> Fact:
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
        fact = Fact(kind, ref, state, before.since if same and before else now, now,
                    before.runs + 1 if same and before else 1, due, clip(clean(detail), MAX_REF))
        self.facts[(kind, ref)] = fact
        self._facts_rows[(kind, ref)] = (kind, ref, state, fact.since, now, fact.runs, due, fact.detail)
        self._queued += 1
        # Compared with what the last record meant when it was made: a failure that has now run long
        # enough, or often enough, to be an alarm escalated.
        if fact_urgency(fact, now)[0] == "alarm" and (before is None or fact_urgency(before, before.at)[0] != "alarm"):
            await self._escalated(kind, ref, now)
        await self._commit()
        return fact

    async def _escalated(self, kind: str, ref: str, now: float) -> None:
        """A fact just became an alarm: items about it that were not delivered turned out to matter."""
        rows = await self.store.fetchall(
            "SELECT id, evidence FROM gate_items WHERE state IN ('pending', 'held', 'digest', 'silenced', 'shadow') "
            "AND updated_at >= ? AND evidence LIKE ?", (now - 7 * DAY, f"%{_STR(ref)[1:-1]}%"))
        for row in rows:
            if any(e.get("kind") == kind and e.get("ref") == ref for e in json.loads(row["evidence"])):
                self._signal(row["id"], "escalated", f"{kind} {ref}", now)

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
            if not relayed and self.owners is not None and self._floor(item):
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
            entry.urgency = self._urgency(item, now)[0]
            return entry, self._decide(entry, "relay", "relay",
                                       f"for {item.person}, whose own machine decides with their preferences: "
                                       "relayed there" + (f" ({owner})" if owner else ""), now)
        prefs = self.prefs(item.person)
        level, because = self._urgency(item, now)
        entry = Entry(id=self._ids.new(now), item=item, fingerprint=fingerprint, urgency=level,
                      offered_at=now, shadow=not prefs.is_live(item.source))
        # 1. Floors, fixed in code: nothing below may lower them.
        floor = self._floor(item)
        prior = self._prior(fingerprint, now)
        if floor:
            # Told already, at this urgency: telling again is noise, not a floor.
            if prior is not None and prior.state == "delivered" and RANK[level] <= RANK[prior.urgency]:
                return entry, self._silence_duplicate(entry, prior, now)
            self._remember(fingerprint, Seen(entry.id, now, level, "delivered"))
            whose = f"; {item.person} owns the code ({owner})" if owner else ""
            return entry, self._decide(entry, "deliver", "floor.security",
                                       f"a security finding always reaches its owner: {floor}{whose}", now,
                                       channel=prefs.alarm_channel, session=item.session)
        # 2. The person's preferences.
        if item.source in prefs.mute:
            return entry, self._decide(entry, "silence", "pref.mute",
                                       f"{item.person} muted {item.source}", now)
        # 3. Dedupe, unless the same thing became more urgent (which shows the first one mattered).
        if prior is not None:
            if RANK[level] <= RANK[prior.urgency]:
                return entry, self._silence_duplicate(entry, prior, now)
            if prior.state != "delivered":
                self._signal(prior.id, "escalated", f"offered again as {level}: {because}", now)
        self._remember(fingerprint, Seen(entry.id, now, level, "new"))
        return entry, self._route(entry, prefs, now, because, fresh=True)

    async def offer_now(self, item: Item, deliver: Deliverer, *, channel: str = "popup",
                        budget: bool = False) -> Decision:
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

    def _offer_now(self, item: Item, now: float, channel: str = "popup",
                   budget: bool = False) -> tuple[Entry, Decision]:
        prefs = self.prefs(item.person)
        level = self._urgency(item, now)[0]
        entry = Entry(id=self._ids.new(now), item=item, fingerprint=item.fingerprint, urgency=level,
                      offered_at=now, shadow=not prefs.is_live(item.source))
        if floor := self._floor(item):
            return entry, self._decide(entry, "deliver", "floor.security",
                                       f"a security finding always reaches its owner: {floor}", now,
                                       channel=channel, session=item.session)
        if item.source in prefs.mute:
            return entry, self._decide(entry, "silence", "pref.mute", f"{item.person} muted {item.source}", now)
        prior = self._prior(entry.fingerprint, now)
        if prior is not None and RANK[level] <= RANK[prior.urgency]:
            return entry, self._silence_duplicate(entry, prior, now)
        self._remember(entry.fingerprint, Seen(entry.id, now, level, "new"))
        if prefs.channel == "digest":
            return entry, self._decide(entry, "digest", "pref.digest",
                                       f"{item.person} takes everything but floors as a digest", now)
        shown = "a pop-up" if channel == "popup" else "a line in the session"
        if prefs.quiet_until(now) is not None:
            return entry, self._decide(entry, "digest", "quiet",
                                       f"quiet hours ({_quiet_text(prefs)}): {shown} is shown now or not at all; "
                                       "what it is about waits where it is", now)
        spent = ""
        if budget:
            taken, rule, why = self._take(entry, prefs, now)
            if not taken:
                return entry, self._decide(entry, "digest", rule, why, now)
            spent = f"; {why}"
        return entry, self._decide(entry, "deliver", "now.requested",
                                   f"{item.proposer or 'its sender'} asked for it to be shown now; {item.person} "
                                   f"takes {item.source} items as {shown} and is outside quiet hours{spent}", now,
                                   channel=channel, session=item.session)

    def _silence_duplicate(self, entry: Entry, prior: Seen, now: float) -> Decision:
        prefs = self.prefs(entry.item.person)
        return self._decide(entry, "silence", "duplicate",
                            f"duplicate of {prior.id} ({prior.state}, offered {_when(prefs, prior.at, now)}), "
                            f"within the {_span(self.prefs_file.settings.window)} window", now)

    def _route(self, entry: Entry, prefs: Prefs, now: float, because: str, fresh: bool,
               prefix: str = "") -> Decision:
        """Steps from the channel on: for a new item, and again for a held one when its quiet hours end."""
        item = entry.item
        if not fresh:
            entry.urgency, because = self._urgency(item, now)  # facts may have changed while it was held
            if floor := self._floor(item):
                return self._decide(entry, "deliver", "floor.security",
                                    prefix + f"a security finding always reaches its owner: {floor}", now,
                                    channel=prefs.alarm_channel, session=item.session)
            if item.source in prefs.mute:
                return self._decide(entry, "silence", "pref.mute", prefix + f"{item.person} muted {item.source}",
                                    now)
        if prefs.channel == "digest":
            return self._decide(entry, "digest", "pref.digest",
                                prefix + f"{item.person} takes everything but floors as a digest", now)
        if entry.urgency == "alarm" and prefs.alarms:
            return self._decide(entry, "deliver", "urgency.alarm", prefix + f"alarm: {because}; alarms are on",
                                now, channel=prefs.alarm_channel, session=item.session)
        until = prefs.quiet_until(now)
        if until is not None:
            return self._decide(entry, "hold", "quiet",
                                prefix + f"quiet hours ({_quiet_text(prefs)}): held until {_when(prefs, until, now)}",
                                now, due=until)
        if entry.urgency == "info":
            return self._decide(entry, "digest", "urgency.info",
                                prefix + "info: no test, CI, deadline, block or finding hive can check makes it "
                                "urgent; it goes to the digest", now)
        settings = self.prefs_file.settings
        if entry.urgency == "alarm":  # alarms off: it waits like attention, on a shorter bound, off-budget
            due = now + settings.hold_alarm
            return self._wait(entry, prefs, now, due, prefix + f"alarm ({because}) with alarms off: ")
        taken, rule, why = self._take(entry, prefs, now)
        if not taken:
            return self._decide(entry, "digest", rule, prefix + why, now)
        return self._wait(entry, prefs, now, now + settings.hold_attention,
                          prefix + f"attention ({because}); {why}; ")

    def _wait(self, entry: Entry, prefs: Prefs, now: float, due: float, why: str) -> Decision:
        """Wait for a breakpoint, unless its session (or, for the person, one of theirs) is at one: idle."""
        idle_after = self.prefs_file.settings.idle_after
        where = self.idle_session(entry.item, idle_after) if self.idle_session is not None else ""
        if where:
            channel = prefs.alarm_channel if entry.urgency == "alarm" else prefs.channel
            return self._decide(entry, "deliver", "breakpoint.idle",
                                f"{why}{where} has been idle for {_span(idle_after)} or more: a natural pause",
                                now, channel=channel, session=where)
        return self._decide(entry, "wait", "wait", f"{why}waits for a breakpoint, at most until "
                            f"{_when(prefs, due, now)}", now, due=due)

    # ---- urgency, floors, budget ---------------------------------------------------------

    def _urgency(self, item: Item, now: float) -> tuple[str, str]:
        level, because = "info", ""
        for evidence in item.evidence:
            fact = self.facts.get((evidence.kind, evidence.ref))
            if fact is not None:
                found, why = fact_urgency(fact, now)
                if RANK[found] > RANK[level]:
                    level, because = found, why
        return level, because

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
            self._facts_rows[(fact.kind, fact.ref)] = (fact.kind, fact.ref, fact.state, fact.since, fact.at,
                                                       fact.runs, fact.due, fact.detail)
            self._queued += 1
        await self._commit()

    def _floor(self, item: Item) -> str:
        for evidence in item.evidence:
            fact = self.facts.get(("security", evidence.ref)) if evidence.kind == "security" else None
            if fact is not None and fact.state == "open":
                return f"security finding {fact.ref} is open"
        return ""

    def _count(self, person: str, day: str, source: str, proposer: str, shadow: bool, n: int) -> None:
        counts = self.spent[(person, day)]
        counts[f"shadow:{source}" if shadow else "live"] += n
        counts[f"source:{source}"] += n
        if proposer:
            counts[f"proposer:{source}:{proposer}"] += n

    def _take(self, entry: Entry, prefs: Prefs, now: float) -> tuple[bool, str, str]:
        """Spend one unit of today's budget for ``entry`` if its source's share (and its proposer's) allow."""
        item = entry.item
        if entry.spent:
            return True, "", "its budget was spent when it was first decided"
        day = prefs.day(now)
        counts = self.spent[(item.person, day)]
        # A shadow source counts only against itself, so trying one out never costs live sources.
        total = counts["live"] + (counts[f"shadow:{item.source}"] if entry.shadow else 0)
        mine = counts[f"source:{item.source}"]
        cap = prefs.cap(item.source)
        # The narrowest limit is named first: a source over its share hears that, even on a spent day.
        if mine >= cap:
            return False, "budget.share", (f"{item.source}'s share of the daily budget ({cap} of {prefs.budget}) "
                                           "is spent; digest")
        if item.proposer:
            theirs = counts[f"proposer:{item.source}:{item.proposer}"]
            part = prefs.proposer_cap(item.source)
            if theirs >= part:
                return False, "budget.proposer", (f"{item.proposer}'s part of {item.source}'s share ({part} of "
                                                  f"{cap}) is spent; digest")
        if total >= prefs.budget:
            return False, "budget.daily", f"the daily budget of {prefs.budget} attention items is spent; digest"
        self._count(item.person, day, item.source, item.proposer, entry.shadow, 1)
        entry.spent = day
        return True, "", f"budget: {item.source} {mine + 1} of {cap}, {total + 1} of {prefs.budget} today"

    def _refund(self, entry: Entry) -> None:
        if entry.spent:
            self._count(entry.item.person, entry.spent, entry.item.source, entry.item.proposer, entry.shadow, -1)
            entry.spent = ""

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

    def _decide(self, entry: Entry, outcome: str, rule: str, reason: str, now: float, *, due: float | None = None,
                channel: str = "", session: str = "") -> Decision:
        """Apply one decision to ``entry`` and queue its ledger row; shadow items only record it."""
        would = ""
        if entry.shadow and outcome in ("deliver", "wait", "hold", "digest") and rule != "floor.security":
            would, outcome = outcome, "shadow"
            reason = f"shadow ({entry.item.source} is not live for {entry.item.person}): would {would}: {reason}"
            due, channel = None, ""
        if outcome != "wait" and entry.id in self.open:
            self._close(entry)
        if outcome in ("silence", "digest") and entry.spent and rule != "deliver.failed":
            self._refund(entry)
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
        decision = Decision(item_id=entry.id, fingerprint=entry.fingerprint, source=entry.item.source,
                            person=entry.item.person, outcome=outcome, rule=rule, reason=reason,
                            urgency=entry.urgency, at=now, due=due, channel=channel, session=session, would=would)
        self._items[entry.id] = _item_row(entry, now)
        self._ledger.append((entry.id, entry.item.person, entry.item.source, now, outcome, rule, reason, channel))
        self._queued += 1
        return decision

    def _close(self, entry: Entry) -> None:
        self.open.pop(entry.id, None)
        self.waiting[entry.item.person].pop(entry.id, None)
        if not self.waiting[entry.item.person]:
            del self.waiting[entry.item.person]

    def _signal(self, item_id: str, kind: str, detail: str, now: float) -> None:
        self._signals.append((item_id, kind, detail, now))
        self._queued += 1

    async def _commit(self) -> None:
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
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", ledger)
            if signals:
                await db.executemany("INSERT INTO gate_signals (item, kind, detail, at) VALUES (?, ?, ?, ?)",
                                     signals)
            if facts:
                await db.executemany(
                    "INSERT OR REPLACE INTO gate_facts (kind, ref, state, since, at, runs, due, detail) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", facts)
            await self.store.write([])  # commits the above with the sidecar's own group commit
        except BaseException:
            self._failed = target  # these rows are gone: their callers hear so rather than wait
            raise
        self._written = target

    # ---- delivery ------------------------------------------------------------------------

    async def _dispatch(self, decided: list[tuple[Entry, Decision]],
                        deliver: Deliverer | None = None) -> list[Decision]:
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
                results.append(self._decide(entry, "digest", "deliver.failed",
                                            f"delivery on {decision.channel} failed ({message}); in the digest "
                                            "instead", self.clock()))
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
                return self._decide(entry, "digest", "relay.failed",
                                    f"no machine of {entry.item.person}'s took it for {_span(now - entry.offered_at)}"
                                    f" ({message}); in the digest here instead", now)
            # Backing off with the time it has waited, so a machine away for a day costs a few rows.
            due = now + max(self.prefs_file.settings.relay_retry, min(HOUR, (now - entry.offered_at) / 2))
            return self._decide(entry, "hold", "relay.wait",
                                f"{entry.item.person}'s machine did not take it ({message}); tried again at "
                                f"{_when(self.prefs(entry.item.person), due, now)}", now, due=due)
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
        decided = [(e, self._release(e, now, "breakpoint." + kind, f"at a breakpoint: {BREAKPOINTS[kind]}{where}",
                                     session or e.item.session))
                   for e in sorted(waiting, key=lambda e: e.offered_at)]
        await self._commit()
        return await self._dispatch(decided)

    def _release(self, entry: Entry, now: float, rule: str, reason: str, session: str) -> Decision:
        """A waiting item's moment came: deliver it, unless the person's preferences changed meanwhile."""
        prefs = self.prefs(entry.item.person)
        if entry.item.source in prefs.mute:
            return self._decide(entry, "silence", "pref.mute", f"{entry.item.person} muted {entry.item.source} "
                                "while it waited", now)
        if prefs.channel == "digest":
            return self._decide(entry, "digest", "pref.digest", f"{entry.item.person} switched to digest only "
                                "while it waited", now)
        until = prefs.quiet_until(now)
        if until is not None:
            return self._decide(entry, "hold", "quiet", f"{reason}, but in quiet hours ({_quiet_text(prefs)}): "
                                f"held until {_when(prefs, until, now)}", now, due=until)
        channel = prefs.alarm_channel if entry.urgency == "alarm" else prefs.channel
        return self._decide(entry, "deliver", rule, f"{entry.urgency}: delivered {reason}", now, channel=channel,
                            session=session)

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
            if entry.state == "held" and self.is_local is not None and self.relay is not None \
                    and not self.is_local(entry.item):
                self._close(entry)
                decided.append((entry, self._decide(entry, "relay", "relay",
                                                    f"for {entry.item.person}: relayed again", now)))
            elif entry.state == "held":
                # The wait for quiet hours to end is over: the item is decided again from its channel on.
                self._close(entry)
                decided.append((entry, self._route(entry, prefs, now, "", fresh=False,
                                                   prefix="quiet hours ended; decided again: ")))
            else:
                bound = _span(now - entry.offered_at)
                decided.append((entry, self._release(entry, now, "max-hold",
                                                     f"at its bound: no breakpoint came within {bound}",
                                                     entry.item.session)))
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

    # ---- signals -------------------------------------------------------------------------

    async def acted(self, ref: str, how: str) -> dict[str, Any]:
        """The person or their session acted on an item (cited it, replied, changed the file)."""
        if how not in ACTED:
            raise BadRequest(f"how is one of {', '.join(ACTED)}")
        rows = await self._find(ref)
        now = self.clock()
        for row in rows:
            self._signal(row["id"], how, "", now)
        await self._commit()
        return {"items": [row["id"] for row in rows], "how": how}

    async def _find(self, ref: str) -> list[Any]:
        if not isinstance(ref, str) or not ref or len(ref) > 64:
            raise BadRequest("name an item by its id or its fingerprint")
        if is_ulid(ref.upper()):
            rows = await self.store.fetchall("SELECT * FROM gate_items WHERE id = ?", (ref.upper(),))
        else:
            rows = await self.store.fetchall(
                "SELECT * FROM gate_items WHERE fingerprint = ? ORDER BY offered_at", (ref.lower(),))
        if not rows:
            raise NotFound(f"the gate has no item {ref!r}; ids and fingerprints are in `hive gate ledger`")
        return rows

    # ---- reading -------------------------------------------------------------------------

    async def ledger(self, since: float | None = None, person: str | None = None, limit: int = 500,
                     item: str | None = None) -> list[dict[str, Any]]:
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
            f"WHERE {' AND '.join(clauses)} ORDER BY l.seq DESC LIMIT ?) ORDER BY seq", (*params, limit))
        return [dict(row) for row in rows]

    async def why(self, ref: str, asked: bool = False) -> dict[str, Any]:
        """Every item with this id or fingerprint, its ledger rows, and the answer in one sentence each.

        ``asked``: the person asked (not an agent): an item they were not told about mattered.
        """
        rows = await self._find(ref)
        now = self.clock()
        answers = []
        for row in rows:
            decisions = await self.ledger(item=row["id"], limit=MAX_LEDGER)
            last = decisions[-1] if decisions else None
            if row["state"] == "delivered":
                answer = f"You were told because: {last['reason'] if last else '?'}"
            elif row["state"] in ("pending", "held"):
                answer = f"Not yet: {last['reason'] if last else '?'}"
            elif row["state"] == "relayed":
                answer = (f"Decided on {row['person']}'s own machine (`hive gate why` there): "
                          f"{last['reason'] if last else '?'}")
            else:
                answer = f"You were not told because: {last['reason'] if last else '?'}"
                if asked:
                    self._signal(row["id"], "asked", "the person asked why", now)
            signals = await self.store.fetchall("SELECT kind, detail, at FROM gate_signals WHERE item = ? ORDER BY at",
                                                (row["id"],))
            answers.append({"item": _item_public(row), "decisions": decisions, "answer": answer,
                            "signals": [dict(s) for s in signals]})
        await self._commit()
        return {"items": answers}

    async def digest(self, person: str, since: float | None = None, mark: bool = True) -> dict[str, Any]:
        """What was held for ``person`` since the last digest, grouped and ordered by what it unblocks,
        plus what the gate checked and how much it silenced (a silent gate is visibly working)."""
        now = self.clock()
        marker = f"gate.digest.{person}"
        if since is None:
            last = await self.store.get_kv(marker)
            since = float(last) if last else now - DIGEST_DEFAULT
        rows = await self.store.fetchall(
            "SELECT * FROM gate_items WHERE person = ? AND state IN ('digest', 'held', 'pending') AND updated_at >= ? "
            "ORDER BY offered_at", (person, since))
        latest = {r["item"]: r for r in await self.store.fetchall(
            "SELECT item, rule, reason FROM gate_ledger WHERE seq IN (SELECT MAX(seq) FROM gate_ledger "
            "WHERE person = ? AND at >= ? GROUP BY item)", (person, since))}
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            public = _item_public(row)
            public["unblocks"] = self._unblocks(row)
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
        return {"person": person, "since": since, "until": now, "groups": ordered,
                "held": sum(len(g["items"]) for g in ordered), **checked}

    def _unblocks(self, row: Any) -> int:
        """How many sessions, branches or obligations wait on this item: its evidence that a fact says is blocked."""
        refs = {e["ref"] for e in json.loads(row["evidence"]) if e.get("kind") in ("blocked", "session", "branch",
                                                                                     "obligation")}
        return sum(1 for ref in refs if (f := self.facts.get(("blocked", ref))) is not None and f.state == "blocked")

    async def _checked(self, person: str, since: float) -> dict[str, Any]:
        rows = await self.store.fetchall(
            "SELECT outcome, rule, source, COUNT(*) AS n, COUNT(DISTINCT item) AS items FROM gate_ledger "
            "WHERE person = ? AND at >= ? GROUP BY outcome, rule, source", (person, since))
        offered = await self.store.fetchone(
            "SELECT COUNT(*) AS n, COUNT(DISTINCT source) AS sources FROM gate_items "
            "WHERE person = ? AND offered_at >= ?", (person, since))
        outcomes: Counter[str] = Counter()
        silenced: Counter[str] = Counter()
        sources: Counter[str] = Counter()
        for row in rows:
            outcomes[row["outcome"]] += row["items"]
            if row["outcome"] == "silence":
                silenced[row["rule"]] += row["items"]
            sources[row["source"]] += row["n"]
        evidence = await self.store.fetchall(
            "SELECT evidence FROM gate_items WHERE person = ? AND offered_at >= ? AND evidence != '[]'",
            (person, since))
        kinds: Counter[str] = Counter()
        for row in evidence:
            for e in json.loads(row["evidence"]):
                if e.get("kind") in FACT_STATES:  # looked up for urgency and floors
                    kinds[e["kind"]] += 1
        return {"checked": {"items": offered["n"] if offered else 0, "sources": offered["sources"] if offered else 0,
                            "decisions": sum(r["n"] for r in rows), "facts_consulted": dict(kinds),
                            "by_source": dict(sources)},
                "delivered": outcomes["deliver"], "silenced": sum(silenced.values()),
                "silenced_by": dict(silenced), "shadow": outcomes["shadow"]}

    async def shadow(self, person: str, limit: int = 20) -> dict[str, Any]:
        """For each source of ``person`` in shadow: what it would have done, and what the person wanted."""
        prefs = self.prefs(person)
        rows = await self.store.fetchall(
            "SELECT i.source, i.would, i.state, COUNT(*) AS n, "
            "SUM(EXISTS (SELECT 1 FROM gate_signals s WHERE s.item = i.id AND s.kind IN "
            "('wanted', 'acted', 'cited', 'replied', 'changed', 'asked'))) AS wanted "
            "FROM gate_items i WHERE i.person = ? GROUP BY i.source, i.would, i.state", (person,))
        sources: dict[str, dict[str, Any]] = {}
        for row in rows:
            info = sources.setdefault(row["source"], {"source": row["source"], "live": prefs.is_live(row["source"]),
                                                      "offered": 0, "would": Counter(), "silenced": 0,
                                                      "wanted_when_delivered": 0, "missed": 0, "recent": []})
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
                "ORDER BY offered_at DESC LIMIT ?", (person, source, limit))
            info["recent"] = [_item_public(r) for r in recent]
        listed = sorted(sources.values(), key=lambda s: (s["live"], s["source"]))
        return {"person": person, "live": sorted(prefs.live), "sources": listed}

    async def measures(self, person: str | None = None, since: float | None = None) -> dict[str, Any]:
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
            f"WHERE i.offered_at >= ?{only.replace('person', 'i.person')} GROUP BY i.state", params)
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
            f"WHERE outcome = 'deliver' AND at >= ?{only} GROUP BY person, quarter", params)
        per_day: dict[str, Counter[str]] = defaultdict(Counter)
        for row in quarters:
            per_day[row["person"]][self.prefs(row["person"]).day(row["quarter"] * 900.0)] += row["n"]
        return {
            "since": since, "until": now, "person": person,
            "delivered_per_day": {p: dict(sorted(days.items())) for p, days in sorted(per_day.items())},
            "delivered": delivered, "acted_on": acted, "acted_share": _share(acted, delivered),
            "held": held, "held_mattered": mattered, "held_mattered_share": _share(mattered, held),
            "silenced": silenced, "silenced_mattered": silenced_mattered,
            "silenced_mattered_share": _share(silenced_mattered, silenced),
        }


def _for_person(item: Item, person: str, why: str) -> Item:
    """A copy of ``item`` for a code owner: for them, not for one of the proposer's sessions."""
    return Item(source=item.source, person=person, title=item.title, body=item.body, session="",
                evidence=item.evidence, key=item.key, proposer=item.proposer,
                data={**item.data, "code_owner": why})


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _when(prefs: Prefs, at: float, now: float) -> str:
    # Reasons name times to the minute, and a batch of decisions names the same few minutes:
    # formatted once per (zone, minute, minute of now).
    key = (prefs.timezone, int(at // 60), int(now // 60))
    found = _WHEN.get(key)
    if found is None:
        if len(_WHEN) > 4096:
            _WHEN.clear()
        local = prefs.local(at)
        found = _WHEN[key] = (local.strftime("%H:%M") if local.date() == prefs.local(now).date()
                              else local.strftime("%Y-%m-%d %H:%M"))
    return found


_WHEN: dict[tuple[str, int, int], str] = {}


def _quiet_text(prefs: Prefs) -> str:
    return f"{format_quiet(prefs.quiet)} {prefs.timezone}"


_UPSERT_ITEM = (
    "INSERT INTO gate_items (id, fingerprint, source, proposer, person, session, title, body, evidence, data, "
    "urgency, state, would, due, channel, spent, offered_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET urgency = excluded.urgency, state = excluded.state, would = excluded.would, "
    "due = excluded.due, channel = excluded.channel, spent = excluded.spent, updated_at = excluded.updated_at"
)


def _item_row(entry: Entry, now: float) -> tuple[Any, ...]:
    item = entry.item
    return (entry.id, entry.fingerprint, item.source, item.proposer, item.person, item.session, item.title,
            item.body, item.evidence_json, item.data_json, entry.urgency, entry.state, entry.would, entry.due,
            entry.channel, entry.spent, entry.offered_at, now)


def _entry_from_row(row: Any) -> Entry:
    item = Item(source=row["source"], person=row["person"], title=row["title"], body=row["body"],
                session=row["session"], key="", proposer=row["proposer"], data=json.loads(row["data"]),
                evidence=tuple(Evidence(e["kind"], e["ref"], e.get("note", "")) for e in json.loads(row["evidence"])))
    # A restored item is not offered again, so its fingerprint is taken as stored, not recomputed.
    return Entry(id=row["id"], item=item, fingerprint=row["fingerprint"], urgency=row["urgency"],
                 offered_at=row["offered_at"], state=row["state"], would=row["would"], due=row["due"],
                 channel=row["channel"], spent=row["spent"], shadow=False)


def _item_public(row: Any) -> dict[str, Any]:
    return {"id": row["id"], "fingerprint": row["fingerprint"], "source": row["source"], "person": row["person"],
            "session": row["session"], "proposer": row["proposer"], "title": row["title"], "body": row["body"],
            "evidence": json.loads(row["evidence"]), "urgency": row["urgency"], "state": row["state"],
            "would": row["would"], "due": row["due"], "offered_at": row["offered_at"],
            "updated_at": row["updated_at"]}


def digest_text(result: Mapping[str, Any], when: Callable[[float], str] | None = None) -> str:
    """The digest in plain text: held items by group, most unblocking first, then what the gate checked."""
    when = when or (lambda at: time.strftime("%Y-%m-%d %H:%M", time.localtime(at)))
    lines = [f"Digest for {result['person']} since {when(result['since'])}: "
             f"{result['held']} held" + ("" if result["held"] else ", nothing waits for you")]
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
    lines.append(f"The gate checked {checked['items']} items from {checked['sources']} source(s) "
                 f"({checked['decisions']} decisions; records consulted: {facts}); delivered {result['delivered']}, "
                 f"silenced {result['silenced']}" + (f" ({silenced})" if silenced else "")
                 + f", {result['shadow']} recorded in shadow.")
    return "\n".join(lines)


# ---- in the sidecar ------------------------------------------------------------------------

_gates: weakref.WeakKeyDictionary[Sidecar, Gate] = weakref.WeakKeyDictionary()
GATE_SENDER = "hive/gate"


def gate_of(sidecar: Sidecar) -> Gate:
    """This sidecar's gate (it exists once the sidecar's task group has started it)."""
    gate = _gates.get(sidecar)
    if gate is None:
        raise HiveError("the gate has not started yet")
    return gate


async def run_gate(sidecar: Sidecar, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """The sidecar's hook: build its gate, load it, and run its one timer in the sidecar's task group."""
    gate = Gate(sidecar.store, PrefsFile(sidecar.paths.config),
                deliver=lambda item, decision: deliver_in_sidecar(sidecar, item, decision),
                owners=lambda item: code_owners(sidecar, item), is_local=lambda item: is_local(sidecar, item),
                relay=lambda item, facts: relay_item(sidecar, item, facts),
                idle_session=lambda item, idle_after: idle_session(sidecar, item, idle_after))
    _gates[sidecar] = gate
    await gate.run(task_status=task_status)


# ---- what sessions' hooks show: breakpoints and test records ---------------------------------

_START = r"(?:^|[\s;&|(!])"
# Test runners as people type them; a wrapper (``uv run``, ``npx``, ``python -m``) is allowed before.
TEST_COMMAND = re.compile(
    _START + r"(?:pytest|py\.test|tox|nox|jest|vitest|mocha|rspec|phpunit|ctest|"
    r"(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?test|cargo\s+(?:test|nextest)|go\s+test|make\s+(?:test|check)|"
    r"mvn\s+(?:test|verify)|\S*gradlew?\s+test|dotnet\s+test|deno\s+test)(?:$|[\s;&|)])")
COMMIT_COMMAND = re.compile(_START + r"git(?:\s+-[cC]\s+\S+)*\s+commit(?:$|[\s;&|)])")
PR_COMMAND = re.compile(_START + r"gh\s+pr\s+create(?:$|[\s;&|)])")


def ref_for_tests(repo: str, branch: str) -> str:
    """The ref of the ``test`` record for a repository's branch: what items name as evidence."""
    return f"{repo}@{branch}" if branch else repo


async def observed(sidecar: Sidecar, session: Any, events: Iterable[Any]) -> None:
    """Breakpoints and records from the commands a session ran (``observe.ingest`` calls this):
    a test run finishing is a ``test`` breakpoint and, with its exit code, a passing or failing
    ``test`` record for the repository's branch; a commit and an opened pull request are
    breakpoints too. Only what the hooks report is used: no command output is read."""
    gate = _gates.get(sidecar)
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
                await gate.record("test", ref_for_tests(session.repo or session.cwd, session.branch),
                                  "passing" if code == 0 else "failing", detail=clip(command, 120))
            kinds.append("test")
        if code in (0, None) and COMMIT_COMMAND.search(command):
            kinds.append("commit")
        if code in (0, None) and PR_COMMAND.search(command):
            kinds.append("pr")
        for kind in kinds:
            await gate.breakpoint(sidecar.settings.person, address, kind)


def idle_session(sidecar: Sidecar, item: Item, idle_after: float) -> str:
    """The address of a live session on this machine that ``item`` may go to and whose hooks say
    has been idle for ``idle_after`` seconds: its own session, or for the person any of theirs."""
    from .observe import OBSERVED

    if item.person != sidecar.settings.person:
        return ""
    now = time.time()
    for session in sidecar.sessions.by_key.values():
        seen = OBSERVED.get(session.key)
        if seen is None or seen.state != "idle" or now - seen.since < idle_after:
            continue
        if not sidecar.sessions.is_live(session):
            continue
        address = sidecar.sessions.address(session)
        if not item.session or item.session == address:
            return address
    return ""


# ---- the owner of the code -----------------------------------------------------------------

async def code_owners(sidecar: Sidecar, item: Item) -> list[tuple[str, str]]:
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


def _file_places(sidecar: Sidecar, ref: str) -> list[tuple[str, str]]:
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


# ---- items for people on other machines ----------------------------------------------------

GATE_FEATURE = "gate"
GATE_FRAME = "gate"
GATE_ACK = "gate_ack"
RELAY_ACK_WAIT = 15.0
_acks: weakref.WeakKeyDictionary[Sidecar, dict[str, tuple[anyio.Event, dict[str, Any]]]] = \
    weakref.WeakKeyDictionary()


def is_local(sidecar: Sidecar, item: Item) -> bool:
    """Is this machine the one to decide ``item``? Its session lives here, or its person does; a
    person the team knows only elsewhere is decided on their own machine."""
    if item.session:
        entry = next((e for e in sidecar.directory() if e.address == item.session), None)
        if entry is not None:
            return entry.key is not None
    if item.person == sidecar.settings.person:
        return True
    me = sidecar.mesh.team.my_key()
    return not any(m.person == item.person and m.active and m.key != me for m in sidecar.mesh.team.members())


def _machines_for(sidecar: Sidecar, item: Item) -> list[str]:
    """The machines to try for ``item``: the one its session is on, else its person's linked machines,
    those where the person has a live session first."""
    mesh = sidecar.mesh
    entries = sidecar.directory()
    if item.session:
        entry = next((e for e in entries if e.address == item.session), None)
        peer = mesh.peer_of(entry) if entry is not None else None
        if peer is not None:
            return [peer]
    me = mesh.team.my_key()
    live = {(e.person, e.machine) for e in entries if e.key is None and e.live}
    members = [m for m in mesh.team.members() if m.person == item.person and m.active and m.key != me]
    members.sort(key=lambda m: ((m.person, m.machine) not in live, m.machine, m.key))
    return [m.key for m in members]


async def relay_item(sidecar: Sidecar, item: Item, facts: list[Fact]) -> str:
    """Send ``item`` to its person's machine, whose gate decides; returns what it did there.

    Raises:
        HiveError: no machine of that person's is linked now, or none answered in time.
    """
    mesh = sidecar.mesh
    tried = []
    for peer in _machines_for(sidecar, item)[:3]:
        link = mesh.links.get(peer)
        member = mesh.team.member(peer)
        label = f"{member.person}@{member.machine}" if member else peer[:12]
        if link is None:
            tried.append(f"{label} is not linked")
            continue
        if not mesh.peer_has(peer, GATE_FEATURE):
            tried.append(f"{label} runs a hive without a gate")
            continue
        frame_id = new_ulid()
        waiter: tuple[anyio.Event, dict[str, Any]] = (anyio.Event(), {})
        waiting = _acks.setdefault(sidecar, {})
        waiting[frame_id] = waiter
        try:
            await link.send({"t": GATE_FRAME, "id": frame_id, "item": item.public(),
                             "facts": [f.public() for f in facts]})
            with anyio.move_on_after(RELAY_ACK_WAIT):
                await waiter[0].wait()
        except Exception as exc:  # the link went away under us: try the next machine
            tried.append(f"{label}: {exc}")
            continue
        finally:
            waiting.pop(frame_id, None)
        answer = waiter[1]
        if not waiter[0].is_set():
            tried.append(f"{label} did not answer")
        elif answer.get("error"):
            tried.append(f"{label} refused it: {one_line(answer['error'])}")
        else:
            return (f"{label} took it: {one_line(answer.get('outcome'), 16)} ({one_line(answer.get('rule'), 40)}) "
                    f"{one_line(answer.get('reason'), 300)}").strip()
    raise HiveError("; ".join(tried) if tried else f"the team knows no machine of {item.person}'s")


def attach(mesh: Mesh) -> None:
    """The mesh's hook (``FRAME_MODULES``): this module speaks ``gate`` and ``gate_ack`` frames."""
    sidecar = mesh.sc

    async def handle(link: Link, member: Any, frame: dict[str, Any]) -> None:
        ack = await on_frame(sidecar, link.peer, member.person, member.machine, frame)
        if ack is not None:
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send(ack)

    mesh.add_frames(GATE_FEATURE, {GATE_FRAME: handle, GATE_ACK: handle})


def _fact_from_wire(raw: Any) -> Fact | None:
    if not isinstance(raw, Mapping):
        return None
    kind, ref, state = raw.get("kind"), raw.get("ref"), raw.get("state")
    if kind not in FACT_STATES or state not in FACT_STATES[kind] or not isinstance(ref, str) or not ref \
            or len(ref) > MAX_REF:
        return None
    since, stamped = raw.get("since"), raw.get("at")
    if not _is_number(since) or not _is_number(stamped):
        return None
    runs, due = raw.get("runs", 1), raw.get("due")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        return None
    if due is not None and not _is_number(due):
        return None
    given = raw.get("detail")
    detail = given if isinstance(given, str) else ""
    # A record from another machine cannot claim to be newer than this machine's clock.
    at = min(float(stamped), time.time())
    return Fact(kind, ref, state, min(float(since), at), at, min(runs, 1000), due, clip(clean(detail), MAX_REF))


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)  # JSON true is no number


async def on_frame(sidecar: Sidecar, peer: str, person: str, machine: str, frame: Mapping[str, Any]) -> Any:
    """A ``gate`` frame (an item for this machine's person, from a teammate's gate) or its ``gate_ack``.

    Returns the acknowledgement to send back for a ``gate`` frame, None for an ack.
    """
    if frame.get("t") == GATE_ACK:
        waiter = _acks.get(sidecar, {}).get(str(frame.get("id")))
        if waiter is not None:
            waiter[1].update(frame)
            waiter[0].set()
        return None
    frame_id = frame.get("id")
    if not is_ulid(frame_id):
        return None
    ack: dict[str, Any] = {"t": GATE_ACK, "id": frame_id}
    try:
        raw = frame.get("item")
        item = Item.from_wire(raw)
        if item.person != sidecar.settings.person:
            raise Refused(f"{item.person} is not on {sidecar.settings.person}'s machine")
        session = item.session
        if session:
            local = next((e for e in sidecar.directory() if e.address == session and e.key is not None), None)
            session = session if local is not None else ""  # gone or renamed: it is for the person
        origin = f"{person}@{machine}"
        data = {**item.data, "relayed_from": origin}
        item = Item(source=item.source, person=item.person, title=item.title, body=item.body, session=session,
                    evidence=item.evidence, key=item.key, proposer=clip(item.proposer or origin, MAX_REF),
                    data=data)
        gate = gate_of(sidecar)
        facts = [f for f in map(_fact_from_wire, frame.get("facts") or []) if f is not None]
        await gate.merge_facts(facts[:MAX_EVIDENCE])
        [decision] = (await gate.offer_many([item], relayed=True))[:1]
        ack.update({"outcome": decision.outcome, "rule": decision.rule, "reason": decision.reason,
                    "item": decision.item_id})
    except HiveError as exc:
        ack["error"] = exc.message
    return ack


async def deliver_in_sidecar(sidecar: Sidecar, item: Item, decision: Decision) -> None:
    """The default delivery: a desktop notification (popup channel), else a message into the session.

    Raises:
        HiveError: the person is not on this machine, or the session is unknown here.
    """
    from .ask import deliver_local

    if item.person != sidecar.settings.person:
        raise HiveError(f"{item.person} is not on this machine, and the team knows no machine of theirs")
    text = _delivery_text(item, decision)
    if decision.channel == "popup":
        prompt = Prompt(title=f"hive · {item.source}", body=clip(f"{item.title}\n{item.body}".strip(), 400),
                        timeout=30.0, question=False)
        shown = await _show_notification(sidecar, prompt)
        if shown:
            return
    address = decision.session or item.session
    if address:
        session = sidecar.sessions.by_key.get(address)
        if session is None:
            name = address.split("/", 1)[1] if address.startswith(item.person + "/") else address
            session = sidecar.sessions.by_name(name)
        if session is None:
            raise HiveError(f"no session {address} on this machine")
        address = sidecar.sessions.address(session)
    else:
        address = sidecar.terminal
    message = Message(id=new_ulid(), sender=GATE_SENDER, sender_kind="hive", sender_agent="hive-gate",
                      sender_repo="", recipient=address, reply_to=None, body=text, wake=True, sent_at=time.time())
    await deliver_local(sidecar, message, None)


async def _show_notification(sidecar: Sidecar, prompt: Prompt) -> bool:
    """Put up a notification without holding up the gate; False at once when there is no desktop."""
    backend = backend_for(find_desktop())
    try:
        await backend.available(question=False)
    except NoDesktop:
        return False

    async def show() -> None:
        with contextlib.suppress(HiveError):
            async with backend.show(prompt) as popup:
                await popup.answer()

    sidecar.tasks.start_soon(show)
    return True


def _delivery_text(item: Item, decision: Decision) -> str:
    lines = [f"[hive gate · {item.source} · {decision.urgency}] {item.title}"]
    if item.body:
        lines.append(item.body)
    if item.evidence:
        lines.append("Evidence: " + "; ".join(f"{e.kind} {e.ref}" for e in item.evidence))
    origin = item.data.get("relayed_from")
    if isinstance(origin, str) and origin:
        lines.append(f"Relayed by {origin}'s hive.")
    lines.append(f"Why now: {decision.reason}. (`hive gate why {decision.item_id}`)")
    return "\n".join(lines)


# ---- ops -----------------------------------------------------------------------------------

def _person(sidecar: Sidecar, request: Mapping[str, Any]) -> str:
    person = request.get("person") or sidecar.settings.person
    if not isinstance(person, str) or not slug(person):
        raise BadRequest("person is a person's name")
    return slug(person)


def _session_address(sidecar: Sidecar, ref: Any) -> str:
    """A session named by key, name or address -> its address; an address on another machine as is."""
    if ref in (None, ""):
        return ""
    if not isinstance(ref, str):
        raise BadRequest("session is a session's address, name or key")
    with contextlib.suppress(NotFound):
        return sidecar.sessions.address(sidecar._session_ref(ref))
    if "/" in ref:
        return ref
    raise NotFound(f"no session {ref!r} on this machine; see `hive who`")


def _since(value: Any) -> float | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest("since is a time in seconds since the epoch")
    return float(value)


async def op_offer(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Offer a proactive item to the gate, which decides whether, when and how it reaches its person.

    Request: ``item`` (object, required): ``source`` and ``title`` (required), ``person`` (default
    this machine's), ``session`` (key, name or address), ``body``, ``evidence`` (``[{kind, ref,
    note?}]``), ``key``, ``proposer``, ``data``; an ``urgency`` in it is ignored. Returns the decision
    ``{"item", "fingerprint", "source", "person", "outcome", "rule", "reason", "urgency", "at", "due",
    "channel", "session", "would"}``, plus ``note`` when the item carried an urgency. Raises
    ``bad_request`` for an invalid item, ``not_found`` for a session named without its person.
    """
    raw = request.get("item")
    item = Item.from_wire(raw, sidecar.settings.person)
    if item.session:
        item = _with_session(item, _session_address(sidecar, item.session))
    decision = await gate_of(sidecar).offer(item)
    result = decision.public()
    if isinstance(raw, Mapping) and "urgency" in raw:
        result["note"] = "the item's own urgency was ignored: the gate computes urgency from facts it can check"
    return result


def _with_session(item: Item, session: str) -> Item:
    return Item(source=item.source, person=item.person, title=item.title, body=item.body, session=session,
                evidence=item.evidence, key=item.key, proposer=item.proposer, data=item.data)


async def op_breakpoint(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Report a natural pause in a session: the gate delivers what waited for it there.

    Request: ``kind`` (str, required): commit, test, idle, turn or pr. ``session`` (str, optional):
    key, name or address. ``person`` (str, optional): whose items (default the session's person,
    else this machine's). Returns ``{"person", "session", "delivered": [decision]}``. Raises
    ``bad_request`` for another kind, ``not_found`` for a session named without its person.
    """
    session = _session_address(sidecar, request.get("session"))
    person = _person(sidecar, request) if request.get("person") else (session.split("/", 1)[0] if session
                                                                        else sidecar.settings.person)
    decisions = await gate_of(sidecar).breakpoint(person, session, str(request.get("kind")))
    return {"person": person, "session": session, "delivered": [d.public() for d in decisions]}


async def op_fact(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Record a checkable fact the gate computes urgency from (a test run's result, a deadline, a block).

    Request: ``kind`` (str, required): test, ci, deadline, blocked, security or overlap. ``ref``
    (str, required): what it is about. ``state`` (str, required): one the kind has. ``due`` (number,
    epoch seconds): required for an open deadline. ``detail`` (str, optional). Returns the fact
    ``{"kind", "ref", "state", "since", "at", "runs", "due", "detail"}``. Raises ``bad_request``.
    """
    due = request.get("due")
    if due is not None and (isinstance(due, bool) or not isinstance(due, int | float)):
        raise BadRequest("due is a time in seconds since the epoch")
    detail = request.get("detail") or ""
    if not isinstance(detail, str):
        raise BadRequest("detail is a string")
    fact = await gate_of(sidecar).record(str(request.get("kind")), request.get("ref"),  # type: ignore[arg-type]
                                         str(request.get("state")), due=due, detail=detail)
    return fact.public()


async def op_acted(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Record that the person or their session acted on an item, for the gate's measures.

    Request: ``item`` (str, required): an item id or fingerprint. ``how`` (str, optional): cited
    (default), replied, changed, asked or wanted. Returns ``{"items": [id], "how"}``. Raises
    ``bad_request``, ``not_found`` for an item the gate does not have.
    """
    return await gate_of(sidecar).acted(request.get("item"), str(request.get("how") or "cited"))  # type: ignore[arg-type]


async def op_ledger(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Read the gate's ledger: every decision, with the rule and reason that made it.

    Request: ``since`` (number, optional): epoch seconds. ``person`` (str, optional): only theirs.
    ``limit`` (int, optional): the latest this many rows (default 500, at most 5000). Returns
    ``{"rows": [{"seq", "item", "person", "source", "at", "outcome", "rule", "reason", "channel",
    "title", "urgency", "fingerprint"}]}``, oldest first. Raises ``bad_request`` for ill-typed fields.
    """
    limit = request.get("limit") or 500
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise BadRequest("limit is a whole number")
    person = request.get("person")
    who = slug(person) if isinstance(person, str) and person else None
    rows = await gate_of(sidecar).ledger(_since(request.get("since")), who, limit)
    return {"rows": rows}


async def op_why(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Explain in a sentence why the person was (or was not yet) told about an item.

    Request: ``item`` (str, required): an item id or fingerprint. Asked from a person's terminal,
    an item they were not told about counts as having mattered. Returns ``{"items": [{"item",
    "decisions", "answer", "signals"}]}``. Raises ``bad_request``, ``not_found``.
    """
    return await gate_of(sidecar).why(request.get("item"), asked=conn.at_terminal)  # type: ignore[arg-type]


@asks_person
async def op_prefs(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Read a person's preferences; with ``set`` (``{"key": value}``), change them once the person confirms.

    Request: ``person`` (str, optional): default this machine's; only theirs change. ``set``
    (object, optional): changes such as ``{"budget": 8, "mute.lesson": true}``. Returns ``{"prefs",
    "changed"}``, plus ``confirmed`` (how the person confirmed) after a change. Raises
    ``bad_request``, ``needs_person`` (another person's, or not confirmed), ``confirm_on_terminal``.
    """
    gate = gate_of(sidecar)
    person = _person(sidecar, request)
    changes_raw = request.get("set")
    if not changes_raw:
        return {"prefs": gate.prefs(person).public(), "changed": []}
    if not isinstance(changes_raw, Mapping):
        raise BadRequest('set is an object of preference changes, such as {"budget": 8, "mute.lesson": true}')
    changes = [parse_change(str(k), v) for k, v in changes_raw.items()]
    return await _change_prefs(sidecar, conn, request, person, changes)


async def _change_prefs(sidecar: Sidecar, conn: Connection, request: Mapping[str, Any], person: str,
                        changes: list[Any]) -> dict[str, Any]:
    if person != sidecar.settings.person:
        raise NeedsPerson(f"{person}'s preferences are theirs to change, on their own machine")
    described = "; ".join(c.describe() for c in changes)
    how = await confirm_by_person(conn, request, f"Change your hive gate preferences: {described}?",
                                  title="hive · confirm a change", outcome="not changed",
                                  hint="An agent can read the gate's preferences; only its person changes them, "
                                       "with `hive gate prefs` in a terminal.")
    gate = gate_of(sidecar)
    write_changes(sidecar.paths.config, person, changes, gate.prefs(person))
    gate.prefs_file.reload()
    return {"prefs": gate.prefs(person).public(), "changed": [c.describe() for c in changes], "confirmed": how}


async def op_promote(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Make a source live (its items reach the person) or put it back in shadow, once the person confirms.

    Request: ``source`` (str, required): a source name. ``demote`` (bool, optional): back to shadow.
    ``person`` (str, optional): must be this machine's. Returns ``{"prefs", "changed", "confirmed"}``
    as ``gate_prefs`` does. Raises ``bad_request``, ``needs_person`` (another person's, or not
    confirmed), ``confirm_on_terminal``.
    """
    source = request.get("source")
    if not valid_source(source):
        raise BadRequest("name the source to promote (a-z, 0-9 and -)")
    change = parse_change(f"live.{source}", not request.get("demote"))
    return await _change_prefs(sidecar, conn, request, _person(sidecar, request), [change])


async def op_shadow(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Show, per source of a person's items, what it would have done in shadow and what they wanted.

    Request: ``person`` (str, optional): default this machine's. Returns ``{"person", "live",
    "sources": [{"source", "live", "offered", "would", "silenced", "wanted_when_delivered", "missed",
    "recent"}]}``. Raises ``bad_request`` for a bad person name.
    """
    return await gate_of(sidecar).shadow(_person(sidecar, request))


# Sources whose items fall due with no event to offer them at (a lesson proposal that nobody
# answered for a day reads as held: :mod:`hive.sidecar.lesson_ops`) offer them when a digest is read.
BEFORE_DIGEST: list[Callable[[Sidecar, str], Awaitable[None]]] = []


async def op_digest(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """A person's digest: what the gate held for them, grouped by what it unblocks, and what it checked.

    Request: ``person`` (str, optional): default this machine's. ``since`` (number, optional): epoch
    seconds; default the last digest read (or a day ago). ``peek`` (bool, optional): do not mark it
    read. Returns ``{"person", "since", "until", "groups", "held", "checked", "delivered",
    "silenced", "silenced_by", "shadow"}``. Raises ``bad_request`` for ill-typed fields.
    """
    person = _person(sidecar, request)
    for offer_due in BEFORE_DIGEST:
        try:
            await offer_due(sidecar, person)
        except Exception:  # one source's trouble must not cost the person the rest of their digest
            log.exception("offering due items before %s's digest failed", person)
    return await gate_of(sidecar).digest(person, _since(request.get("since")), mark=not request.get("peek"))


async def op_measures(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Measure the gate from its ledger: deliveries per day, and the shares acted on or that mattered.

    Request: ``person`` (str, optional): only theirs. ``since`` (number, optional): epoch seconds,
    default a week ago. Returns ``{"since", "until", "person", "delivered_per_day", "delivered",
    "acted_on", "acted_share", "held", "held_mattered", "held_mattered_share", "silenced",
    "silenced_mattered", "silenced_mattered_share"}``. Raises ``bad_request`` for a bad ``since``.
    """
    person = request.get("person")
    return await gate_of(sidecar).measures(slug(person) if isinstance(person, str) and person else None,
                                           _since(request.get("since")))


OPS = {
    "gate_offer": op_offer, "gate_breakpoint": op_breakpoint, "gate_fact": op_fact, "gate_acted": op_acted,
    "gate_ledger": op_ledger, "gate_why": op_why, "gate_prefs": op_prefs, "gate_promote": op_promote,
    "gate_shadow": op_shadow, "gate_measures": op_measures, "digest": op_digest,
}
