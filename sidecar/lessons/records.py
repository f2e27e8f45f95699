"""Lessons: what an agent learned, as signed records that travel by scope (issue 8).

Pure functions and records, no I/O. :mod:`hive.sidecar.lessons.store` keeps them,
:mod:`hive.sidecar.lessons.sync` replicates them.

Records
    :class:`LessonBody`  the lesson. Its ``id`` is the SHA-256 (hex) of the canonical JSON of every
                         other field, so the same lesson filed twice is one lesson.
    :class:`Review`      a roster person's verdict (approve, reject, edit with replacement text)
                         and the scope they approved for sharing.
    :class:`Tombstone`   a retraction: the body is deleted everywhere, the header stays.

What travels and is signed
    A lesson travels as a :class:`LogEntry` holding its *header* (the body without ``text``,
    ``applicability`` and ``quote``, plus ``body_hash``) and, separately, a *blob* keyed by the
    hash of its canonical JSON: ``{"lesson", "role": "body", "text", "applicability", "quote"}``.
    An edit's replacement text is a blob too (``role: "edit"``). The machine that writes an entry
    signs it with :func:`hive.sidecar.team.roster.sign` as kind :data:`ENTRY_KIND`, that is over
    ``hive/1/{team_id}/lesson_entry/`` and the entry's canonical JSON. The signature covers the
    header and the hash, not the text, so a header stays verifiable after a retraction deletes
    its text, and a late copy of the text is known by its hash and refused.

Logs
    Each machine numbers the entries it writes in each *log scope* without gaps: ``team``,
    ``personal`` (this machine's person) or ``project:<project id>``. A review or tombstone goes in
    the writer's log of the lesson's scope, so it reaches exactly the machines the lesson reached.
    The logs are split by project because filtering one log per receiver would leave gaps a
    receiver could not tell from loss.

Lifecycle (:func:`derive_state`), computed from the entries a machine holds, so every machine
holding the same entries agrees::

    draft --propose--> proposed --approve/edit--> verified --a verified successor--> superseded
    (local only)          |  \\--reject--> rejected
                          \\-- 24 h unanswered --> held --asked again--> proposed
    any state --tombstone--> retracted

The earliest valid review (by ``at``, then signature) decides; later ones are kept but do not
change the outcome, so two reviewers answering at once cannot flip a lesson back and forth.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from ..base.errors import (
    LessonBadKind,
    LessonBadScope,
    LessonForged,
    LessonInvalid,
    LessonNoEvidence,
    LessonNoQuote,
    LessonTooLong,
    NotMember,
)
from ..team.identity import Identity, is_key_id
from ..team.roster import Malformed, Roster, Signed, canonical, sign, signed_from_wire, valid_name, verify

KINDS = ("convention", "correction", "gotcha", "decision", "routing", "preference", "workflow", "debugging_pattern")
QUOTED_KINDS = ("preference", "decision")  # must quote the person they are about
SCOPES = ("personal", "project", "team")
VERDICTS = ("approve", "reject", "edit")
EVIDENCE_KINDS = ("file", "commit", "command", "url", "message", "event", "approval", "trace")
STATES = ("draft", "proposed", "held", "verified", "rejected", "superseded", "retracted")
ENTRY_TYPES = ("lesson", "review", "tombstone")
ENTRY_KIND = "lesson_entry"  # the signing kind of every log entry

MAX_TEXT = 1200
MAX_APPLICABILITY = 600
MAX_QUOTE = 600
MAX_NOTE = 600
MAX_REASON = 600
MAX_TAGS = 12
MAX_TAG = 40
MAX_EVIDENCE = 16
MAX_REF = 400
MAX_SESSION = 200
HELD_AFTER_MS = 24 * 3_600_000  # a proposal nobody answered in a day is held, not asked again

_HEX64 = re.compile(r"[0-9a-f]{64}")
_PROJECT = re.compile(r"sha256:[0-9a-f]{64}")
_TAG = re.compile(r"[a-z0-9][a-z0-9._/-]{0,39}")


# ---- records ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """A pointer to what the lesson rests on, never the content itself."""

    kind: str  # one of EVIDENCE_KINDS
    ref: str  # a repo-relative path, a commit, a command line, a URL, a message id...
    digest: str = ""  # optional hash of what ``ref`` pointed at when the lesson was written


@dataclass(frozen=True)
class Quote:
    """The words of the person a preference or decision is about, so hearsay stays hearsay."""

    speaker: str  # a person name
    words: str
    at: int = 0  # ms since the epoch, when they said it (0: unknown)


@dataclass(frozen=True)
class LessonBody:
    kind: str
    text: str
    applicability: str  # when it applies
    scope: str  # personal | project | team
    evidence: tuple[Evidence, ...]
    author_person: str
    author_machine: str  # the key id of the machine that wrote it
    author_session: str  # the session address, e.g. alice/api-claude
    created_at: int  # ms since the epoch
    project: str = ""  # the project id (hive.sidecar.team.projects.project_id); required for project scope
    tags: tuple[str, ...] = ()
    quote: Quote | None = None
    supersedes: str = ""  # the id of the lesson this one replaces
    id: str = ""  # lesson_id(self); filled by new_lesson

    def content(self) -> dict[str, Any]:
        """Every field but ``id``, as plain JSON: what the id hashes."""
        plain = dataclasses.asdict(self)
        plain.pop("id")
        return json.loads(canonical(plain))

    def header(self) -> dict[str, Any]:
        """What the log entry carries: everything but the text fields, plus the body's hash."""
        plain = self.content()
        for name in ("text", "applicability", "quote"):
            plain.pop(name)
        plain["id"] = self.id
        plain["body_hash"] = blob_hash(self.blob())
        return plain

    def blob(self) -> dict[str, Any]:
        """The deletable part, stored by hash in the content store."""
        return {
            "lesson": self.id,
            "role": "body",
            "text": self.text,
            "applicability": self.applicability,
            "quote": dataclasses.asdict(self.quote) if self.quote is not None else None,
        }

    @property
    def log_scope(self) -> str:
        return log_scope(self.scope, self.project)


