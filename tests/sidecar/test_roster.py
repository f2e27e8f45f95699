"""The signed roster: convergence whatever the delivery, every refusal rule, tickets."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hive.sidecar.team import roster
from hive.sidecar.team.identity import Identity
from hive.sidecar.team.records import Invite, JoinRequest, Member, Signed, secret_hash, sign, verify
from hive.sidecar.team.roster import admit, departures, found, new_invite, new_link, self_update, view
from hive.sidecar.team.roster_state import Entry, TeamState, absorb, entries, merge, validated, without_secrets
from hive.sidecar.team.tickets import Ticket, decode_ticket, encode_ticket

T0 = 1_700_000_000_000  # a fixed clock, in ms (in the past: real-clock checks pass too)
DAY = 86_400_000
KEYS = [Identity.generate() for _ in range(7)]
FOUNDER = KEYS[0]
a, b, c = KEYS[0], KEYS[1], KEYS[2]
PEOPLE = ["alice", "bob", "carol", "dave"]


def join(
    state: TeamState,
    inviter: Identity,
    joiner: Identity,
    person: str,
    machine: str,
    now: int,
    own_machine: bool = False,
) -> TeamState:
    state, secret = new_invite(state, inviter, own_machine=own_machine, now=now)
    request = JoinRequest(secret=secret, key=joiner.key_id, person=person, machine=machine, ts=now)
    return admit(state, inviter, request, secret_hash(secret), now=now)


def team_of_three(now: int = T0) -> TeamState:
    """alice@m1 (a, the founder) invites bob@desk (b), who invites carol@laptop (c)."""
    state = found(a, "acme", "alice", "m1", now=now)
    state = join(state, a, b, "bob", "desk", now + 1)
    return join(state, b, c, "carol", "laptop", now + 2)


def through_link(state: TeamState, body: Member) -> Member:
    """An admission body that redeems the team link, as one a member machine signs on a join."""
    assert state.link is not None
    return dataclasses.replace(body, redeems=secret_hash(state.link.body.secret))


def member_entry(signer: Identity, team_id: str, body: Member) -> Entry:
    return Entry("member", sign(signer, team_id, "member", body))


def skeleton(state: TeamState) -> TeamState:
    return TeamState(id=state.id, founder=state.founder)


def absorb_all(state: TeamState, made: Iterable[Entry], now: int) -> TeamState:
    return absorb(state, made, now)[0]


# ---- convergence ------------------------------------------------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "join",
                "join",
                "join",
                "join_own",
                "remove",
                "leave",
                "update",
                "self_return",
                "theft",
                "readmit",
                "link",
                "invite",
                "forge",
                "other_team",
                "future",
            ]
        ),
        st.integers(0, len(KEYS) - 1),
        st.integers(0, len(KEYS) - 1),
        st.integers(0, len(PEOPLE) - 1),
        st.integers(0, 3),  # clock step: 0 makes timestamp ties
    ),
    max_size=24,
)


def simulate(ops: list[tuple[str, int, int, int, int]]) -> tuple[TeamState, list[Entry], int]:
    """Play a team's history; return its genesis, every entry anyone made (good or bad) and the end time."""
    now = T0
    state = found(FOUNDER, "acme", "alice", "m1", now=now)
    genesis = state
    made: dict[str, Entry] = {}
    other_team = found(KEYS[-1], "evil", "mallory", "x", now=now)

    def keep(s: TeamState) -> None:
        for e in entries(s):
            made.setdefault(e.signed.sig, e)

    keep(state)
    for kind, i, j, p, step in ops:
        now += step
        current = view(state, now)
        # The actor is usually an active member (index i among them), sometimes anyone at all.
        active = [k for k in KEYS if current.is_active(k.key_id)]
        actor = active[i % len(active)] if active and i < len(KEYS) - 1 else KEYS[i]
        target = KEYS[j]
        actor_active = current.is_active(actor.key_id)
        m = current.members.get(target.key_id)
        person = PEOPLE[p]
        if kind in ("join", "join_own") and actor_active and target.key_id not in current.members:
            own = kind == "join_own"
            who = current.members[actor.key_id].person if own else person
            if own or not current.holder_person(who):
                state = join(state, actor, target, who, f"m{j}", now, own_machine=own)
        elif kind == "remove" and actor_active and m is not None and m.active and target is not actor:
            state = new_link(departures(state, actor, [target.key_id], now=now), actor, now=now)
        elif kind == "leave" and actor_active:
            state = departures(state, actor, [actor.key_id], now=now)
        elif kind == "update" and actor_active:
            state = self_update(state, actor, addresses=[f"10.0.0.{p}:4433"], now=now)
        elif kind == "self_return" and m is not None:
            body = Member(key=target.key_id, person=m.person, machine=m.machine, ts=roster.next_ts(state, m.key, now))
            state = absorb_all(state, [member_entry(target, state.id, body)], now)
        elif kind == "theft" and actor_active:
            ts = roster.next_ts(state, target.key_id, now)
            body = Member(key=target.key_id, person=person, machine=f"t{j}", ts=ts)
            state = absorb_all(state, [member_entry(actor, state.id, body)], now)
        elif kind == "readmit" and actor_active and m is not None and not m.active:
            body = dataclasses.replace(
                Member(key=m.key, person=m.person, machine=m.machine, ts=0), ts=roster.next_ts(state, m.key, now)
            )
            state = absorb_all(state, [member_entry(actor, state.id, body)], now)
        elif kind == "link" and actor_active:
            state = new_link(state, actor, now=now)
        elif kind == "invite" and actor_active:
            state, _ = new_invite(state, actor, now=now, ttl_ms=step * 1000)
        elif kind in ("forge", "other_team", "future"):
            body = Member(key=target.key_id, person=person, machine="x", ts=now + (2 * DAY if kind == "future" else 0))
            signed = sign(actor, other_team.id if kind == "other_team" else state.id, "member", body)
            if kind == "forge":
                signed = dataclasses.replace(signed, raw={**signed.raw, "person": "forged"})
            made.setdefault(signed.sig + kind, Entry("member", signed))
        keep(state)
    return genesis, list(made.values()), now


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, data=st.data())
def test_roster_entries_in_any_order_duplicated_or_partly_missing_converge_on_every_machine(
    ops: list[tuple[str, int, int, int, int]], data: st.DataObject
) -> None:
    genesis, made, now = simulate(ops)
    base = skeleton(genesis)
    machines: list[TeamState] = []
    delivered: list[list[Entry]] = []
    for _ in range(3):
        # Each machine gets some of the entries (some twice, in any order), in batches of any size.
        # Drawn as plain numbers: how many entries a history makes can differ between replays of one
        # example (fresh link secrets break timestamp ties differently), and hypothesis needs the
        # same draws each time.
        picks = data.draw(st.lists(st.integers(0, 2**16), max_size=2 * 24 * 3))
        chosen = [made[i % len(made)] for i in picks][: 2 * len(made)]
        cuts = sorted(c % (len(chosen) + 1) for c in data.draw(st.lists(st.integers(0, 2**16), max_size=4)))
        state = base
        for start, end in zip([0, *cuts], [*cuts, len(chosen)], strict=True):
            state = absorb_all(state, chosen[start:end], now)
        # Order, duplication and batching do not matter: the same entries at once give the same state.
        assert state == absorb_all(base, chosen, now)
        machines.append(state)
        delivered.append(chosen)

    # Merging is commutative and idempotent.
    first, second = machines[0], machines[1]
    assert merge(first, second, now)[0] == merge(second, first, now)[0]
    assert merge(first, first, now)[0] == first

    # Gossip in any order until nothing changes: every machine ends with the same state and roster.
    order = data.draw(st.permutations([(i, j) for i in range(3) for j in range(3) if i != j]))
    for _ in range(2):
        for i, j in order:
            machines[i] = merge(machines[i], machines[j], now)[0]
    union = absorb_all(base, [e for chosen in delivered for e in chosen], now)
    assert all(m == union for m in machines)
    assert len({json.dumps(m.to_wire(), sort_keys=True) for m in machines}) == 1
    views = [view(m, now) for m in machines]
    assert all(v == views[0] for v in views)

    # What every peer would send survives the wire unchanged.
    assert validated(json.loads(json.dumps(union.to_wire())), now)[0] == union


