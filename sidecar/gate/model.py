"""The gate's records: an item as a source proposes it, its evidence, the facts urgency is computed
from, a decision (one ledger row), and what the gate tracks of an offered item; with the limits a
wire item is held to and the names of urgencies, breakpoints, fact states and outcomes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.config import slug
from ..base.errors import BadRequest
from ..person.dialog import clean, clip
from .prefs import valid_source

URGENCIES = ("info", "attention", "alarm")
RANK = {u: i for i, u in enumerate(URGENCIES)}
BREAKPOINTS = {
    "commit": "a commit",
    "test": "a test run finished",
    "idle": "the session idle for 60 s",
    "turn": "a turn ended",
    "pr": "a pull request opened",
}
# What each checkable record kind may say, and what its facts mean for urgency (rules.fact_urgency).
FACT_STATES = {
    "test": ("passing", "failing"),
    "ci": ("passing", "failing"),
    "deadline": ("open", "done"),
    "blocked": ("blocked", "unblocked"),
    "security": ("open", "fixed"),
    "overlap": ("open", "resolved"),
}
ACTED = ("cited", "replied", "changed", "asked", "wanted")
OUTCOME_STATE = {
    "deliver": "delivered",
    "wait": "pending",
    "hold": "held",
    "digest": "digest",
    "silence": "silenced",
    "shadow": "shadow",
    "relay": "relayed",
}

MAX_TITLE = 300
MAX_BODY = 4000
MAX_EVIDENCE = 32
MAX_REF = 300
MAX_DATA = 16 * 1024

_KIND = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
# Built once: json.dumps with options builds an encoder per call.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
_STR = json.encoder.encode_basestring  # what _JSON writes a string as (C-accelerated)


def _evidence_json(evidence: Iterable[Evidence]) -> str:
    """``_JSON.encode([e.public() for e in evidence])``, byte for byte, without the dicts: written per item."""
    return (
        "["
        + ",".join(
            f'{{"kind":{_STR(e.kind)},"ref":{_STR(e.ref)},"note":{_STR(e.note)}}}'
            if e.note
            else f'{{"kind":{_STR(e.kind)},"ref":{_STR(e.ref)}}}'
            for e in evidence
        )
        + "]"
    )


class Ids:
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
        return {
            "source": self.source,
            "person": self.person,
            "session": self.session,
            "title": self.title,
            "body": self.body,
            "evidence": [e.public() for e in self.evidence],
            "key": self.key,
            "proposer": self.proposer,
            "data": dict(self.data),
        }

    @classmethod
    def from_wire(cls, raw: Any, default_person: str = "") -> Item:
        """Validate an item from a request. Raises BadRequest."""
        if not isinstance(raw, Mapping):
            raise BadRequest(
                "an item is an object: source, person, title, and optionally session, body, "
                "evidence, key, proposer, data"
            )

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
        return cls(
            source=str(source),
            person=person,
            title=text("title", MAX_TITLE, required=True),
            body=text("body", MAX_BODY),
            session=text("session", MAX_REF),
            evidence=tuple(evidence),
            key=text("key", MAX_REF),
            proposer=text("proposer", MAX_REF),
            data=dict(data),
        )


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
        return {
            "kind": self.kind,
            "ref": self.ref,
            "state": self.state,
            "since": self.since,
            "at": self.at,
            "runs": self.runs,
            "due": self.due,
            "detail": self.detail,
        }


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
        return {
            "item": self.item_id,
            "fingerprint": self.fingerprint,
            "source": self.source,
            "person": self.person,
            "outcome": self.outcome,
            "rule": self.rule,
            "reason": self.reason,
            "urgency": self.urgency,
            "at": self.at,
            "due": self.due,
            "channel": self.channel,
            "session": self.session,
            "would": self.would,
        }


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
Facts = Mapping[tuple[str, str], Fact]  # (kind, ref) -> the current record
