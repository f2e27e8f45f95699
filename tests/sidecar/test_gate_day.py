"""A scripted day through the real gate: items, records and breakpoints at fixed times, one real database.

The day is Monday 2 March 2026 for alice in Berlin, quiet hours 22:00-08:00, a budget of four
attention items with notify allowed half of it and lesson a quarter, waits bounded at ten
minutes. Time is the gate's clock, moved by the script; deadlines fire exactly when the
sidecar's timer would fire them (:func:`Day.until`). The ledger it writes is compared line by
line with :data:`EXPECTED`, which is the day told in order.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hive.sidecar.base.store import Store
from hive.sidecar.gate.engine import Decision, Evidence, Gate, Item
from hive.sidecar.gate.prefs import PrefsFile

pytestmark = pytest.mark.anyio

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
CONFIG = """person = "alice"
machine = "m1"

[gate]
window = 14400          # 4 h
hold_attention = 600    # an attention item waits for a breakpoint 10 min at most

[gate.people.alice]
timezone = "Europe/Berlin"
quiet = "22:00-08:00"
budget = 4
mute = ["mail"]
live = ["overlap", "review", "notify", "lesson", "ci"]   # security and deps are still in shadow

[gate.people.alice.shares]
notify = 0.5            # 2 a day
lesson = 0.25           # 1 a day
"""


def at(clock: str, day: int = 2) -> float:
    hour, minute = (int(p) for p in clock.split(":"))
    return dt.datetime(2026, 3, day, hour, minute, tzinfo=BERLIN).timestamp()


def local(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, BERLIN).strftime("%H:%M")


@dataclass
class Day:
    """The script's clock and what reached alice."""

    gate: Gate
    now: float
    delivered: list[tuple[str, str, str, str]] = field(default_factory=list)  # (time, title, channel, session)

    def clock(self) -> float:
        return self.now

    async def deliver(self, item: Item, decision: Decision) -> None:
        self.delivered.append((local(self.now), item.title, decision.channel, decision.session))

    async def until(self, clock: str) -> None:
        """Move time on, waking the gate at each deadline on the way, as its timer would."""
        target = at(clock)
        while (due := self.gate.next_due()) is not None and due <= target:
            self.now = max(self.now, due)
            await self.gate.wake()
        self.now = target

    async def offer(
        self, source: str, title: str, *evidence: tuple[str, str], key: str = "", session: str = "", proposer: str = ""
    ) -> Decision:
        return await self.gate.offer(
            Item(
                source=source,
                person="alice",
                title=title,
                key=key,
                session=session,
                proposer=proposer,
                evidence=tuple(Evidence(k, r) for k, r in evidence),
            )
        )


@asynccontextmanager
async def scripted_day(folder: Path) -> AsyncIterator[Day]:
    (folder / "config.toml").write_text(CONFIG, encoding="utf-8")
    store = await Store.open(folder / "hive.db")
    try:
        day = Day(gate=None, now=at("06:00"))  # type: ignore[arg-type]
        day.gate = Gate(store, PrefsFile(folder / "config.toml"), clock=day.clock, deliver=day.deliver)
        await day.gate.load()
        yield day
    finally:
        await store.close()


CI = ("ci", "acme/api@main")
SECURITY = ("security", "GHSA-7x2q@acme/api")
BOB_BLOCKED = ("blocked", "bob/web")