@dataclass(frozen=True)
class Review:
    lesson: str  # the lesson id
    verdict: str  # approve | reject | edit
    reviewer: str  # a roster person: the person of the machine that signs the entry
    scope: str  # the scope the reviewer approved (may narrow the proposed one)
    at: int  # ms since the epoch
    project: str = ""  # for an approved project scope
    text_hash: str = ""  # edit: the hash of the replacement-text blob (edit_blob)
    note: str = ""


@dataclass(frozen=True)
class Tombstone:
    lesson: str
    person: str  # who retracted it
    at: int
    reason: str = ""


@dataclass(frozen=True)
class LogEntry:
    """One numbered entry in the signing machine's log for ``scope``."""

    scope: str  # a log scope: team | personal | project:<id>
    seq: int  # 1, 2, 3... without gaps within (signer, scope)
    type: str  # lesson | review | tombstone
    lesson: str  # the lesson id the record is about
    record: dict[str, Any]  # the header, Review or Tombstone as JSON


# ---- ids and hashes ---------------------------------------------------------------------------


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def lesson_id(body: LessonBody) -> str:
    return sha256_hex(canonical(body.content()))


def blob_hash(blob: dict[str, Any]) -> str:
    return sha256_hex(canonical(blob))


def edit_blob(lesson: str, text: str) -> dict[str, Any]:
    """The replacement text of an edit review, kept and deleted like a body."""
    return {"lesson": lesson, "role": "edit", "text": text}


def log_scope(scope: str, project: str = "") -> str:
    return f"project:{project}" if scope == "project" else scope


def valid_log_scope(value: object) -> bool:
    if value in ("team", "personal"):
        return True
    return isinstance(value, str) and value.startswith("project:") and bool(_PROJECT.fullmatch(value[8:]))


def valid_project(value: object) -> bool:
    return isinstance(value, str) and _PROJECT.fullmatch(value) is not None


# ---- validation -------------------------------------------------------------------------------


def _check_text(label: str, value: object, limit: int, *, required: bool = False) -> None:
    if not isinstance(value, str):
        raise LessonInvalid(f"{label} must be text")
    if required and not value.strip():
        raise LessonInvalid(f"{label} is empty")
    if len(value) > limit:
        raise LessonTooLong(f"{label} is {len(value)} characters; at most {limit}")