def test_a_full_history_converges_to_the_authors_own_state() -> None:
    genesis, made, now = simulate(
        [
            ("join", 0, 1, 1, 1),
            ("join_own", 1, 2, 0, 1),
            ("remove", 0, 2, 0, 1),
            ("leave", 1, 1, 0, 1),
            ("readmit", 0, 1, 0, 1),
            ("update", 1, 0, 2, 1),
        ]
    )
    state = absorb_all(skeleton(genesis), reversed(made), now)
    roster_view = view(state, now)
    assert roster_view.is_active(KEYS[1].key_id)
    assert roster_view.members[KEYS[1].key_id].addresses == ("10.0.0.2:4433",)
    assert roster_view.status(KEYS[2].key_id) == "removed"


# ---- refusals ---------------------------------------------------------------------------------


def refusals(state: TeamState, made: list[Entry], now: int = T0 + 10) -> list[str]:
    return [r.reason for r in absorb(state, made, now)[1]]


def test_a_forged_signature_is_refused() -> None:
    state = team_of_three()
    body = Member(key=c.key_id, person="carol", machine="laptop", ts=T0 + 5, active=False)
    signed = sign(b, state.id, "member", body)
    forged = dataclasses.replace(signed, raw={**signed.raw, "person": "mallory"})
    assert "bad signature" in refusals(state, [Entry("member", forged)])[0]
    stolen = dataclasses.replace(signed, by=a.key_id)  # someone else's name on bob's signature
    assert "bad signature" in refusals(state, [Entry("member", stolen)])[0]
    assert view(absorb_all(state, [Entry("member", forged)], T0 + 10)).is_active(c.key_id)


