"""The gate's pieces on their own: preferences in config.toml, quiet hours and days in a zone, budgets, fingerprints.

Everything here is real: files on disk, a real database where the gate needs one.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from pathlib import Path

import pytest

from hive.sidecar.base.errors import BadRequest, HiveError
from hive.sidecar.base.store import Store
from hive.sidecar.gate.engine import Decision, Evidence, Fact, Gate, Item, fact_urgency
from hive.sidecar.gate.prefs import GateConfig, PrefsFile, parse_change, write_changes

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def berlin(*args: int) -> float:
    return dt.datetime(*args, tzinfo=BERLIN).timestamp()  # type: ignore[misc]


HAND_WRITTEN = """# my hive
person = "alice"   # that's me

[sidecar]
session_ttl = 7200

[gate]
budget = 10        # the team's default

[gate.people.alice]
# I start late
quiet = "23:00-09:30"
mute = ["lesson"]

[gate.people.bob]
budget = 2
"""


def test_a_change_is_written_into_the_persons_table_and_every_comment_stays(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(HAND_WRITTEN, encoding="utf-8")
    prefs = PrefsFile(path)
    changes = [
        parse_change("budget", "6"),
        parse_change("mute.lesson", "off"),
        parse_change("mute.review", True),
        parse_change("share.notify", 0.1),
        parse_change("live.deps", "on"),
        parse_change("quiet", "default"),
    ]
    write_changes(path, "alice", changes, prefs.prefs("alice"))
    prefs.reload()
    alice = prefs.prefs("alice")
    written = path.read_text(encoding="utf-8")

    assert (alice.budget, alice.quiet, alice.mute, alice.shares["notify"]) == (6, None, frozenset({"review"}), 0.1)
    # overlap, notify, lesson and review start live; deps was promoted
    assert alice.live == frozenset({"overlap", "notify", "lesson", "review", "deps"})
    assert prefs.prefs("bob").budget == 2 and prefs.prefs("carol").budget == 10
    for line in (
        "# my hive",
        'person = "alice"   # that\'s me',
        "budget = 10        # the team's default",
        "# I start late",
        "[gate.people.bob]\nbudget = 2",
    ):
        assert line in written
    assert "[gate.people.alice.shares]\nnotify = 0.1" in written


def test_a_new_file_gets_the_persons_table_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    write_changes(path, "alice", [parse_change("budget", 3)], PrefsFile(path).prefs("alice"))
    assert path.read_text(encoding="utf-8") == "[gate.people.alice]\nbudget = 3\n"
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("budget", "-1"),
        ("budget", 2.5),
        ("budget", True),
        ("budget", "1001"),
        ("quiet", "22-8"),
        ("quiet", "08:00-08:00"),
        ("timezone", "Mars/Olympus"),
        ("alarms", "maybe"),
        ("channel", "email"),
        ("alarm_channel", "digest"),
        ("share.notify", 1.5),
        ("share.Bad Name", 0.1),
        ("volume", 11),
        ("mute", True),
    ],
)
def test_a_change_that_does_not_fit_is_refused_with_the_reason(key: str, value: object) -> None:
    with pytest.raises(BadRequest):
        parse_change(key, value)


def test_a_hand_edited_typo_keeps_its_default_and_is_reported_not_fatal() -> None:
    config = GateConfig.from_toml(
        {
            "gate": {
                "window": "a day",
                "people": {
                    "alice": {
                        "budget": "lots",
                        "quiet": "late",
                        "timezone": "UTC",
                        "mute": "lesson",
                        "shares": {"notify": 7},
                    }
                },
            }
        }
    )
    alice = config.prefs("alice")
    assert (alice.budget, alice.quiet, alice.timezone, alice.mute) == (12, None, "UTC", frozenset())
    assert alice.shares["notify"] == 0.25
    assert len(alice.problems) == 5 and any("gate.window" in p for p in alice.problems)


def test_quiet_hours_wrap_midnight_and_end_by_the_wall_clock_across_a_dst_change() -> None:
    prefs = GateConfig.from_toml({"gate": {"timezone": "Europe/Berlin", "quiet": "22:00-08:00"}}).prefs("alice")
    assert prefs.quiet_until(berlin(2026, 3, 2, 21, 59)) is None
    assert prefs.quiet_until(berlin(2026, 3, 2, 22, 0)) == berlin(2026, 3, 3, 8, 0)
    assert prefs.quiet_until(berlin(2026, 3, 3, 7, 59)) == berlin(2026, 3, 3, 8, 0)
    assert prefs.quiet_until(berlin(2026, 3, 3, 8, 0)) is None
    # Clocks go forward on 29 March 2026: the night is an hour shorter, the end is still 08:00.
    assert prefs.quiet_until(berlin(2026, 3, 28, 23, 0)) == berlin(2026, 3, 29, 8, 0)
    assert berlin(2026, 3, 29, 8, 0) - berlin(2026, 3, 28, 23, 0) == 8 * 3600
    # A day is the person's local day: 23:30 UTC on the 2nd is already the 3rd in Berlin.
    assert prefs.day(dt.datetime(2026, 3, 2, 23, 30, tzinfo=dt.UTC).timestamp()) == "2026-03-03"


def test_shares_divide_the_budget_and_every_source_may_spend_at_least_one() -> None:
    prefs = GateConfig.from_toml({"gate": {"budget": 10, "shares": {"notify": 0.5, "lesson": 0.01}}}).prefs("a")
    assert (prefs.cap("notify"), prefs.cap("lesson"), prefs.cap("other")) == (5, 1, 2)
    assert prefs.proposer_cap("notify") == 2
    assert GateConfig.from_toml({"gate": {"budget": 0}}).prefs("a").cap("notify") == 0


def test_a_fingerprint_ignores_wording_when_a_key_or_evidence_names_the_thing() -> None:
    ci = (Evidence("ci", "acme/api@main"),)
    assert (
        Item("notify", "alice", "CI broke", evidence=ci).fingerprint
        == Item("notify", "alice", "URGENT: CI broke!!!", evidence=ci).fingerprint
    )
    assert Item("overlap", "alice", "a", key="k").fingerprint == Item("overlap", "alice", "b", key="k").fingerprint
    assert (
        Item("overlap", "alice", "Bob edits auth.py").fingerprint
        == Item("overlap", "alice", "bob edits auth.py!").fingerprint
    )
    assert Item("overlap", "alice", "a", key="k").fingerprint != Item("overlap", "bob", "a", key="k").fingerprint
    assert Item("overlap", "alice", "a", key="k").fingerprint != Item("lesson", "alice", "a", key="k").fingerprint


def test_urgency_comes_from_the_records_rules() -> None:
    now = 1_000_000.0
    assert fact_urgency(Fact("ci", "x", "failing", now - 60, now), now)[0] == "attention"
    assert fact_urgency(Fact("ci", "x", "failing", now - 60, now, runs=3), now) == (
        "alarm",
        "ci x failed 3 runs in a row",
    )
    assert fact_urgency(Fact("test", "x", "failing", now - 5 * 3600, now), now)[0] == "alarm"
    assert fact_urgency(Fact("ci", "x", "passing", now, now), now)[0] == "info"
    assert fact_urgency(Fact("deadline", "x", "open", now, now, due=now + 2 * 3600), now)[0] == "attention"
    assert fact_urgency(Fact("deadline", "x", "open", now, now, due=now + 1800), now)[0] == "alarm"
    assert fact_urgency(Fact("deadline", "x", "open", now, now, due=now - 1), now)[0] == "alarm"
    assert fact_urgency(Fact("deadline", "x", "done", now, now, due=now - 1), now)[0] == "info"
    assert fact_urgency(Fact("deadline", "x", "open", now, now, due=now + 3 * 86400), now)[0] == "info"
    assert fact_urgency(Fact("blocked", "bob/web", "blocked", now, now), now)[0] == "attention"
    assert fact_urgency(Fact("security", "GHSA-1", "open", now, now), now)[0] == "alarm"


@pytest.mark.anyio
async def test_one_proposing_session_cannot_spend_its_whole_sources_share(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[gate]\nbudget = 8\nlive = ["notify"]\nshares = { notify = 0.5 }\n', encoding="utf-8"
    )
    store = await Store.open(tmp_path / "hive.db")
    try:
        gate = Gate(store, PrefsFile(tmp_path / "config.toml"), clock=lambda: 1_772_438_400.0)
        await gate.load()
        await gate.record("ci", "acme/api@main", "failing")
        ci = (Evidence("ci", "acme/api@main"),)
        loud = [
            await gate.offer(Item("notify", "alice", f"n{n}", key=f"a{n}", proposer="alice/loud", evidence=ci))
            for n in range(3)
        ]
        other = await gate.offer(
            Item("notify", "alice", "from another session", key="b", proposer="alice/quiet", evidence=ci)
        )
    finally:
        await store.close()
    # notify may spend 4 of 8; one proposer at most half of that.
    assert [d.outcome for d in loud] == ["wait", "wait", "digest"]
    assert loud[2].rule == "budget.proposer"
    assert loud[2].reason == "alice/loud's part of notify's share (2 of 4) is spent; digest"
    assert other.outcome == "wait"


@pytest.mark.anyio
async def test_a_sources_own_deliverer_shows_its_items_and_a_failed_delivery_lands_in_the_digest(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.toml").write_text('[gate]\nlive = ["overlap", "notify"]\n', encoding="utf-8")
    store = await Store.open(tmp_path / "hive.db")
    shown: list[tuple[str, str]] = []

    async def overlap(item: Item, decision: Decision) -> None:
        shown.append((item.title, decision.rule))

    async def broken(item: Item, decision: Decision) -> None:
        raise HiveError("the notification server went away")

    try:
        gate = Gate(store, PrefsFile(tmp_path / "config.toml"), clock=lambda: 1_772_438_400.0, deliver=broken)
        await gate.load()
        gate.register("overlap", overlap)
        await gate.record("security", "GHSA-9", "open")
        floor = (Evidence("security", "GHSA-9"),)
        mine = await gate.offer(Item("overlap", "alice", "two sessions on auth.py", evidence=floor))
        lost = await gate.offer(Item("notify", "alice", "a pop-up that cannot show", evidence=floor))
        why = await gate.why(lost.item_id)
        digest = await gate.digest("alice")
    finally:
        await store.close()
    assert shown == [("two sessions on auth.py", "floor.security")] and mine.outcome == "deliver"
    assert (lost.outcome, lost.rule) == ("digest", "deliver.failed")
    assert lost.reason == "delivery on popup failed (the notification server went away); in the digest instead"
    assert [d["outcome"] for d in why["items"][0]["decisions"]] == ["deliver", "digest"]
    assert [i["title"] for g in digest["groups"] for i in g["items"]] == ["a pop-up that cannot show"]


@pytest.mark.anyio
async def test_a_floor_passes_mutes_digest_only_quiet_hours_and_shadow_and_is_told_once(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[gate.people.alice]\ntimezone = "UTC"\nquiet = "00:00-23:59"\nchannel = "digest"\nmute = ["scanner"]\n',
        encoding="utf-8",
    )
    store = await Store.open(tmp_path / "hive.db")
    try:
        gate = Gate(store, PrefsFile(tmp_path / "config.toml"), clock=lambda: 1_772_438_400.0)
        await gate.load()
        await gate.record("security", "GHSA-9@acme/api", "open")
        finding = Item(
            "scanner", "alice", "a signing key is committed", evidence=(Evidence("security", "GHSA-9@acme/api"),)
        )
        first = await gate.offer(finding)
        again = await gate.offer(finding)
        unchecked = await gate.offer(
            Item(
                "scanner", "alice", "SECURITY: another finding, trust me", evidence=(Evidence("security", "GHSA-404"),)
            )
        )
    finally:
        await store.close()
    assert (first.outcome, first.rule, first.channel) == ("deliver", "floor.security", "popup")
    assert first.reason == "a security finding always reaches its owner: security finding GHSA-9@acme/api is open"
    assert (again.outcome, again.rule) == ("silence", "duplicate")
    assert (unchecked.outcome, unchecked.rule) == ("silence", "pref.mute")  # no record of it: no floor


@pytest.mark.anyio
async def test_with_alarms_off_an_alarm_waits_for_a_breakpoint_on_its_shorter_bound_off_budget(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        "[gate]\nhold_alarm = 120\n[gate.people.alice]\nalarms = false\nbudget = 0\n", encoding="utf-8"
    )
    store = await Store.open(tmp_path / "hive.db")
    now = [1_772_438_400.0]
    try:
        gate = Gate(store, PrefsFile(tmp_path / "config.toml"), clock=lambda: now[0])
        await gate.load()
        await gate.record("deadline", "release-2.0", "open", due=now[0] - 60)
        waiting = await gate.offer(
            Item("overlap", "alice", "the release is late", evidence=(Evidence("deadline", "release-2.0"),))
        )
        now[0] += 120
        [delivered] = await gate.wake()
    finally:
        await store.close()
    assert (waiting.urgency, waiting.outcome, waiting.due) == ("alarm", "wait", 1_772_438_400.0 + 120)
    assert waiting.reason.startswith(
        "alarm (deadline release-2.0 passed 60 s ago) with alarms off: waits for a breakpoint"
    )
    assert (delivered.rule, delivered.channel) == ("max-hold", "popup")


@pytest.mark.anyio
async def test_a_held_item_about_a_record_with_a_non_ascii_name_is_marked_as_mattering_when_it_escalates(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.toml").write_text("[gate]\nbudget = 0\n", encoding="utf-8")
    store = await Store.open(tmp_path / "hive.db")
    try:
        gate = Gate(store, PrefsFile(tmp_path / "config.toml"), clock=lambda: 1_772_438_400.0)
        await gate.load()
        ref = "équipe/api@main"
        await gate.record("ci", ref, "failing")
        held = await gate.offer(Item("overlap", "alice", "ci is red", evidence=(Evidence("ci", ref),)))
        for _ in range(2):
            await gate.record("ci", ref, "failing")  # the third failing run in a row: an alarm
        measures = await gate.measures("alice", since=0)
    finally:
        await store.close()
    assert (held.outcome, held.rule) == ("digest", "budget.share")
    assert measures["held_mattered"] == 1