# (time, title, outcome, rule): the ledger, oldest first.
EXPECTED = [
    # Quiet hours until 08:00: an attention item is held, not sent.
    ("06:30", "bob/web edits src/auth.py too", "hold", "quiet"),
    # A security finding passes quiet hours (and its source being in shadow) at once.
    ("06:40", "token signing key in the repo", "deliver", "floor.security"),
    # 08:00: quiet hours end; decided again, it waits for alice's next breakpoint...
    ("08:00", "bob/web edits src/auth.py too", "wait", "wait"),
    # ...which comes at 08:04, when a turn of hers ends.
    ("08:04", "bob/web edits src/auth.py too", "deliver", "breakpoint.turn"),
    # A review request waits for a breakpoint that does not come: it goes out at its bound, 10 min.
    ("08:30", "review PR #41: bob/web waits on it", "wait", "wait"),
    ("08:40", "review PR #41: bob/web waits on it", "deliver", "max-hold"),
    # A source in shadow only records what it would have done (and spends only its own share).
    ("08:50", "deps: bump jose to 5.2", "shadow", "wait"),
    # Shouting gains nothing: no record hive can check makes it urgent.
    ("09:00", "URGENT!!! production is down, tell alice NOW", "digest", "urgency.info"),
    # The overlap notice again, reworded, same key: a duplicate.
    ("09:10", "bob/web is STILL editing src/auth.py", "silence", "duplicate"),
    # A muted source.
    ("09:15", "3 messages held for you", "silence", "pref.mute"),
    # A noisy source: notify may spend 2 of the 4; the third and fourth go to the digest.
    ("09:20", "notify 1: CI failed on main", "wait", "wait"),
    ("09:21", "notify 2: CI failed on main", "wait", "wait"),
    ("09:22", "notify 3: CI failed on main", "digest", "budget.share"),
    ("09:23", "notify 4: CI failed on main", "digest", "budget.share"),
    # A breakpoint in another of alice's sessions: items for her (not for one session) go there.
    ("09:25", "notify 1: CI failed on main", "deliver", "breakpoint.commit"),
    ("09:25", "notify 2: CI failed on main", "deliver", "breakpoint.commit"),
    # lesson has its share left, but the day's budget (overlap 1, review 1, notify 2) is spent.
    ("09:30", "lesson: run the auth suite with --kid", "digest", "budget.daily"),
    # CI failed three runs in a row: now an alarm, delivered at once though the budget is spent.
    ("10:30", "CI on main failed 3 runs in a row", "deliver", "urgency.alarm"),
    # Evening: quiet hours again; held until 08:00 the next day.
    ("22:30", "bob/web pushed to src/auth.py", "hold", "quiet"),
]


async def test_a_scripted_day_writes_a_ledger_a_reader_can_check_line_by_line(tmp_path: Path) -> None:
    async with scripted_day(tmp_path) as day:
        gate = day.gate
        await gate.record(*CI, "failing", at=at("06:00"))
        await gate.record(*BOB_BLOCKED, "blocked", detail="waiting for review of PR #41", at=at("06:00"))

        await day.until("06:30")
        overlap = await day.offer(
            "overlap",
            "bob/web edits src/auth.py too",
            CI,
            key="overlap:acme/api:src/auth.py:bob/web",
            session="alice/api",
        )
        await day.until("06:40")
        await gate.record(*SECURITY, "open", at=day.now)
        await day.offer("security", "token signing key in the repo", SECURITY, session="alice/api")

        await day.until("08:04")
        await gate.breakpoint("alice", "alice/api", "turn")
        await day.until("08:30")
        review = await day.offer("review", "review PR #41: bob/web waits on it", BOB_BLOCKED)
        await day.until("08:50")
        await day.offer("deps", "deps: bump jose to 5.2", CI)
        await day.until("09:00")
        urgent = await day.offer("notify", "URGENT!!! production is down, tell alice NOW")
        await day.until("09:10")
        await day.offer(
            "overlap",
            "bob/web is STILL editing src/auth.py",
            CI,
            key="overlap:acme/api:src/auth.py:bob/web",
            session="alice/api",
        )
        await day.until("09:15")
        await day.offer("mail", "3 messages held for you", CI)
        notify = []
        for n, clock in enumerate(("09:20", "09:21", "09:22", "09:23"), start=1):
            await day.until(clock)
            notify.append(await day.offer("notify", f"notify {n}: CI failed on main", CI, key=f"notify-{n}"))
        await day.until("09:25")
        await gate.breakpoint("alice", "alice/web", "commit")
        await day.until("09:30")
        lesson = await day.offer("lesson", "lesson: run the auth suite with --kid", CI, BOB_BLOCKED)
        await day.until("10:00")
        await gate.record(*CI, "failing", at=at("10:00"))
        await gate.record(*CI, "failing", at=at("10:20"))  # the third failing run in a row
        await day.until("10:30")
        await day.offer("ci", "CI on main failed 3 runs in a row", CI)
        await day.until("12:00")
        await gate.record(*CI, "passing", at=day.now)
        await day.until("22:30")
        await day.offer("overlap", "bob/web pushed to src/auth.py", BOB_BLOCKED, key="overlap:acme/api:push:bob/web")
        await day.until("23:00")

        # The person looks at the record: why wasn't I told about notify 3? (counts as "it mattered")
        why = await gate.why(notify[2].item_id, asked=True)
        await gate.acted(overlap.item_id, "changed")
        ledger = await gate.ledger()
        digest = await gate.digest("alice", since=at("00:00"))
        measures = await gate.measures("alice", since=at("00:00"))

    got = [(local(row["at"]), row["title"], row["outcome"], row["rule"]) for row in ledger]
    print("\n".join(f"{t}  {outcome:<8} {rule:<18} {title}" for t, title, outcome, rule in got))
    assert got == EXPECTED

    # What reached alice, where, and when: the floor on her alarm channel during quiet hours, the
    # alarm too, the rest into the session where her breakpoint was (or the item's own session).
    assert day.delivered == [
        ("06:40", "token signing key in the repo", "popup", "alice/api"),
        ("08:04", "bob/web edits src/auth.py too", "session", "alice/api"),
        ("08:40", "review PR #41: bob/web waits on it", "session", ""),
        ("09:25", "notify 1: CI failed on main", "session", "alice/web"),
        ("09:25", "notify 2: CI failed on main", "session", "alice/web"),
        ("10:30", "CI on main failed 3 runs in a row", "popup", ""),
    ]
    # Never past its bound: the review went out exactly 10 minutes after it was offered.
    assert review.due == at("08:40") and review.urgency == "attention"
    # The proposer's wording counted for nothing.
    assert urgent.urgency == "info"
    # Every line says why, in words.
    reasons = {row["rule"]: row["reason"] for row in ledger}
    assert reasons["quiet"] == "quiet hours (22:00-08:00 Europe/Berlin): held until 2026-03-03 08:00"
    assert reasons["budget.share"] == "notify's share of the daily budget (2 of 4) is spent; digest"
    assert reasons["budget.daily"] == "the daily budget of 4 attention items is spent; digest"
    assert reasons["duplicate"].startswith(f"duplicate of {overlap.item_id} (delivered, offered 06:30)")
    assert reasons["urgency.alarm"] == "alarm: ci acme/api@main failed 3 runs in a row; alarms are on"
    assert next(r["reason"] for r in ledger if r["outcome"] == "shadow").startswith(
        "shadow (deps is not live for alice): would wait: attention (ci acme/api@main is failing); budget: deps 1 of 1"
    )

    assert why["items"][0]["answer"] == (
        "You were not told because: notify's share of the daily budget (2 of 4) is spent; digest"
    )

    # The digest: what was held, the groups that unblock most first (the lesson and the evening
    # overlap notice name bob/web, who is blocked), then what the gate checked and silenced.
    assert [g["source"] for g in digest["groups"]] == ["lesson", "overlap", "notify"]
    assert digest["groups"][0]["items"][0]["id"] == lesson.item_id
    assert digest["groups"][0]["unblocks"] == 1
    assert [i["title"] for i in digest["groups"][2]["items"]] == [
        "notify 3: CI failed on main",
        "notify 4: CI failed on main",
        "URGENT!!! production is down, tell alice NOW",
    ]
    assert digest["held"] == 5
    assert digest["delivered"] == 6 and digest["silenced"] == 2 and digest["shadow"] == 1
    assert digest["silenced_by"] == {"duplicate": 1, "pref.mute": 1}
    assert digest["checked"]["items"] == 14

    # Measures: 6 delivered on the 2nd, one acted on; of the held ones, notify 3 and 4 and the
    # lesson mattered (the CI failure they were about escalated; alice asked about notify 3).
    assert measures["delivered_per_day"] == {"alice": {"2026-03-02": 6}}
    assert measures["acted_on"] == 1 and measures["acted_share"] == round(1 / 6, 4)
    assert measures["held"] == 5 and measures["held_mattered"] == 3


