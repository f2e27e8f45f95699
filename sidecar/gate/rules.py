"""The gate's decision steps, each written once and named by the rule it writes into the ledger.

Urgency
-------

``info``, ``attention`` or ``alarm``, computed only from *facts*: records hive's own observers
write with :meth:`~hive.sidecar.gate.engine.Gate.record` (op ``gate_fact``), one current record
per ``(kind, ref)``:

    test, ci     passing | failing      failing: attention; 3 runs in a row or 4 h: alarm
    deadline     open | done (+ due)    due within a day: attention; within an hour or past: alarm
    blocked      blocked | unblocked    attention (and the digest counts what an item unblocks)
    security     open | fixed           alarm, and the floor

A session's test runs record ``test`` facts by themselves, ref ``{repo}@{branch}`` as sessions
name them (:func:`hive.sidecar.gate.sources.ref_for_tests`), when the hook reports the exit code.

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

Four paths take these steps, each a subset in this order: a new item (every step); an item worth
showing now or not at all (``offer_now``: floor, preferences, dedupe, channel, quiet hours, which
send it to the digest rather than hold it, and the budget when asked); a held item when its quiet
hours end (urgency again, floor, preferences, then from the channel on); and a waiting item at a
breakpoint or its bound (preferences, channel and quiet hours, worded as having changed "while it
waited"). A step returns the :class:`Step` it decided, or None to pass the item on.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from ..base.config import DAY, HOUR
from .model import RANK, Entry, Fact, Facts, Item, Seen
from .prefs import Prefs, format_quiet

ESCALATE_RUNS = 3  # a test or CI failing this many runs in a row is an alarm
ESCALATE_AFTER = 4 * HOUR  # ...and so is one failing this long
DEADLINE_ALARM = HOUR  # a deadline this close (or past) is an alarm
DEADLINE_ATTENTION = DAY  # ...this close, attention


@dataclass(slots=True)
class Step:
    """What one step decided: the outcome, the rule that made it and the reason, as its ledger row says."""

    outcome: str
    rule: str
    reason: str
    channel: str = ""
    session: str = ""
    due: float | None = None


# ---- urgency -------------------------------------------------------------------------------


def fact_urgency(fact: Fact, now: float) -> tuple[str, str]:
    """The urgency one fact gives an item that points at it, and the reason in words."""
    name = f"{fact.kind} {fact.ref}"
    if fact.kind in ("test", "ci") and fact.state == "failing":
        if fact.runs >= ESCALATE_RUNS:
            return "alarm", f"{name} failed {fact.runs} runs in a row"
        if now - fact.since >= ESCALATE_AFTER:
            return "alarm", f"{name} has been failing for {span(now - fact.since)}"
        return "attention", f"{name} is failing"
    if fact.kind == "deadline" and fact.state == "open" and fact.due is not None:
        left = fact.due - now
        if left <= 0:
            return "alarm", f"{name} passed {span(-left)} ago"
        if left <= DEADLINE_ALARM:
            return "alarm", f"{name} is due in {span(left)}"
        if left <= DEADLINE_ATTENTION:
            return "attention", f"{name} is due in {span(left)}"
    if fact.kind == "blocked" and fact.state == "blocked":
        return "attention", f"{fact.ref} is blocked" + (f" ({fact.detail})" if fact.detail else "")
    if fact.kind == "overlap" and fact.state == "open":
        # hive saw both sessions modify the file itself: a collision in the making, worth a turn.
        return "attention", f"two live sessions are modifying {fact.ref}"
    if fact.kind == "security" and fact.state == "open":
        return "alarm", f"security finding {fact.ref} is open"
    return "info", ""


def urgency(facts: Facts, item: Item, now: float) -> tuple[str, str]:
    """The item's urgency: the highest any fact its evidence points at gives it, and why."""
    level, because = "info", ""
    for evidence in item.evidence:
        fact = facts.get((evidence.kind, evidence.ref))
        if fact is not None:
            found, why = fact_urgency(fact, now)
            if RANK[found] > RANK[level]:
                level, because = found, why
    return level, because


def open_finding(facts: Facts, item: Item) -> str:
    """The open security finding the item's evidence points at, in words; "" if none."""
    for evidence in item.evidence:
        fact = facts.get(("security", evidence.ref)) if evidence.kind == "security" else None
        if fact is not None and fact.state == "open":
            return f"security finding {fact.ref} is open"
    return ""


# ---- the steps -----------------------------------------------------------------------------


def floor(facts: Facts, item: Item, channel: str, *, prefix: str = "", owner: str = "") -> Step | None:
    """The floor, fixed in code: a security finding reaches its person at once on ``channel`` (the
    alarm channel, or the one an item shown now asked for). ``owner``: why a code owner's copy is theirs."""
    finding = open_finding(facts, item)
    if not finding:
        return None
    whose = f"; {item.person} owns the code ({owner})" if owner else ""
    return Step(
        "deliver",
        "floor.security",
        f"{prefix}a security finding always reaches its owner: {finding}{whose}",
        channel=channel,
        session=item.session,
    )


def mute(prefs: Prefs, item: Item, *, prefix: str = "", waited: bool = False) -> Step | None:
    """Preferences: the person muted the item's source (``waited``: while the item waited for its moment)."""
    if item.source not in prefs.mute:
        return None
    return Step(
        "silence", "pref.mute", f"{prefix}{item.person} muted {item.source}" + (" while it waited" if waited else "")
    )


