"""Team ops through real sidecars: found, invite, join (both halves), show, remove, leave, link."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import sqlite3
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hive.sidecar.base import peer
from hive.sidecar.base.config import load_settings
from hive.sidecar.base.paths import StatePaths, ensure_home
from hive.sidecar.base.store import Store
from hive.sidecar.daemon.server import Sidecar
from hive.sidecar.mail.mailbox import Mailbox
from hive.sidecar.person.confirm import is_person_op
from hive.sidecar.sessions.registry import Sessions
from hive.sidecar.team import roster
from hive.sidecar.team.identity import KeyUnavailable
from hive.sidecar.team.local import Team, TeamChange
from hive.sidecar.team.membership import attach
from tests.conftest import Hive
from tests.sidecar.desktop import Desktop, no_desktop_env, start_sidecar

MakeHive = Callable[..., Hive]


@pytest.fixture(autouse=True)
def no_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")  # test machines must not write to the desktop keyring


def call(hive: Hive, op: str, **args: Any) -> dict[str, Any]:
    reply = hive.request({"id": 1, "op": op, **args}, timeout=30)
    assert reply["ok"], reply
    return reply["result"]


def error(hive: Hive, op: str, **args: Any) -> dict[str, str]:
    reply = hive.request({"id": 1, "op": op, **args}, timeout=30)
    assert not reply["ok"], reply
    return reply["error"]


def started(make_hive: MakeHive, person: str) -> Hive:
    hive = make_hive(person=person)
    hive.start()
    return hive


def join(inviter: Hive, joiner: Hive, link: str, **prepare: Any) -> dict[str, Any]:
    """Both halves of a join, as the mesh runs them on hive-join/1, minus the QUIC link."""
    ready = call(joiner, "team_join_prepare", link=link, **prepare)
    joiner_key = ready["frame"]["hello"]["by"]
    answer = call(inviter, "team_join_accept", frame=ready["frame"], peer=joiner_key)
    inviter_key = call(inviter, "team_show")["me"]["key"]
    return call(joiner, "team_join_finish", link=link, state=answer["state"], peer=inviter_key)


def refused_join(inviter: Hive, joiner: Hive, link: str, **prepare: Any) -> dict[str, str]:
    ready = call(joiner, "team_join_prepare", link=link, **prepare)
    return error(inviter, "team_join_accept", frame=ready["frame"])


def labels(show: dict[str, Any]) -> set[str]:
    return {f"{p['person']}@{m['machine']}" for p in show["people"] for m in p["machines"]}


def test_init_founds_a_team_whose_roster_names_replace_config_toml(make_hive: MakeHive) -> None:
    hive = started(make_hive, "alice")
    result = call(hive, "team_init", team="acme", person="carol", machine="lap")
    assert result["team"]["name"] == "acme" and labels(result) == {"carol@lap"}
    assert result["invite"]["line"].startswith("Join my hive team acme: hive join 'hive1:")
    status = call(hive, "status")
    assert (status["person"], status["machine"]) == ("carol", "lap")
    registered = call(hive, "register", session={"key": "s1", "agent": "codex", "cwd": "/src/api"})
    assert registered["address"] == "carol/api-codex"
    # After a restart the names still come from the roster, which the database kept.
    hive.stop()
    hive.start()
    assert call(hive, "status")["person"] == "carol"
    assert call(hive, "team_show")["team"]["id"] == result["team"]["id"]
    # Leaving restores the configured names and forgets the team, row and all.
    assert call(hive, "team_leave", force=True) == {"left": "acme"}
    assert call(hive, "status")["person"] == "alice"
    assert call(hive, "team_show")["team"] is None
    hive.stop()
    with sqlite3.connect(hive.paths.database) as db:
        assert db.execute("SELECT count(*) FROM team").fetchone()[0] == 0


def test_one_team_per_machine_and_names_are_checked(make_hive: MakeHive) -> None:
    hive = started(make_hive, "alice")
    assert error(hive, "team_init", team="Acme Corp", person="alice")["code"] == "bad_request"
    assert error(hive, "team_init", team="acme", person="x" * 65)["code"] == "bad_request"
    assert error(hive, "team_invite")["code"] == "not_found"  # no team yet
    call(hive, "team_init", team="acme", person="alice")
    assert error(hive, "team_init", team="other", person="alice")["code"] == "conflict"


def test_a_machine_joins_with_the_team_link_and_both_sides_keep_the_same_roster(make_hive: MakeHive) -> None:
    alice, bob = started(make_hive, "alice"), started(make_hive, "bob")
    link = call(alice, "team_init", team="acme", person="alice")["invite"]["link"]
    joined = join(alice, bob, link, person="bob")
    assert joined["team"]["name"] == "acme" and labels(joined) == {"alice@m1", "bob@m2"}
    # The joiner can hand out the same team link, naming itself as the machine to dial first.
    shared = roster.decode_ticket(joined["invite"]["link"])
    assert shared.secret == roster.decode_ticket(link).secret and shared.inviter == joined["me"]["key"]
    assert labels(call(alice, "team_show")) == {"alice@m1", "bob@m2"}
    assert call(bob, "status")["person"] == "bob"
    # The team link is reusable: a third machine joins with the same one.
    carol = started(make_hive, "carol")
    join(alice, carol, link, person="carol")
    assert labels(call(alice, "team_show")) == {"alice@m1", "bob@m2", "carol@m3"}
    # Joining twice is refused on the joiner's side before anything is sent.
    assert error(bob, "team_join_prepare", link=link)["code"] == "conflict"


def test_an_own_machine_invite_adds_a_machine_of_the_same_person_once(make_hive: MakeHive) -> None:
    alice = started(make_hive, "alice")
    call(alice, "team_init", team="acme", person="alice")
    invite = call(alice, "team_invite", own_machine=True)
    assert invite["kind"] == "own_machine" and invite["expires"] > 0
    assert "hive join 'hive1:" in invite["line"] and "--as" not in invite["line"]
    second = started(make_hive, "someone-else")
    assert error(second, "team_join_prepare", link=invite["link"], person="bob")["code"] == "bad_request"
    joined = join(alice, second, invite["link"], machine="m1")
    assert joined["me"]["person"] == "alice"
    assert joined["me"]["machine"] == "m1-2"  # alice already has an m1
    # A one-time invite works once.
    third = started(make_hive, "alice")
    assert refused_join(alice, third, invite["link"])["code"] == "refused"


def test_a_name_held_by_an_active_machine_cannot_be_taken_with_the_team_link(make_hive: MakeHive) -> None:
    alice, mallory = started(make_hive, "alice"), started(make_hive, "mallory")
    link = call(alice, "team_init", team="acme", person="alice")["invite"]["link"]
    refusal = refused_join(alice, mallory, link, person="alice")
    assert refusal["code"] == "conflict" and "own-machine" in refusal["message"]
    assert labels(call(alice, "team_show")) == {"alice@m1"}


def test_a_one_time_invite_for_someone_else(make_hive: MakeHive) -> None:
    alice, bob, carol = (started(make_hive, p) for p in ("alice", "bob", "carol"))
    call(alice, "team_init", team="acme", person="alice")
    once = call(alice, "team_invite", once=True, ttl_hours=1)
    assert once["kind"] == "once" and "(one use)" in once["line"]
    join(alice, bob, once["link"], person="bob")
    assert refused_join(alice, carol, once["link"], person="carol")["code"] == "refused"


def test_removing_someone_replaces_the_link_and_the_old_one_stops_working(make_hive: MakeHive) -> None:
    alice, bob, carol = (started(make_hive, p) for p in ("alice", "bob", "carol"))
    old = call(alice, "team_init", team="acme", person="alice")["invite"]["link"]
    join(alice, bob, old, person="bob")
    result = call(alice, "team_remove", target="bob")
    assert result["removed"] == ["bob@m2"] and result["link_replaced"]
    new = result["invite"]["link"]
    assert new != old
    show = call(alice, "team_show")
    assert labels(show) == {"alice@m1"} and show["departed"][0]["person"] == "bob"
    assert refused_join(alice, carol, old, person="carol")["code"] == "refused"
    join(alice, carol, new, person="carol")
    assert error(alice, "team_remove", target="alice")["code"] == "refused"  # that is `hive leave`
    assert error(alice, "team_remove", target="nobody")["code"] == "not_found"


def test_a_remove_target_may_be_a_machine_or_person_at_machine(make_hive: MakeHive) -> None:
    alice, bob, laptop = (started(make_hive, p) for p in ("alice", "bob", "bob"))
    link = call(alice, "team_init", team="acme", person="alice")["invite"]["link"]
    join(alice, bob, link, person="bob", machine="desk")
    own = call(bob, "team_invite", own_machine=True)["link"]
    join(bob, laptop, own, machine="desk")
    show = call(bob, "team_show")
    assert labels(show) == {"alice@m1", "bob@desk", "bob@desk-2"}
    assert call(bob, "team_remove", target="bob@desk-2")["removed"] == ["bob@desk-2"]
    assert call(alice, "team_remove", target="desk")["removed"] == ["bob@desk"]


def test_a_join_frame_that_was_altered_or_comes_from_another_key_is_refused(make_hive: MakeHive) -> None:
    alice, bob = started(make_hive, "alice"), started(make_hive, "bob")
    link = call(alice, "team_init", team="acme", person="alice")["invite"]["link"]
    ready = call(bob, "team_join_prepare", link=link, person="bob")
    frame = json.loads(json.dumps(ready["frame"]))
    frame["hello"]["body"]["person"] = "boss"
    assert error(alice, "team_join_accept", frame=frame)["code"] == "refused"
    assert error(alice, "team_join_accept", frame=ready["frame"], peer="ab" * 32)["code"] == "refused"
    assert error(alice, "team_join_accept", frame={"t": "join"})["code"] == "refused"
    # The joiner checks the answer too: a state that does not list it is not kept.
    state = call(alice, "team_show")
    assert error(bob, "team_join_finish", link=link, state={"id": state["team"]["id"]})["code"] == "refused"


def test_a_damaged_or_expired_invite_is_refused_before_dialing(make_hive: MakeHive) -> None:
    alice, bob = started(make_hive, "alice"), started(make_hive, "bob")
    link = call(alice, "team_init", team="acme", person="alice")["invite"]["link"]
    assert error(bob, "team_join_prepare", link=link[:-4])["code"] == "bad_request"
    ticket = roster.decode_ticket(link)
    expired = roster.encode_ticket(roster.Ticket(**{**ticket.__dict__, "expires": 1}))
    assert error(bob, "team_join_prepare", link=expired)["code"] == "refused"


def test_the_cli_prints_the_invite_line_and_the_team(make_hive: MakeHive) -> None:
    hive = started(make_hive, "alice")
    out = hive.cli("init", "acme", "--as", "alice", check=True).stdout
    assert "founded team acme: you are alice on m1" in out and "hive join 'hive1:" in out
    assert hive.cli("invite", check=True).stdout.startswith("Join my hive team acme: hive join 'hive1:")
    assert "hive join 'hive1:" in hive.cli("invite", "--own-machine", check=True).stdout
    team = hive.cli("team", check=True).stdout
    assert "team acme: 1 person, 1 machine" in team and "this machine" in team
    assert hive.cli_json("team")["people"][0]["person"] == "alice"
    old = hive.cli_json("link")["link"]
    assert hive.cli_json("link", "--new")["link"] != old
    failed = hive.cli("remove", "nobody")
    assert failed.returncode == 1 and "[not_found]" in failed.stderr
    assert "left team acme" in hive.cli("leave", "--force", check=True).stdout


# ---- merging what the mesh delivers, on a sidecar object with its real database ----------------


async def sidecar_at(home: Path, person: str) -> Sidecar:
    ensure_home(home)
    (home / "config.toml").write_text(f'person = "{person}"\nmachine = "box"\n')
    paths = StatePaths(home)
    sidecar = Sidecar(paths, load_settings(paths.config))
    sidecar.store = await Store.open(paths.database)
    sidecar.sessions = Sessions(sidecar.store, sidecar.settings)
    sidecar.mailbox = Mailbox(sidecar.store, sidecar.settings)
    await attach(sidecar)
    return sidecar


@pytest.mark.anyio
async def test_a_removed_machine_gets_no_secrets_learns_it_was_removed_and_forgets_the_team(tmp_path: Path) -> None:
    alice_sc, bob_sc = await sidecar_at(tmp_path / "a", "alice"), await sidecar_at(tmp_path / "b", "bob")
    try:
        alice, bob = alice_sc.team, bob_sc.team  # type: ignore[attr-defined]
        assert isinstance(alice, Team) and isinstance(bob, Team)
        changes: list[TeamChange] = []

        async def record(change: TeamChange) -> None:
            changes.append(change)

        bob.subscribe(record)
        link = (await alice.init("acme", "alice", "box"))["invite"]["link"]
        ready = await bob.prepare_join(link, "bob")
        state = await alice.accept_join(ready["frame"], bob.my_key())
        await bob.finish_join(link, state, alice.my_key())
        assert bob_sc.settings.person == "bob" and changes[-1].reason == "joined"
        assert alice.state_for(bob.my_key()) is not None and alice.state_for("cd" * 32) is None  # a stranger

        await alice.remove("bob")
        bare = alice.state_for(bob.my_key())
        assert bare is not None and bare["link"] is None
        # Only the invite bob's admission redeemed travels (a hash, of a link replaced on his removal).
        assert roster.view(roster.state_from_wire(bare)).invites == {} and len(bare["invites"]) == 1
        assert await bob.merge(bare, alice.my_key())
        assert bob.team_id() is None and changes[-1].reason == "removed"
        assert bob_sc.settings.person == "bob"  # config.toml's name again (it is bob there too)
        assert await bob_sc.store.fetchone("SELECT * FROM team") is None
        # A state from another team, or garbage, changes nothing and raises nothing.
        assert not await alice.merge({"id": "00" * 16, "founder": "11" * 32}, bob.my_key())
        assert not await alice.merge("garbage", None)
    finally:
        await alice_sc.store.close()
        await bob_sc.store.close()


@pytest.mark.anyio
async def test_merging_tells_subscribers_who_stopped_being_active(tmp_path: Path) -> None:
    alice_sc, bob_sc = await sidecar_at(tmp_path / "a", "alice"), await sidecar_at(tmp_path / "b", "bob")
    try:
        alice, bob = alice_sc.team, bob_sc.team  # type: ignore[attr-defined]
        link = (await alice.init("acme", "alice", "box"))["invite"]["link"]
        ready = await bob.prepare_join(link, "bob")
        await bob.finish_join(link, await alice.accept_join(ready["frame"]), None)
        seen: list[TeamChange] = []

        async def record(change: TeamChange) -> None:
            seen.append(change)

        alice.subscribe(record)
        departed = roster.departures(bob.state, bob.identity, [bob.my_key()])
        assert await alice.merge(departed.to_wire(), bob.my_key())
        assert seen[-1].reason == "merge" and seen[-1].removed == (bob.my_key(),)
        assert not await alice.merge(departed.to_wire(), bob.my_key())  # nothing new the second time
    finally:
        await alice_sc.store.close()
        await bob_sc.store.close()


@pytest.mark.anyio
async def test_a_team_whose_machine_key_cannot_be_read_stays_out_and_says_why(tmp_path: Path) -> None:
    sidecar = await sidecar_at(tmp_path / "a", "alice")
    try:
        await sidecar.team.init("acme", "alice", "box")  # type: ignore[attr-defined]
    finally:
        await sidecar.store.close()
    (tmp_path / "a" / "machine.key").chmod(0o644)
    again = await sidecar_at(tmp_path / "a", "alice")
    try:
        team: Team = again.team  # type: ignore[attr-defined]
        assert team.team_id() is None and "chmod 600" in team.show()["problem"]
        with pytest.raises(KeyUnavailable):
            await team.invite()
        with pytest.raises(KeyUnavailable):
            await team.init("other", "alice", "box")  # never over the stored team
        assert await again.store.fetchone("SELECT team_id FROM team") is not None
    finally:
        await again.store.close()


# ---- an agent's team changes wait for its person -------------------------------------------

AGENT_RUNS = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
HIVE = (sys.executable, "-m", "hive.sidecar.cli")


def as_agent(harness: Path, hive: Hive, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``hive ARGS`` as a tool call of an agent harness (a process named like one) runs it.

    The harness gets a session of its own, as from the person's terminal; this test process is not
    in it, so its own requests stay the person's while the harness runs."""
    return subprocess.Popen(
        [str(harness), "-c", AGENT_RUNS, *HIVE, *args],
        env={**env, "HIVE_HOME": str(hive.home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finished(process: subprocess.Popen[str]) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr


def secret(hive: Hive) -> str:
    """The secret of the team link ``hive`` hands out now (the rest of the link names machines)."""
    return roster.decode_ticket(call(hive, "team_invite")["link"]).secret


def a_team_without_desktops(
    make_hive: MakeHive, runtime: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[Hive, Hive, Path, str]:
    alice, bob = make_hive(person="alice"), make_hive(person="bob")
    start_sidecar(alice, env or no_desktop_env(runtime))
    start_sidecar(bob, no_desktop_env(runtime))
    link = call(alice, "team_init", team="acme", person="alice")["invite"]["link"]
    join(alice, bob, link, person="bob")
    harness = tmp_path / "claude"
    harness.symlink_to(sys.executable)
    return alice, bob, harness, link


def test_an_agent_cannot_remove_leave_replace_the_link_or_join_without_its_person(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path
) -> None:
    alice, _bob, harness, link = a_team_without_desktops(make_hive, empty_runtime, tmp_path)
    carol = make_hive(person="carol")
    start_sidecar(carol, no_desktop_env(empty_runtime))
    env = no_desktop_env(empty_runtime)
    for hive, args in (
        (alice, ("remove", "bob")),
        (alice, ("link", "--new")),
        (alice, ("leave", "--force")),
        (carol, ("join", link, "--as", "carol")),
        (alice, ("invite",)),
        (carol, ("init", "evil", "--as", "carol")),
    ):
        code, stderr = finished(as_agent(harness, hive, env, *args))
        assert code == 1 and "[needs_person]" in stderr, (args, stderr)
    assert labels(call(alice, "team_show")) == {"alice@m1", "bob@m2"}
    assert secret(alice) == roster.decode_ticket(link).secret
    assert call(carol, "team_show")["team"] is None  # carol's machine joined no team
    code, stderr = finished(as_agent(harness, carol, env, "remove", "bob"))
    assert code == 1 and "[not_found]" in stderr, stderr  # in no team: said so, not an internal error
    # The person's own command needs no second question.
    assert alice.cli("remove", "bob", check=True).returncode == 0
    assert labels(call(alice, "team_show")) == {"alice@m1"}


@pytest.mark.parametrize("asker", ["an agent", "a script with no terminal"])
def test_a_team_change_an_agent_or_a_script_asks_for_goes_ahead_when_the_person_approves_the_pop_up(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path, desktop: Desktop, asker: str
) -> None:
    # The person started the sidecar from their desktop session: that is where its pop-ups go.
    alice, _bob, harness, link = a_team_without_desktops(make_hive, empty_runtime, tmp_path, env=desktop.env)
    agent_env = no_desktop_env(empty_runtime)  # the asker names no desktop; none is needed

    def asks(*args: str) -> subprocess.Popen[str]:
        return as_agent(harness, alice, agent_env, *args) if asker == "an agent" else as_script(alice, agent_env, *args)

    replacing = asks("link", "--new")
    desktop.click("deny", which="confirm a team change")
    code, stderr = finished(replacing)
    assert code == 1 and "[needs_person]" in stderr, stderr
    assert secret(alice) == roster.decode_ticket(link).secret
    removing = asks("remove", "bob")
    desktop.click("approve", which="confirm a team change")
    code, stderr = finished(removing)
    assert code == 0, stderr
    assert labels(call(alice, "team_show")) == {"alice@m1"}
    assert secret(alice) != roster.decode_ticket(link).secret  # a removal replaces the link


# What an agent's shell runs to cut its command loose from the harness: the command's exit code
# and error output land in OUT, since nothing waits for it.
CUT_LOOSE = {
    # setsid -f: a new session with no terminal, handed to init at once.
    "setsid": "import subprocess, sys; out = sys.argv[1]; subprocess.run(['setsid', '-f', 'sh', '-c', "
    '\'"$@" 2>"$0.err"; echo $? >"$0"\', out, *sys.argv[2:]], check=True)',
    # A double fork: handed to init, but still in the harness's process group and session, which
    # lives on (the harness waits for the result here).
    "double fork": "import os, subprocess, sys, time; out = sys.argv[1]\n"
    "subprocess.run(['sh', '-c', '(\"$@\" 2>\"$0.err\"; echo $? >\"$0\") &', out, *sys.argv[2:]])\n"
    "deadline = time.monotonic() + 60\n"
    "while not os.path.exists(out) and time.monotonic() < deadline: time.sleep(0.05)",
}


def cut_loose(harness: Path, hive: Hive, env: dict[str, str], how: str, out: Path, *args: str) -> tuple[int, str]:
    """Run ``hive ARGS`` from an agent harness's shell, detached from the harness ``how``; wait for its end."""
    subprocess.run(
        [str(harness), "-c", CUT_LOOSE[how], str(out), *HIVE, *args],
        check=True,
        timeout=60,
        env={**env, "HIVE_HOME": str(hive.home)},
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text().strip()):
        assert time.monotonic() < deadline, f"the detached command ({how}) never finished"
        time.sleep(0.05)
    return int(out.read_text()), Path(f"{out}.err").read_text()


@pytest.mark.parametrize("how", sorted(CUT_LOOSE))
def test_a_team_change_cut_loose_from_the_agent_harness_still_waits_for_its_person(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path, how: str
) -> None:
    alice, _bob, harness, link = a_team_without_desktops(make_hive, empty_runtime, tmp_path)
    env = no_desktop_env(empty_runtime)
    for n, args in enumerate((("remove", "bob"), ("link", "--new"))):
        code, stderr = cut_loose(harness, alice, env, how, tmp_path / f"out{n}", *args)
        assert code == 1 and "[needs_person]" in stderr, (how, args, stderr)
    assert labels(call(alice, "team_show")) == {"alice@m1", "bob@m2"}
    assert secret(alice) == roster.decode_ticket(link).secret


AGENT_REQUESTS = """import json, socket, sys
with socket.socket(socket.AF_UNIX) as s:
    s.connect(sys.argv[1])
    f = s.makefile("rwb")
    for line in sys.argv[2:]:
        f.write(line.encode() + b"\\n"); f.flush()
        sys.stdout.write(f.readline().decode())
"""


def agent_requests(harness: Path, hive: Hive, *requests: dict[str, Any]) -> list[dict[str, Any]]:
    """Raw requests on the socket from a process an agent harness started (its MCP server, a script)."""
    result = subprocess.run(
        [
            str(harness),
            "-c",
            AGENT_REQUESTS,
            str(hive.paths.socket),
            *(json.dumps({"id": n, **r}) for n, r in enumerate(requests)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=no_desktop_env(Path("/nonexistent")),
        start_new_session=True,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_both_halves_of_a_join_ask_the_person_when_an_agent_runs_them(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path
) -> None:
    """An agent joined a stranger's team ``evil`` through team_join_prepare and team_join_finish."""
    alice, _bob, harness, _link = a_team_without_desktops(make_hive, empty_runtime, tmp_path)
    mallory = make_hive(person="mallory")
    start_sidecar(mallory, no_desktop_env(empty_runtime))
    evil = call(mallory, "team_init", team="evil", person="mallory")["invite"]["link"]
    carol = make_hive(person="carol")
    start_sidecar(carol, no_desktop_env(empty_runtime))
    # What the agent would have sent, prepared by the person's own hand to have real frames.
    ready = call(carol, "team_join_prepare", link=evil, person="carol")
    answer = call(mallory, "team_join_accept", frame=ready["frame"], peer=ready["frame"]["hello"]["by"])
    replies = agent_requests(
        harness,
        carol,
        {"op": "team_join_prepare", "link": evil, "person": "carol"},
        {"op": "team_join_finish", "link": evil, "state": answer["state"]},
    )
    assert [r["error"]["code"] for r in replies] == ["needs_person", "needs_person"], replies
    assert call(carol, "team_show")["team"] is None
    # On the inviting side, an agent cannot admit a machine by hand, hand out invites or found a team.
    replies = agent_requests(
        harness,
        alice,
        {"op": "team_join_accept", "frame": ready["frame"]},
        {"op": "team_invite"},
        {"op": "team_invite", "once": True},
        {"op": "team_remove", "target": "bob"},
        {"op": "team_leave"},
        {"op": "team_link_new"},
    )
    assert {r["error"]["code"] for r in replies} == {"needs_person"}, replies
    replies = agent_requests(harness, carol, {"op": "team_init", "team": "evil2", "person": "carol"})
    assert replies[0]["error"]["code"] == "needs_person"
    assert labels(call(alice, "team_show")) == {"alice@m1", "bob@m2"}


def test_an_agent_cannot_release_held_mail_or_remove_a_project_member_without_its_person(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path
) -> None:
    alice, _bob, harness, _link = a_team_without_desktops(make_hive, empty_runtime, tmp_path)
    project = "sha256:" + "ab" * 32
    replies = agent_requests(
        harness,
        alice,
        {"op": "approve", "ids": ["01JAAAAAAAAAAAAAAAAAAAAAAA"]},
        {"op": "project_remove", "project": project, "person": "bob"},
    )
    assert [r["error"]["code"] for r in replies] == ["needs_person", "needs_person"], replies
    # The person's own request goes ahead (to the answers those ids and that project get).
    assert call(alice, "approve", ids=["01JAAAAAAAAAAAAAAAAAAAAAAA"])["settled"][0]["state"] != "needs_person"


def test_a_persons_own_request_beside_a_harness_in_the_same_session_is_still_the_persons(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path
) -> None:
    """A terminal (or a test runner) may run a harness next to the person's own commands: sharing a
    session with it makes a process an agent's only once it was cut loose from its parents."""
    alice, _bob, harness, _link = a_team_without_desktops(make_hive, empty_runtime, tmp_path)
    beside = subprocess.Popen([str(harness), "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert beside.stdin is not None
        deadline = time.monotonic() + 30
        while harness.name not in peer.program_names(beside.pid):
            assert time.monotonic() < deadline, "the stand-in harness did not start"
            time.sleep(0.05)
        assert call(alice, "team_invite")["link"]
        assert not peer.agent_reason(os.getpid(), [harness.name])
    finally:
        beside.communicate(timeout=30)


# Every op the sidecar serves, classified: the person confirms these when an agent asks (or always,
# for group sends, gate preference changes, lesson reviews and project members) ...
PERSON_OPS = {
    "team_init",
    "team_invite",
    "team_remove",
    "team_leave",
    "team_link_new",
    "team_join",
    "team_join_prepare",
    "team_join_accept",
    "team_join_finish",
    "send",
    "gate_prefs",
    "lesson_review",
    "project_confirm",
    "approve",
    "project_remove",
    "policy",
    "history",
}
# ... and these change none of the team, the link, group sends, gate preferences or reviews.
FREE_OPS = {
    "ask",
    "ask_stop",
    "attach",
    "delivered",
    "digest",
    "doing",
    "drop",
    "end",
    "events",
    "folder",
    "gate_acted",
    "gate_breakpoint",
    "gate_fact",
    "gate_ledger",
    "gate_measures",
    "gate_offer",
    "gate_promote",
    "gate_shadow",
    "gate_why",
    "held",
    "screening_allowed",  # lists, or screens senders again: never lets anything more through
    "history_search",
    "hold",
    "hook",
    "hook_written",
    "inbox",
    "lesson_cite",
    "lesson_context",
    "lesson_import",
    "lesson_list",
    "lesson_pending",
    "lesson_promote",
    "lesson_propose",
    "lesson_retract",
    "lesson_search",
    "lesson_show",
    "lesson_sync_ingest",
    "lesson_sync_status",
    "mesh",
    "ping",
    "plugin_event",
    "project_join",
    "project_show",
    "register",
    "seen",
    "sent",
    "set_status",
    "shutdown",
    "status",
    "stop_waiting",
    "team_show",
    "undelivered",
    "unread",
    "watch",
    "who",
}


def test_every_op_is_classified_and_exactly_the_person_ops_go_through_the_person_check(tmp_path: Path) -> None:
    home = tmp_path / "h"
    ensure_home(home)
    sidecar = Sidecar(StatePaths(home), load_settings(StatePaths(home).config))
    served = set(sidecar.handlers)
    unclassified = served - PERSON_OPS - FREE_OPS
    assert not unclassified, f"classify these ops as needing the person or not: {sorted(unclassified)}"
    assert served == PERSON_OPS | FREE_OPS, f"no longer served: {sorted(PERSON_OPS | FREE_OPS - served)}"
    assert {op for op, handler in sidecar.handlers.items() if is_person_op(handler)} == PERSON_OPS


def test_only_the_founders_own_person_removes_the_founder(make_hive: MakeHive) -> None:
    alice, bob = started(make_hive, "alice"), started(make_hive, "bob")
    link = call(alice, "team_init", team="acme", person="alice")["invite"]["link"]
    join(alice, bob, link, person="bob")
    assert error(bob, "team_remove", target="alice")["code"] == "refused"
    assert labels(call(bob, "team_show")) == {"alice@m1", "bob@m2"}
    assert call(alice, "team_remove", target="bob")["removed"] == ["bob@m2"]


def test_a_harness_the_person_put_in_the_background_of_their_shell_leaves_their_next_commands_theirs(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path
) -> None:
    """``claude &`` then ``hive remove bob`` in one interactive shell: job control gives the harness a
    process group of its own in the person's session and terminal; the person's command is still theirs."""
    alice, _bob, harness, _link = a_team_without_desktops(make_hive, empty_runtime, tmp_path)
    done = tmp_path / "done"
    script = (
        f"{harness} -c 'import time; time.sleep(120)' &\n"
        f'sleep 1; {" ".join(HIVE)} remove bob; echo "exit=$?" > {done}; kill %1; exit\n'
    )
    master, slave = os.openpty()
    shell = subprocess.Popen(
        ["bash", "--norc", "--noprofile", "-i"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**no_desktop_env(empty_runtime), "HIVE_HOME": str(alice.home)},
        preexec_fn=lambda: os.login_tty(slave),
    )
    os.close(slave)
    try:
        os.write(master, script.encode())
        deadline = time.monotonic() + 60
        while not (done.exists() and done.read_text().strip()):
            assert time.monotonic() < deadline, "the shell never ran the command"
            with contextlib.suppress(OSError):
                os.read(master, 65536)  # keep the terminal drained
            time.sleep(0.05)
    finally:
        os.close(master)
        shell.wait(timeout=30)
    assert done.read_text().strip() == "exit=0"
    assert labels(call(alice, "team_show")) == {"alice@m1"}


def test_a_team_change_from_a_tmux_window_an_agent_opened_still_waits_for_its_person(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path
) -> None:
    """``tmux new -d 'hive remove bob'`` from an agent's shell: the window's shell has a terminal of
    its own and descends from a tmux server handed to init, but it carries the variable Claude
    Code sets in every process it starts."""
    alice, _bob, harness, link = a_team_without_desktops(make_hive, empty_runtime, tmp_path)
    server, out = tmp_path / "tmux.sock", tmp_path / "out"
    command = f"{shlex.join([*HIVE, 'remove', 'bob'])} 2>{out}.err; echo $? >{out}"
    env = {**no_desktop_env(empty_runtime), "HIVE_HOME": str(alice.home), "CLAUDECODE": "1", "TERM": "xterm"}
    subprocess.run(
        [
            str(harness),
            "-c",
            "import subprocess, sys; subprocess.run(sys.argv[1:], check=True)",
            "tmux",
            "-S",
            str(server),
            "new-session",
            "-d",
            command,
        ],
        env=env,
        check=True,
        timeout=60,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_text().strip()):
            assert time.monotonic() < deadline, "the tmux window never ran the command"
            time.sleep(0.05)
    finally:
        subprocess.run(["tmux", "-S", str(server), "kill-server"], capture_output=True, timeout=30)
    assert out.read_text().strip() == "1" and "[needs_person]" in Path(f"{out}.err").read_text()
    assert labels(call(alice, "team_show")) == {"alice@m1", "bob@m2"}
    assert secret(alice) == roster.decode_ticket(link).secret


# ---- only the person at a terminal of their own changes the team unasked ---------------------


def as_script(hive: Hive, env: dict[str, str], *args: str, **popen: Any) -> subprocess.Popen[str]:
    """``hive ARGS`` from a process with no terminal and no agent in sight (a cron job, a script an
    agent left behind): a session of its own, out of the suite's terminal."""
    return subprocess.Popen(
        [*HIVE, *args],
        env={**env, "HIVE_HOME": str(hive.home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **({"start_new_session": True} | popen),
    )


def test_a_team_change_from_a_process_with_no_terminal_waits_for_the_person(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path
) -> None:
    alice, _bob, _harness, link = a_team_without_desktops(make_hive, empty_runtime, tmp_path)
    env = no_desktop_env(empty_runtime)
    for args in (("remove", "bob"), ("link", "--new"), ("invite", "--once"), ("leave", "--force")):
        code, stderr = finished(as_script(alice, env, *args))
        assert code == 1 and "[needs_person]" in stderr, (args, stderr)
    assert labels(call(alice, "team_show")) == {"alice@m1", "bob@m2"}
    assert secret(alice) == roster.decode_ticket(link).secret
    # The same command typed at the person's terminal (the suite's own: tests.conftest.at_a_terminal).
    assert alice.cli("remove", "bob", check=True).returncode == 0
    assert labels(call(alice, "team_show")) == {"alice@m1"}


@pytest.mark.parametrize("owner", ["the person", "another user"])
def test_only_a_terminal_the_person_owns_is_theirs(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path, owner: str
) -> None:
    """A terminal another login opened (``su`` to the person from someone else's) is not the person's.

    Handing a terminal to another user takes root, as the suite's network namespaces do."""
    alice, _bob, _harness, _link = a_team_without_desktops(make_hive, empty_runtime, tmp_path)
    master, slave = os.openpty()
    if owner == "another user":
        os.fchown(slave, 65534, -1)

    def take_the_terminal() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    try:
        removing = as_script(
            alice,
            no_desktop_env(empty_runtime),
            "remove",
            "bob",
            start_new_session=False,
            stdin=slave,
            preexec_fn=take_the_terminal,
        )
        code, stderr = finished(removing)
    finally:
        os.close(slave)
        os.close(master)
    if owner == "the person":
        assert code == 0, stderr
        assert labels(call(alice, "team_show")) == {"alice@m1"}
    else:
        assert code == 1 and "[needs_person]" in stderr, stderr
        assert labels(call(alice, "team_show")) == {"alice@m1", "bob@m2"}


# The stand-in harness registers its session (as its hooks do), leaves a tool call running in its
# process group, ``(hive … &)``, and exits; the tool call waits for it to be gone, then runs.
OUTLIVES = """import json, os, socket, subprocess, sys
with socket.socket(socket.AF_UNIX) as s:
    s.connect(sys.argv[1])
    f = s.makefile("rwb")
    session = {"key": "outliving", "agent": "claude-code", "pid": os.getpid()}
    f.write(json.dumps({"id": 1, "op": "register", "session": session}).encode() + b"\\n")
    f.flush()
    assert json.loads(f.readline())["ok"]
subprocess.run(["sh", "-c", 'pid=$1 out=$2; shift 2; (while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done; '
    '"$@" 2>"$out.err"; echo $? >"$out") &', "sh", str(os.getpid()), *sys.argv[2:]], check=True)
"""


def test_a_tool_call_that_outlives_its_harness_in_the_persons_terminal_is_still_the_agents(
    make_hive: MakeHive, empty_runtime: Path, tmp_path: Path
) -> None:
    """The harness ran in the person's terminal as a job of their shell; once it exits, nothing
    running says who started the tool call but the harness the sidecar recorded."""
    alice, _bob, harness, link = a_team_without_desktops(make_hive, empty_runtime, tmp_path)
    out = tmp_path / "out"
    subprocess.run(
        [str(harness), "-c", OUTLIVES, str(alice.paths.socket), str(out), *HIVE, "remove", "bob"],
        env={**no_desktop_env(empty_runtime), "HIVE_HOME": str(alice.home)},
        check=True,
        timeout=60,
        process_group=0,  # a job of the person's shell, in their terminal
    )
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text().strip()):
        assert time.monotonic() < deadline, "the tool call never finished"
        time.sleep(0.05)
    assert out.read_text().strip() == "1" and "[needs_person]" in Path(f"{out}.err").read_text()
    assert labels(call(alice, "team_show")) == {"alice@m1", "bob@m2"}
    assert secret(alice) == roster.decode_ticket(link).secret