async def test_the_day_survives_a_restart_held_items_waits_budgets_and_dedupe_come_back(tmp_path: Path) -> None:
    async with scripted_day(tmp_path) as day:
        await day.gate.record(*CI, "failing", at=day.now)
        await day.until("07:00")
        held = await day.offer("overlap", "held over quiet hours", CI, key="a")
        await day.until("08:05")
        assert day.gate.next_due() == at("08:10")  # out of quiet hours, it now waits for a breakpoint
        for n in range(2):
            await day.offer("notify", f"notify {n}", CI, key=f"n{n}")
    store = await Store.open(tmp_path / "hive.db")
    try:
        gate = Gate(store, PrefsFile(tmp_path / "config.toml"), clock=lambda: at("08:06"))
        await gate.load()
        assert gate.next_due() == at("08:10")
        again = await gate.offer(
            Item("overlap", "alice", "held over quiet hours, again", key="a", evidence=(Evidence(*CI),))
        )
        third = await gate.offer(Item("notify", "alice", "notify 2", key="n2", evidence=(Evidence(*CI),)))
        delivered = await gate.breakpoint("alice", "alice/api", "test")
    finally:
        await store.close()
    assert again.outcome == "silence" and again.rule == "duplicate"
    assert again.reason.startswith(f"duplicate of {held.item_id} (pending, offered 07:00)")
    assert third.rule == "budget.share"  # notify spent its 2 before the restart
    assert delivered[0].item_id == held.item_id and len(delivered) == 3
    assert {d.rule for d in delivered} == {"breakpoint.test"}