def test_an_entry_signed_for_another_team_or_kind_is_refused() -> None:
    state = team_of_three()
    other = found(a, "other", "alice", "m1", now=T0)
    body = Member(key=c.key_id, person="carol", machine="laptop", ts=T0 + 5, active=False)
    assert "bad signature" in refusals(state, [Entry("member", sign(b, other.id, "member", body))])[0]
    assert "bad signature" in refusals(state, [Entry("member", sign(b, state.id, "admission", body))])[0]
    with pytest.raises(roster.WrongTeam):
        merge(state, other)


def test_an_entry_stamped_more_than_a_day_ahead_is_refused() -> None:
    state = team_of_three()
    now = T0 + 10
    late = Member(key=c.key_id, person="carol", machine="laptop", ts=now + DAY + 1, active=False)
    assert refusals(state, [member_entry(b, state.id, late)], now) == ["stamped more than a day in the future"]
    within = dataclasses.replace(late, ts=now + DAY)
    assert refusals(state, [member_entry(b, state.id, within)], now) == []


def test_a_machine_cannot_admit_itself() -> None:
    state = team_of_three()
    stranger = KEYS[5]
    body = Member(key=stranger.key_id, person="eve", machine="x", ts=T0 + 5)
    assert refusals(state, [Entry("admission", sign(stranger, state.id, "admission", body))]) == [
        "a machine cannot admit itself"
    ]
    # Nor can it make itself a member without an admission from the chain.
    made = [member_entry(stranger, state.id, body)]
    assert view(absorb_all(state, made, T0 + 10)).status(stranger.key_id) == "stranger"


def test_an_admission_counts_only_through_a_chain_to_the_founder() -> None:
    state = team_of_three()
    outsider, newcomer = KEYS[5], KEYS[6]
    body = through_link(state, Member(key=newcomer.key_id, person="eve", machine="x", ts=T0 + 5))
    made = [Entry("admission", sign(outsider, state.id, "admission", body)), member_entry(outsider, state.id, body)]
    merged = absorb_all(state, made, T0 + 10)
    assert newcomer.key_id not in view(merged).depth
    # Once the outsider's own admission arrives, the chain reaches the founder and both count.
    admission = through_link(state, Member(key=outsider.key_id, person="olga", machine="y", ts=T0 + 4))
    merged = absorb_all(
        merged,
        [Entry("admission", sign(c, state.id, "admission", admission)), member_entry(c, state.id, admission)],
        T0 + 10,
    )
    assert view(merged).depth[newcomer.key_id] == 4
    assert view(merged).is_active(newcomer.key_id)


def test_a_machine_may_sign_its_departure_but_never_its_return() -> None:
    state = team_of_three()
    state = departures(state, c, [c.key_id], now=T0 + 10)
    assert view(state).status(c.key_id) == "removed"
    back = Member(key=c.key_id, person="carol", machine="laptop", ts=T0 + 20)
    state = absorb_all(state, [member_entry(c, state.id, back)], T0 + 30)
    assert view(state).status(c.key_id) == "removed"
    # Another member may bring it back; then its own updates count again.
    state = absorb_all(state, [member_entry(b, state.id, dataclasses.replace(back, ts=T0 + 40))], T0 + 50)
    assert view(state).is_active(c.key_id)
    state = self_update(state, c, addresses=["192.0.2.7:4433"], now=T0 + 60)
    assert view(state).members[c.key_id].addresses == ("192.0.2.7:4433",)