def check_scope(scope: object, project: object) -> None:
    if scope not in SCOPES:
        raise LessonBadScope(f"a scope is one of {', '.join(SCOPES)}")
    if scope == "project" and not valid_project(project):
        raise LessonBadScope("a project lesson needs its project id (sha256:<64 hex>)")
    if scope != "project" and project not in ("", None) and not valid_project(project):
        raise LessonBadScope("the project id is not sha256:<64 hex>")


def check_lesson(body: LessonBody) -> None:
    """Refuse a lesson that must not be recorded, with a specific error code."""
    if body.kind not in KINDS:
        raise LessonBadKind(f"a lesson's kind is one of {', '.join(KINDS)}")
    check_scope(body.scope, body.project)
    _check_text("the text", body.text, MAX_TEXT, required=True)
    _check_text("the applicability", body.applicability, MAX_APPLICABILITY)
    if not body.evidence:
        raise LessonNoEvidence(
            "a lesson needs at least one piece of evidence (a file, commit, command, "
            "url or message it rests on): cite or omit"
        )
    if len(body.evidence) > MAX_EVIDENCE:
        raise LessonInvalid(f"at most {MAX_EVIDENCE} pieces of evidence")
    for ev in body.evidence:
        if not isinstance(ev, Evidence) or ev.kind not in EVIDENCE_KINDS:
            raise LessonInvalid(f"evidence kinds are {', '.join(EVIDENCE_KINDS)}")
        _check_text("an evidence reference", ev.ref, MAX_REF, required=True)
        _check_text("an evidence digest", ev.digest, 128)
    if body.kind in QUOTED_KINDS:
        if body.quote is None or not isinstance(body.quote.words, str) or not body.quote.words.strip():
            raise LessonNoQuote(f"a {body.kind} must quote the person it is about (quote.speaker, quote.words)")
    if body.quote is not None:
        if not valid_name(body.quote.speaker):
            raise LessonInvalid("a quote's speaker is a person name")
        _check_text("the quote", body.quote.words, MAX_QUOTE)
        if not isinstance(body.quote.at, int) or body.quote.at < 0:
            raise LessonInvalid("a quote's time is milliseconds since the epoch")
    if len(body.tags) > MAX_TAGS or not all(isinstance(t, str) and _TAG.fullmatch(t) for t in body.tags):
        raise LessonInvalid(f"at most {MAX_TAGS} tags of a-z, 0-9 and ._/-, {MAX_TAG} characters each")
    if not valid_name(body.author_person) or not is_key_id(body.author_machine):
        raise LessonInvalid("the author is a person name and a machine key")
    _check_text("the author session", body.author_session, MAX_SESSION, required=True)
    if not isinstance(body.created_at, int) or body.created_at < 0:
        raise LessonInvalid("created_at is milliseconds since the epoch")
    if body.supersedes and not _HEX64.fullmatch(body.supersedes):
        raise LessonInvalid("supersedes is a lesson id")
    if body.id and body.id != lesson_id(body):
        raise LessonInvalid("the lesson id does not match its content")


def check_review(review: Review) -> None:
    if not _HEX64.fullmatch(review.lesson):
        raise LessonInvalid("a review names a lesson id")
    if review.verdict not in VERDICTS:
        raise LessonInvalid(f"a verdict is one of {', '.join(VERDICTS)}")
    check_scope(review.scope, review.project)
    if not valid_name(review.reviewer):
        raise LessonInvalid("a reviewer is a person name")
    if review.verdict == "edit" and not _HEX64.fullmatch(review.text_hash):
        raise LessonInvalid("an edit carries the hash of its replacement text")
    if review.verdict != "edit" and review.text_hash:
        raise LessonInvalid("only an edit carries replacement text")
    _check_text("the note", review.note, MAX_NOTE)
    if not isinstance(review.at, int) or review.at < 0:
        raise LessonInvalid("a review's time is milliseconds since the epoch")


def check_tombstone(tomb: Tombstone) -> None:
    if not _HEX64.fullmatch(tomb.lesson):
        raise LessonInvalid("a tombstone names a lesson id")
    if not valid_name(tomb.person):
        raise LessonInvalid("a tombstone names the person who retracted")
    _check_text("the reason", tomb.reason, MAX_REASON)
    if not isinstance(tomb.at, int) or tomb.at < 0:
        raise LessonInvalid("a tombstone's time is milliseconds since the epoch")


