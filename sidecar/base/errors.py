"""hive's exception hierarchy.

Every error carries a stable ``code`` string. The sidecar maps them to protocol error replies
(``{"ok": false, "error": {"code", "message"}}``) at the socket edge, and clients raise them
again from those replies, so callers on both sides catch the same classes:

    HiveError
    ├── BadRequest          malformed line, missing or ill-typed argument   (bad_request)
    │   ├── UnknownOp       an op the sidecar does not serve                 (unknown_op)
    │   └── TooLarge        a line or body over its limit                    (too_large)
    ├── NotFound            no session or recipient by that name/address     (not_found)
    │   ├── Ambiguous       several sessions match; the message lists them   (ambiguous)
    │   └── NoAnchor        the team has no anchor (or this machine no team) (no_anchor)
    ├── Refused             allowed syntax, refused by policy                (refused)
    │   ├── GroupRefused    a group address from an agent                    (group_refused)
    │   ├── LoopGuard       too many agent messages in a row between two sessions (loop_guard)
    │   ├── RateLimited     a sender over its messages a minute; ``retry_after`` (rate_limited)
    │   └── NeedsPerson     only the person may do that, and they did not confirm (needs_person)
    ├── Conflict            a name is taken, a lock is held                  (conflict)
    ├── NoDesktop           no desktop to show a pop-up on: ask in-session   (no_desktop)
    │   └── ConfirmOnTerminal  no desktop; a person at this terminal may confirm (confirm_on_terminal)
    ├── Unreachable         no sidecar answers and none could be started     (unreachable)
    ├── AnchorOffline       the team's anchor is not linked now, or did not answer (anchor_offline)
    └── lessons (hive.sidecar.lessons.records): LessonInvalid (lesson_invalid) and its specific reasons
        lesson_no_evidence, lesson_no_quote, lesson_too_long, lesson_bad_kind, lesson_bad_scope
        (all BadRequest); lesson_forged, not_member, lesson_retracted (Refused); lesson_state (Conflict)
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is for the type checker only: every `hive` command loads this module
    from typing import Any, ClassVar


class HiveError(Exception):
    """Base of every error hive raises on purpose."""

    code: ClassVar[str] = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_wire(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message}


class BadRequest(HiveError):
    code = "bad_request"


class UnknownOp(BadRequest):
    code = "unknown_op"


class TooLarge(BadRequest):
    code = "too_large"


class NotFound(HiveError):
    code = "not_found"


class Ambiguous(NotFound):
    code = "ambiguous"


class Refused(HiveError):
    code = "refused"


class GroupRefused(Refused):
    code = "group_refused"


class LoopGuard(Refused):
    """Two sessions exchanged the most agent messages in a row hive allows with no person in between."""

    code = "loop_guard"


class RateLimited(Refused):
    """A sender went over its messages a minute; ``retry_after`` says in how many seconds it may send."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def to_wire(self) -> dict[str, object]:
        wire = super().to_wire()
        if self.retry_after is not None:
            wire["retry_after"] = self.retry_after
        return wire


class NeedsPerson(Refused):
    """An agent asked for something only its person may do, and the person did not confirm it."""

    code = "needs_person"


class Conflict(HiveError):
    code = "conflict"


class NoDesktop(HiveError):
    code = "no_desktop"


class ConfirmOnTerminal(NoDesktop):
    """No desktop, but the client has a terminal: its message is the question to ask there."""

    code = "confirm_on_terminal"


class Unreachable(HiveError):
    code = "unreachable"


class NoAnchor(NotFound):
    """What needs the team's anchor (its history), in a team without one, or in no team."""

    code = "no_anchor"


class AnchorOffline(HiveError):
    """The team has an anchor, but none is linked now (or none answered in time): try again later."""

    code = "anchor_offline"


class LessonInvalid(BadRequest):
    """A lesson, review or tombstone that cannot be recorded; subclasses name the reason."""

    code = "lesson_invalid"


class LessonNoEvidence(LessonInvalid):
    code = "lesson_no_evidence"


class LessonNoQuote(LessonInvalid):
    """A preference or decision that does not quote the person it is about."""

    code = "lesson_no_quote"


class LessonTooLong(LessonInvalid):
    code = "lesson_too_long"


class LessonBadKind(LessonInvalid):
    code = "lesson_bad_kind"


class LessonBadScope(LessonInvalid):
    code = "lesson_bad_scope"


class LessonForged(Refused):
    """A signature that does not verify for this team (forged, altered, or another team's)."""

    code = "lesson_forged"


class NotMember(Refused):
    """The signer or named person is not an active member of the team (or of the project)."""

    code = "not_member"


class LessonRetracted(Refused):
    """The lesson was retracted: its body is gone and a late copy is refused."""

    code = "lesson_retracted"


class LessonState(Conflict):
    """The lesson's lifecycle state does not allow that transition."""

    code = "lesson_state"


_BY_CODE: dict[str, type[HiveError]] = {
    cls.code: cls
    for cls in (
        HiveError,
        BadRequest,
        UnknownOp,
        TooLarge,
        NotFound,
        Ambiguous,
        Refused,
        GroupRefused,
        LoopGuard,
        RateLimited,
        NeedsPerson,
        Conflict,
        NoDesktop,
        ConfirmOnTerminal,
        Unreachable,
        NoAnchor,
        AnchorOffline,
        LessonInvalid,
        LessonNoEvidence,
        LessonNoQuote,
        LessonTooLong,
        LessonBadKind,
        LessonBadScope,
        LessonForged,
        NotMember,
        LessonRetracted,
        LessonState,
    )
}


def from_wire(error: dict[str, Any]) -> HiveError:
    """Rebuild the exception a sidecar reported; unknown codes keep their code on a base error."""
    cls = _BY_CODE.get(str(error.get("code", "")), HiveError)
    exc = cls(str(error.get("message", "the sidecar reported an error without a message")))
    if isinstance(exc, RateLimited) and isinstance(error.get("retry_after"), (int, float)):
        exc.retry_after = float(error["retry_after"])
    if cls is HiveError:
        exc.code = error.get("code", "internal")  # type: ignore[misc]
    return exc