def test_a_self_return_signed_before_the_departure_arrived_still_does_not_count() -> None:
    state = team_of_three()
    removal = departures(state, b, [c.key_id], now=T0 + 10)
    sneaky = Member(key=c.key_id, person="carol", machine="laptop", ts=T0 + 20)
    early = absorb_all(state, [member_entry(c, state.id, sneaky)], T0 + 30)  # the return arrives first
    assert view(early).is_active(c.key_id)  # an ordinary update as far as this machine knows
    assert view(merge(early, removal, T0 + 30)[0]).status(c.key_id) == "removed"


def test_the_founder_s_first_entry_is_its_own_admission_and_it_cannot_return_either() -> None:
    state = team_of_three()
    assert view(state).members[a.key_id].signed_by == a.key_id
    state = departures(state, a, [a.key_id], now=T0 + 10)
    back = Member(key=a.key_id, person="alice", machine="m1", ts=T0 + 20)
    state = absorb_all(state, [member_entry(a, state.id, back)], T0 + 30)
    assert view(state).status(a.key_id) == "removed"


def test_a_removed_machine_s_later_signatures_do_not_count() -> None:
    state = team_of_three()
    state = departures(state, a, [c.key_id], now=T0 + 10)
    revenge = Member(key=b.key_id, person="bob", machine="desk", ts=T0 + 20, active=False)
    state = absorb_all(state, [member_entry(c, state.id, revenge)], T0 + 30)
    assert view(state).is_active(b.key_id)


def test_a_removed_machine_cannot_come_back_through_a_machine_it_admitted_after_its_removal() -> None:
    state = team_of_three()
    state = departures(state, a, [c.key_id], now=T0 + 10)
    helper = KEYS[5]
    admitted = through_link(state, Member(key=helper.key_id, person="helen", machine="h", ts=T0 + 20))
    made = [Entry("admission", sign(c, state.id, "admission", admitted)), member_entry(c, state.id, admitted)]
    back = Member(key=c.key_id, person="carol", machine="laptop", ts=T0 + 30)
    removed_only = absorb_all(state, made, T0 + 40)
    assert helper.key_id not in view(removed_only).depth  # signed after its removal: no admission
    state = absorb_all(state, [*made, member_entry(helper, state.id, back)], T0 + 40)
    assert view(state).status(c.key_id) == "removed"
    assert view(state).is_active(b.key_id)


def test_only_the_founder_s_own_person_removes_the_founder() -> None:
    state = team_of_three()
    by_bob = departures(state, b, [a.key_id], now=T0 + 10)
    assert view(by_bob).is_active(a.key_id)  # bob's removal of alice's founding machine does not count
    second = KEYS[4]
    state = join(state, a, second, "alice", "m2", T0 + 11, own_machine=True)
    by_alice = departures(state, second, [a.key_id], now=T0 + 20)
    assert view(by_alice).status(a.key_id) == "removed"
    left = departures(state, a, [a.key_id], now=T0 + 20)
    assert view(left).status(a.key_id) == "removed"  # and the founder may leave


def test_a_name_held_by_an_active_machine_cannot_be_taken_but_its_person_may_add_machines() -> None:
    state = team_of_three()
    thief, second = KEYS[4], KEYS[5]
    # bob's machine signs in a newcomer claiming "alice", whose machine is active: refused.
    taken = join(state, b, thief, "alice", "x", T0 + 10)
    assert view(taken).status(thief.key_id) == "stranger"
    assert "held by another machine" in view(taken).refused[thief.key_id]
    # alice's own machine vouches for her second machine: accepted.
    own = join(state, a, second, "alice", "m2", T0 + 10, own_machine=True)
    assert view(own).members[second.key_id].person == "alice"
    # Renaming an existing machine to a held name is refused the same way.
    renamed = Member(key=c.key_id, person="bob", machine="laptop", ts=T0 + 20)
    stolen = absorb_all(state, [member_entry(a, state.id, renamed)], T0 + 30)
    assert view(stolen).status(c.key_id) == "stranger"
    # Once every machine holding the name is gone, it is free again.
    free = join(departures(state, a, [a.key_id], now=T0 + 10), b, thief, "alice", "x", T0 + 20)
    assert view(free).is_active(thief.key_id)