def new_lesson(
    *,
    kind: str,
    text: str,
    applicability: str,
    scope: str,
    evidence: list[Evidence] | tuple[Evidence, ...],
    author_person: str,
    author_machine: str,
    author_session: str,
    created_at: int,
    project: str = "",
    tags: tuple[str, ...] | list[str] = (),
    quote: Quote | None = None,
    supersedes: str = "",
) -> LessonBody:
    """A checked lesson with its id. Raises a :class:`~hive.sidecar.base.errors.LessonInvalid` subclass."""
    body = LessonBody(
        kind=kind,
        text=text,
        applicability=applicability,
        scope=scope,
        evidence=tuple(evidence),
        author_person=author_person,
        author_machine=author_machine,
        author_session=author_session,
        created_at=created_at,
        project=project if scope == "project" else "",
        tags=tuple(tags),
        quote=quote,
        supersedes=supersedes,
    )
    check_lesson(body)
    return dataclasses.replace(body, id=lesson_id(body))


# ---- reading JSON -----------------------------------------------------------------------------


def _field(raw: dict[str, Any], name: str, typ: type | tuple[type, ...], default: Any = dataclasses.MISSING) -> Any:
    if name not in raw:
        if default is dataclasses.MISSING:
            raise LessonInvalid(f"missing {name}")
        return default
    value = raw[name]
    if not isinstance(value, typ) or (isinstance(value, bool) and typ is int):
        raise LessonInvalid(f"{name} has the wrong type")
    return value


def evidence_from(raw: Any) -> Evidence:
    if isinstance(raw, Evidence):
        return raw
    if not isinstance(raw, dict):
        raise LessonInvalid("a piece of evidence is {kind, ref}")
    return Evidence(kind=_field(raw, "kind", str), ref=_field(raw, "ref", str), digest=_field(raw, "digest", str, ""))


def quote_from(raw: Any) -> Quote | None:
    if raw is None or isinstance(raw, Quote):
        return raw
    if not isinstance(raw, dict):
        raise LessonNoQuote("a quote is {speaker, words, at?}")
    return Quote(speaker=_field(raw, "speaker", str), words=_field(raw, "words", str), at=_field(raw, "at", int, 0))


def lesson_from(header: dict[str, Any], blob: dict[str, Any]) -> LessonBody:
    """Rebuild a lesson from its header and body blob; checks that both belong together."""
    if not isinstance(header, dict) or not isinstance(blob, dict):
        raise LessonInvalid("a lesson is a header and a body")
    evidence = _field(header, "evidence", list)
    body = LessonBody(
        kind=_field(header, "kind", str),
        text=_field(blob, "text", str),
        applicability=_field(blob, "applicability", str),
        scope=_field(header, "scope", str),
        evidence=tuple(evidence_from(e) for e in evidence),
        author_person=_field(header, "author_person", str),
        author_machine=_field(header, "author_machine", str),
        author_session=_field(header, "author_session", str),
        created_at=_field(header, "created_at", int),
        project=_field(header, "project", str, ""),
        tags=tuple(_field(header, "tags", list, [])),
        quote=quote_from(blob.get("quote")),
        supersedes=_field(header, "supersedes", str, ""),
        id=_field(header, "id", str),
    )
    check_lesson(body)
    if blob.get("lesson") != body.id or blob_hash(blob) != header.get("body_hash"):
        raise LessonInvalid("the body does not belong to that header")
    return body


def lesson_from_request(
    raw: dict[str, Any], *, author_person: str, author_machine: str, author_session: str, created_at: int
) -> LessonBody:
    """A new lesson from a client's request fields (``kind``, ``text``, ``applicability``,
    ``scope``, ``project``, ``evidence``, ``tags``, ``quote``, ``supersedes``); the author is
    never taken from the request."""
    evidence = raw.get("evidence") or []
    if not isinstance(evidence, list):
        raise LessonNoEvidence("evidence is a list of {kind, ref}")
    tags = raw.get("tags") or []
    if not isinstance(tags, list):
        raise LessonInvalid("tags are a list of words")
    return new_lesson(
        kind=_field(raw, "kind", str),
        text=_field(raw, "text", str),
        applicability=_field(raw, "applicability", str, ""),
        scope=_field(raw, "scope", str, "project"),
        project=_field(raw, "project", str, ""),
        evidence=[evidence_from(e) for e in evidence],
        tags=tuple(tags),
        quote=quote_from(raw.get("quote")),
        supersedes=_field(raw, "supersedes", str, ""),
        author_person=author_person,
        author_machine=author_machine,
        author_session=author_session,
        created_at=created_at,
    )