def duplicate(
    prior: Seen | None, level: str, prefs: Prefs, window: float, now: float, *, told: bool = False
) -> Step | None:
    """Dedupe: the same fingerprint within the window is silenced, unless it is more urgent now.

    ``told``: only an item that was delivered counts (the floor's dedupe: telling again at the same
    urgency is noise, but an item that only waited is no reason to hold back a security finding).
    """
    if prior is None or RANK[level] > RANK[prior.urgency] or (told and prior.state != "delivered"):
        return None
    return Step(
        "silence",
        "duplicate",
        f"duplicate of {prior.id} ({prior.state}, offered "
        f"{when(prefs, prior.at, now)}), within the {span(window)} window",
    )


def digest_only(prefs: Prefs, item: Item, *, prefix: str = "", waited: bool = False) -> Step | None:
    """The channel: the person takes everything but floors as a digest (``waited``: switched to it meanwhile)."""
    if prefs.channel != "digest":
        return None
    if waited:
        return Step("digest", "pref.digest", f"{item.person} switched to digest only while it waited")
    return Step("digest", "pref.digest", f"{prefix}{item.person} takes everything but floors as a digest")


def alarm(level: str, because: str, prefs: Prefs, item: Item, *, prefix: str = "") -> Step | None:
    """Urgency: an alarm, with the person's alarms on, goes out at once on their alarm channel."""
    if level != "alarm" or not prefs.alarms:
        return None
    return Step(
        "deliver",
        "urgency.alarm",
        f"{prefix}alarm: {because}; alarms are on",
        channel=prefs.alarm_channel,
        session=item.session,
    )


def quiet(prefs: Prefs, now: float, *, prefix: str = "", shown: str = "") -> Step | None:
    """Quiet hours: held until they end, then decided again. ``shown`` (a pop-up, a line in the
    session): the item is worth showing now or not at all, so it goes to the digest instead."""
    until = prefs.quiet_until(now)
    if until is None:
        return None
    hours = f"{prefix}quiet hours ({quiet_text(prefs)})"
    if shown:
        return Step(
            "digest", "quiet", f"{hours}: {shown} is shown now or not at all; what it is about waits where it is"
        )
    return Step("hold", "quiet", f"{hours}: held until {when(prefs, until, now)}", due=until)


def info(level: str, *, prefix: str = "") -> Step | None:
    """Info: nothing checkable makes the item urgent, so it goes to the digest."""
    if level != "info":
        return None
    return Step(
        "digest",
        "urgency.info",
        prefix + "info: no test, CI, deadline, block or finding hive can check makes it urgent; it goes to the digest",
    )


def channel_for(prefs: Prefs, level: str) -> str:
    """Where a delivered item goes: an alarm on the person's alarm channel, anything else on their channel."""
    return prefs.alarm_channel if level == "alarm" else prefs.channel


class Budget:
    """The budget step and what it spends from: attention items per person per local day, counted
    live and per shadow source, per source and per proposing session."""

    def __init__(self) -> None:
        self.spent: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)  # (person, day) -> counts

    def count(self, person: str, day: str, source: str, proposer: str, shadow: bool, n: int) -> None:
        counts = self.spent[(person, day)]
        counts[f"shadow:{source}" if shadow else "live"] += n
        counts[f"source:{source}"] += n
        if proposer:
            counts[f"proposer:{source}:{proposer}"] += n

    def take(self, entry: Entry, prefs: Prefs, now: float) -> tuple[bool, str, str]:
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
            return (
                False,
                "budget.share",
                (f"{item.source}'s share of the daily budget ({cap} of {prefs.budget}) is spent; digest"),
            )
        if item.proposer:
            theirs = counts[f"proposer:{item.source}:{item.proposer}"]
            part = prefs.proposer_cap(item.source)
            if theirs >= part:
                return (
                    False,
                    "budget.proposer",
                    (f"{item.proposer}'s part of {item.source}'s share ({part} of {cap}) is spent; digest"),
                )
        if total >= prefs.budget:
            return False, "budget.daily", f"the daily budget of {prefs.budget} attention items is spent; digest"
        self.count(item.person, day, item.source, item.proposer, entry.shadow, 1)
        entry.spent = day
        return True, "", f"budget: {item.source} {mine + 1} of {cap}, {total + 1} of {prefs.budget} today"

    def refund(self, entry: Entry) -> None:
        if entry.spent:
            self.count(entry.item.person, entry.spent, entry.item.source, entry.item.proposer, entry.shadow, -1)
            entry.spent = ""


# ---- words in reasons ----------------------------------------------------------------------


def span(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * HOUR:
        return f"{seconds / HOUR:.1f} h".replace(".0 h", " h")
    return f"{seconds / DAY:.0f} days"


def when(prefs: Prefs, at: float, now: float) -> str:
    # Reasons name times to the minute, and a batch of decisions names the same few minutes:
    # formatted once per (zone, minute, minute of now).
    key = (prefs.timezone, int(at // 60), int(now // 60))
    found = _WHEN.get(key)
    if found is None:
        if len(_WHEN) > 4096:
            _WHEN.clear()
        local = prefs.local(at)
        found = _WHEN[key] = (
            local.strftime("%H:%M") if local.date() == prefs.local(now).date() else local.strftime("%Y-%m-%d %H:%M")
        )
    return found


_WHEN: dict[tuple[str, int, int], str] = {}


def quiet_text(prefs: Prefs) -> str:
    return f"{format_quiet(prefs.quiet)} {prefs.timezone}"