@pytest.mark.parametrize("person", ["Alice", "a" * 65, "al ice", "al_ice", "", "élise", "bob\n"])
def test_bad_or_over_long_names_are_refused(person: str) -> None:
    state = team_of_three()
    newcomer = KEYS[5]
    body = Member(key=newcomer.key_id, person=person, machine="x", ts=T0 + 5)
    made = [Entry("admission", sign(a, state.id, "admission", body)), member_entry(a, state.id, body)]
    assert all("a-z, 0-9 and -" in reason for reason in refusals(state, made))
    with pytest.raises(ValueError, match="a-z, 0-9 and -"):
        found(a, "acme", person, "m1")


def test_a_64_character_name_is_accepted() -> None:
    state = found(FOUNDER, "t" * 64, "p" * 64, "m" * 64, now=T0)
    assert view(state).members[FOUNDER.key_id].person == "p" * 64


def test_roles_default_to_member_and_allow_anchor_only() -> None:
    state = team_of_three()
    assert view(state).members[b.key_id].role == "member"
    state = self_update(state, b, role="anchor", now=T0 + 10)
    assert view(state).members[b.key_id].role == "anchor"
    bad = Member(key=c.key_id, person="carol", machine="laptop", ts=T0 + 20, role="admin")
    assert refusals(state, [member_entry(a, state.id, bad)]) == ["a role is one of member, anchor"]


# ---- invites and the link ---------------------------------------------------------------------


def test_a_one_time_invite_is_used_once_and_stays_used() -> None:
    state = team_of_three()
    state, secret = new_invite(state, a, now=T0 + 10)
    h = secret_hash(secret)
    assert h in view(state, T0 + 10).invites and secret not in json.dumps(state.to_wire())
    fresh = state
    used = admit(
        state, a, JoinRequest(secret=secret, key=KEYS[4].key_id, person="dave", machine="x", ts=T0 + 11), h, now=T0 + 11
    )
    assert h not in view(used, T0 + 12).invites
    assert used.invites[h].body.used_by == KEYS[4].key_id
    # An older copy of the unused invite arriving later does not revive it.
    assert merge(used, fresh, T0 + 12)[0].invites[h].body.used_by == KEYS[4].key_id


def test_invites_die_with_their_maker_and_expired_ones_are_pruned_after_a_week() -> None:
    state = team_of_three()
    state, secret = new_invite(state, c, now=T0 + 10, ttl_ms=1000)
    h = secret_hash(secret)
    assert h in view(state, T0 + 10).invites
    assert h not in view(state, T0 + 1010).invites  # expired
    gone = departures(state, a, [c.key_id], now=T0 + 20)
    assert h not in view(gone, T0 + 20).invites  # its maker was removed
    assert h in absorb(state, [], T0 + 1010 + 7 * DAY)[0].invites
    assert h not in absorb(state, [], T0 + 1011 + 7 * DAY)[0].invites


def test_removing_anyone_replaces_the_team_link_and_the_old_link_stops_working() -> None:
    state = team_of_three()
    old = view(state).link
    assert old is not None and secret_hash(old.secret) in view(state).invites
    state = new_link(departures(state, a, [c.key_id], now=T0 + 10), a, now=T0 + 10)
    new = view(state).link
    assert new is not None and new.secret != old.secret
    assert secret_hash(old.secret) not in view(state).invites
    assert secret_hash(new.secret) in view(state).invites


def test_the_link_dies_with_its_maker() -> None:
    state = team_of_three()
    state = new_link(state, c, now=T0 + 10)
    assert view(state).link is not None
    state = departures(state, c, [c.key_id], now=T0 + 20)
    assert view(state).link is None and not any(i.reusable for i in view(state).invites.values())


def test_the_view_for_a_removed_machine_has_no_secrets() -> None:
    state = team_of_three()
    state, secret = new_invite(state, a, now=T0 + 10)
    state = new_link(departures(state, a, [c.key_id], now=T0 + 10), a, now=T0 + 10)
    bare = without_secrets(state)
    text = json.dumps(bare.to_wire())
    assert bare.link is None and view(bare).invites == {}
    assert view(state).link is not None and view(state).link.secret not in text  # type: ignore[union-attr]
    assert secret_hash(secret) not in text and secret not in text
    # It still tells the removed machine that it was removed, and verifies.
    assert view(validated(json.loads(text), T0 + 20)[0]).status(c.key_id) == "removed"