def header_check(header: Any) -> dict[str, Any]:
    """The structure of a header as it arrives (its body may be missing or deleted)."""
    if not isinstance(header, dict):
        raise LessonInvalid("a lesson header is an object")
    if _field(header, "kind", str) not in KINDS:
        raise LessonBadKind(f"a lesson's kind is one of {', '.join(KINDS)}")
    check_scope(_field(header, "scope", str), _field(header, "project", str, ""))
    for name in ("id", "body_hash"):
        if not _HEX64.fullmatch(_field(header, name, str)):
            raise LessonInvalid(f"{name} is 64 hex digits")
    if not _field(header, "evidence", list):
        raise LessonNoEvidence("a lesson needs at least one piece of evidence")
    if not valid_name(_field(header, "author_person", str)) or not is_key_id(_field(header, "author_machine", str)):
        raise LessonInvalid("the author is a person name and a machine key")
    _field(header, "created_at", int)
    return header


def review_from(raw: Any) -> Review:
    if not isinstance(raw, dict):
        raise LessonInvalid("a review is an object")
    review = Review(
        lesson=_field(raw, "lesson", str),
        verdict=_field(raw, "verdict", str),
        reviewer=_field(raw, "reviewer", str),
        scope=_field(raw, "scope", str),
        at=_field(raw, "at", int),
        project=_field(raw, "project", str, ""),
        text_hash=_field(raw, "text_hash", str, ""),
        note=_field(raw, "note", str, ""),
    )
    check_review(review)
    return review


def tombstone_from(raw: Any) -> Tombstone:
    if not isinstance(raw, dict):
        raise LessonInvalid("a tombstone is an object")
    tomb = Tombstone(
        lesson=_field(raw, "lesson", str),
        person=_field(raw, "person", str),
        at=_field(raw, "at", int),
        reason=_field(raw, "reason", str, ""),
    )
    check_tombstone(tomb)
    return tomb


# ---- log entries ------------------------------------------------------------------------------


def make_entry(
    identity: Identity, team_id: str, scope: str, seq: int, record: LessonBody | Review | Tombstone
) -> Signed[LogEntry]:
    """Sign the next entry of this machine's log ``scope``."""
    if isinstance(record, LessonBody):
        entry = LogEntry(scope=scope, seq=seq, type="lesson", lesson=record.id, record=record.header())
    elif isinstance(record, Review):
        entry = LogEntry(
            scope=scope,
            seq=seq,
            type="review",
            lesson=record.lesson,
            record=json.loads(canonical(dataclasses.asdict(record))),
        )
    else:
        entry = LogEntry(
            scope=scope,
            seq=seq,
            type="tombstone",
            lesson=record.lesson,
            record=json.loads(canonical(dataclasses.asdict(record))),
        )
    return sign(identity, team_id, ENTRY_KIND, entry)


def entry_from_wire(obj: Any) -> Signed[LogEntry]:
    """Read ``{"body", "by", "sig"}`` without checking the signature. Raises :class:`LessonInvalid`."""
    if not isinstance(obj, dict) or not isinstance(obj.get("body"), dict):
        raise LessonInvalid("a log entry is {body, by, sig}")
    raw = obj["body"]
    record = raw.get("record")
    if not isinstance(record, dict):
        raise LessonInvalid("a log entry carries a record object")
    stripped = {k: v for k, v in raw.items() if k != "record"}
    try:
        shell = signed_from_wire(_EntryShell, {**obj, "body": stripped})
    except Malformed as exc:
        raise LessonInvalid(f"malformed log entry: {exc}") from exc
    s = shell.body
    entry = LogEntry(scope=s.scope, seq=s.seq, type=s.type, lesson=s.lesson, record=record)
    return Signed(body=entry, by=shell.by, sig=shell.sig, raw=raw)