# ---- signing ----------------------------------------------------------------------------------


def test_every_kind_signs_over_the_team_id_and_the_kind() -> None:
    state = team_of_three()
    approval = {"about": "01J", "approver": "bob", "approved": True, "question": "deploy?", "at": 1}
    signed = sign(b, state.id, "approval", approval)
    assert verify(state.id, "approval", signed)
    assert not verify(state.id, "member", signed)
    assert not verify(found(a, "acme", "alice", "m1").id, "approval", signed)  # same name, another team
    assert not verify(state.id, "approval", dataclasses.replace(signed, raw={**signed.raw, "approved": False}))
    payload = roster.signing_payload(state.id, "approval", signed.raw)
    assert payload.startswith(f"hive/1/{state.id}/approval/".encode())
    assert payload.endswith(b'{"about":"01J","approved":true,"approver":"bob","at":1,"question":"deploy?"}')


def test_fields_a_newer_hive_adds_travel_and_still_verify() -> None:
    state = team_of_three()
    raw = {
        "key": c.key_id,
        "person": "carol",
        "machine": "laptop",
        "ts": T0 + 5,
        "role": "member",
        "active": True,
        "addresses": [],
        "colour": "teal",
    }
    sig = b.sign_bytes(roster.signing_payload(state.id, "member", raw)).hex()
    wire = {"body": raw, "by": b.key_id, "sig": sig}
    signed: Signed[Member] = roster.signed_from_wire(Member, wire)
    merged = absorb_all(state, [Entry("member", signed)], T0 + 10)
    assert merged.members[c.key_id].to_wire()["body"]["colour"] == "teal"
    assert validated(json.loads(json.dumps(merged.to_wire())), T0 + 10)[0] == merged


def test_malformed_states_and_entries_are_refused_cleanly() -> None:
    with pytest.raises(roster.Malformed):
        roster.state_from_wire({"id": "x", "founder": "y"})
    with pytest.raises(roster.Malformed):
        roster.signed_from_wire(Member, {"body": {"key": 1}, "by": "00" * 32, "sig": "00" * 64})
    state = team_of_three()
    wire = state.to_wire()
    wire["members"] = {"x": {"body": {}, "by": "zz", "sig": ""}}
    with pytest.raises(roster.Malformed):
        roster.state_from_wire(wire)


# ---- tickets ----------------------------------------------------------------------------------


def make_ticket(**changes: Any) -> Ticket:
    state = team_of_three()
    base = Ticket(
        team_id=state.id,
        secret="s3cret-_A",
        team="acme",
        keys=(a.key_id, b.key_id, c.key_id),
        addresses=("192.0.2.1:4433", "[2001:db8::1]:4433"),
        expires=T0 + DAY,
    )
    return dataclasses.replace(base, **changes)


def test_a_ticket_round_trips_alone_or_inside_an_invite_line() -> None:
    ticket = make_ticket()
    text = encode_ticket(ticket)
    assert text.startswith("hive1:") and " " not in text and len(text) < 400
    assert decode_ticket(text) == ticket
    assert decode_ticket(f"Join my hive team acme: hive join '{text}' --as <your-name>\n") == ticket
    own = make_ticket(own_machine=True, person="alice", keys=(KEYS[0].key_id,), addresses=(), expires=0)
    assert decode_ticket(encode_ticket(own)) == own


def test_a_ticket_carries_at_most_two_addresses_and_three_keys() -> None:
    many = make_ticket(keys=tuple(k.key_id for k in KEYS[:5]), addresses=("a:1", "b:2", "c:3"))
    back = decode_ticket(encode_ticket(many))
    assert back.keys == many.keys[:3] and back.addresses == ("a:1", "b:2")


def test_a_damaged_or_tampered_ticket_is_refused() -> None:
    text = encode_ticket(make_ticket())
    body = text[len("hive1:") :]
    for damaged in (
        text[:-3],
        text[:40],
        "hive1:" + body[:20] + ("A" if body[20] != "A" else "B") + body[21:],
        "hive1:",
        "hive2:" + body,
        "no invite here",
    ):
        with pytest.raises(roster.Malformed):
            decode_ticket(damaged)
    # A well-formed ticket with a made-up secret decodes, and then opens nothing.
    state = team_of_three()
    forged = decode_ticket(encode_ticket(make_ticket(team_id=state.id, secret="guessed")))
    assert secret_hash(forged.secret) not in view(state).invites