@dataclass(frozen=True)
class _EntryShell:
    scope: str
    seq: int
    type: str
    lesson: str


@dataclass(frozen=True)
class Checked:
    """An entry that holds, with its record read."""

    signed: Signed[LogEntry]
    signer_person: str
    record: dict[str, Any] | Review | Tombstone  # the header dict for a lesson

    @property
    def entry(self) -> LogEntry:
        return self.signed.body


def check_entry(obj: Any, *, team_id: str, roster: Roster) -> Checked:
    """An entry from any machine (this one included) if it holds.

    Refuses with ``lesson_forged`` (the signature does not verify for this team),
    ``not_member`` (the signer is not in the roster, or a review or tombstone names a person who
    is not the signer's), or a ``lesson_*`` code for a malformed record.
    """
    signed = obj if isinstance(obj, Signed) else entry_from_wire(obj)
    entry = signed.body
    if not verify(team_id, ENTRY_KIND, signed):
        raise LessonForged("the entry's signature does not verify for this team")
    member = roster.members.get(signed.by)
    if member is None:
        raise NotMember("the entry was signed by a machine that is not in the team")
    if not valid_log_scope(entry.scope) or not isinstance(entry.seq, int) or entry.seq < 1:
        raise LessonInvalid("an entry names a log scope and a sequence number from 1")
    if entry.type not in ENTRY_TYPES or not _HEX64.fullmatch(entry.lesson):
        raise LessonInvalid("an entry is a lesson, review or tombstone about a lesson id")
    record: dict[str, Any] | Review | Tombstone
    if entry.type == "lesson":
        record = header_check(entry.record)
        if record["author_machine"] != signed.by or record["author_person"] != member.person:
            raise NotMember("a lesson's author must be the machine that signed it and that machine's person")
        if log_scope(record["scope"], record.get("project", "")) != entry.scope or record["id"] != entry.lesson:
            raise LessonBadScope("the lesson is filed in another scope's log")
        if record["scope"] == "personal" and record["author_person"] != member.person:
            raise LessonBadScope("a personal lesson is its author's")
        if not member.active and record["created_at"] >= member.ts:
            raise NotMember("the lesson was written after its machine left the team")
    elif entry.type == "review":
        record = review_from(entry.record)
        if record.reviewer != member.person:
            raise NotMember(f"the review names {record.reviewer}, but the signing machine is {member.person}'s")
        if not member.active and record.at >= member.ts:
            # Reviews made before a machine left still count (every machine must read a lesson the
            # same way, whenever it syncs); one stamped after its departure does not.
            raise NotMember("the review was made after the reviewer's machine left the team")
        if record.lesson != entry.lesson:
            raise LessonInvalid("the review is about another lesson than its entry")
    else:
        record = tombstone_from(entry.record)
        if record.person != member.person:
            raise NotMember(f"the tombstone names {record.person}, but the signing machine is {member.person}'s")
        if record.lesson != entry.lesson:
            raise LessonInvalid("the tombstone is about another lesson than its entry")
        if not member.active and record.at >= member.ts:
            raise NotMember("the retraction was made after its machine left the team")
    return Checked(signed=signed, signer_person=member.person, record=record)


# ---- lifecycle --------------------------------------------------------------------------------


def deciding_review(reviews: list[tuple[Review, str]]) -> tuple[Review, str] | None:
    """The review that decides a lesson: the earliest by (at, signature). ``(review, sig)`` pairs."""
    return min(reviews, key=lambda pair: (pair[0].at, pair[1]), default=None)


def derive_state(
    *, reviews: list[tuple[Review, str]], retracted: bool, superseded: bool, asked_at_ms: int, now_ms: int
) -> str:
    """A proposed lesson's state from the entries held about it (drafts never reach a log)."""
    if retracted:
        return "retracted"
    decision = deciding_review(reviews)
    if decision is not None:
        if decision[0].verdict == "reject":
            return "rejected"
        return "superseded" if superseded else "verified"
    if now_ms - asked_at_ms >= HELD_AFTER_MS:
        return "held"
    return "proposed"