def test_a_ticket_with_bad_fields_is_refused_even_with_a_good_checksum() -> None:
    for bad in (
        make_ticket(team="Not A Name"),
        make_ticket(own_machine=True, person=""),
        make_ticket(addresses=("bad\naddress",)),
    ):
        with pytest.raises(roster.Malformed):
            decode_ticket(encode_ticket(bad))


def test_invite_records_round_trip_through_json() -> None:
    invite = Invite(hash="ab" * 32, maker=KEYS[0].key_id, ts=T0, expires=T0 + 1, own_machine=True)
    assert roster.parse_record(Invite, json.loads(json.dumps(dataclasses.asdict(invite)))) == invite


# ---- every admission redeems an invite --------------------------------------------------------


def test_an_admission_that_names_no_invite_is_refused_on_arrival() -> None:
    state = team_of_three()
    body = Member(key=KEYS[5].key_id, person="eve", machine="x", ts=T0 + 5)
    assert refusals(state, [Entry("admission", sign(a, state.id, "admission", body))]) == [
        "an admission names the invite it redeemed"
    ]


def test_an_admission_redeeming_an_invite_the_roster_does_not_hold_admits_no_one() -> None:
    state = team_of_three()
    newcomer = KEYS[5]
    body = dataclasses.replace(
        Member(key=newcomer.key_id, person="eve", machine="x", ts=T0 + 5),
        redeems=secret_hash("a secret no member ever invited with"),
    )
    made = [Entry("admission", sign(a, state.id, "admission", body)), member_entry(a, state.id, body)]
    merged = absorb_all(state, made, T0 + 10)
    assert refusals(state, made) == []  # well-formed and signed by a member, so it travels
    assert view(merged).status(newcomer.key_id) == "stranger"


def test_one_time_invite_admits_one_machine_even_when_a_member_signs_a_second_admission() -> None:
    state, secret = new_invite(team_of_three(), a, now=T0 + 10)
    first, second = KEYS[5], KEYS[6]
    request = JoinRequest(secret=secret, key=first.key_id, person="eve", machine="x", ts=T0 + 11)
    state = admit(state, a, request, secret_hash(secret), now=T0 + 11)
    assert view(state).is_active(first.key_id)
    again = dataclasses.replace(
        Member(key=second.key_id, person="fay", machine="y", ts=T0 + 12), redeems=secret_hash(secret)
    )
    state = absorb_all(
        state, [Entry("admission", sign(b, state.id, "admission", again)), member_entry(b, state.id, again)], T0 + 13
    )
    assert view(state).status(second.key_id) == "stranger"
    assert view(state).is_active(first.key_id)


def test_an_invite_an_admission_redeemed_outlives_the_pruning_of_expired_invites() -> None:
    state, secret = new_invite(team_of_three(), a, now=T0 + 10, ttl_ms=1000)
    joiner = KEYS[5]
    request = JoinRequest(secret=secret, key=joiner.key_id, person="eve", machine="x", ts=T0 + 11)
    state = admit(state, a, request, secret_hash(secret), now=T0 + 11)
    years_later = absorb(state, [], T0 + 400 * DAY)[0]
    assert secret_hash(secret) in years_later.invites
    assert view(years_later, T0 + 400 * DAY).is_active(joiner.key_id)


def test_a_machine_admitted_through_a_replaced_team_link_still_counts_where_the_replacement_arrived_first() -> None:
    state = team_of_three()
    joiner = KEYS[5]
    assert state.link is not None
    old_link = secret_hash(state.link.body.secret)
    replaced = new_link(state, b, now=T0 + 10)  # bob replaces the link; alice has not heard yet
    request = JoinRequest(secret=state.link.body.secret, key=joiner.key_id, person="eve", machine="x", ts=T0 + 11)
    admitted = admit(state, a, request, old_link, now=T0 + 11)
    converged = merge(replaced, admitted, T0 + 12)[0]
    assert old_link not in view(converged).invites  # the old link admits no one any more
    assert view(converged).is_active(joiner.key_id)
    assert view(merge(admitted, replaced, T0 + 12)[0]) == view(converged)
