"""Benchmark of the team's anchor: relayed mail against direct, custody, and the anchor's idle cost.

Run it from the repository root with the project's venv, as root (it makes network namespaces):

    .venv/bin/python tests/bench/bench_relay.py                      # full run: up to 50 members
    .venv/bin/python tests/bench/bench_relay.py --stages 10,25       # fewer members in section 3
    .venv/bin/python tests/bench/bench_relay.py --quick              # smoke run: 4 members, short windows

Every sidecar runs inside network namespaces this script makes with tests/reach/natsim.py (the
simulated internet: an always-on public machine, two laptops behind home NATs); none listens on a
real interface, and all of them, and the namespaces, are gone at the end, also after a failure.
The script talks to the sidecars over their unix sockets (which reach across namespaces) with the
public client library. Nothing is asserted: the machines that run this are small and noisy, so each
figure is printed next to a baseline measured in the same run, and their ratio.

1. send -> inbox, relayed against direct: ops's always-on machine founds team acme as its anchor
   (``hive init acme --as ops --anchor``), alice's and bob's laptops join it with its team link and,
   behind their NATs, link only to it. A long poll (``inbox``, ``wait: 30``) is parked on the reader's
   mailbox; the time runs from just before alice's ``send`` until the poll returns the message
   (bench_mesh's ``latency()``). Direct: alice -> a session on the anchor's own machine (one QUIC
   link). Relayed: alice -> a session on bob's laptop (through the anchor: two links, each frame
   sealed by alice and checked by the anchor and by bob). The two alternate in blocks, so drift in
   the host's load hits both alike. The anchor's CPU per message is shown for each path.
2. custody: messages per second alice hands over and sees answered ``anchored`` while bob's laptop
   is stopped (one at a time, then several in flight), against the same sends to the anchor's own
   session (answered ``queued``: in its mailbox) and to bob's session while his laptop is up (relayed, answered
   by bob) in the same run. Then bob's laptop starts: the time until it is linked to the anchor,
   until every held message is in his session's mailbox (the anchor hands them over), and until the
   anchor holds nothing (bob's acks passed back through it).
3. the anchor with many members on one host: a fresh anchor in the public machine's namespace, then
   members (each a real sidecar with its own HIVE_HOME, joined with ``hive join '<link>' --as pNN``
   and holding one registered session) added in stages (10, 25, 50). Each member advertises a
   closed port (``[mesh] advertise``), so the address teammates learn for it is dead and the only
   links are to the anchor: the script checks that every member links the anchor directly and every
   other member relayed, and what the anchor spent on the joins until then. Then settling, at least
   65 s (2 s with --quick), which takes in each new member's first presence refresh a minute after
   it started (it re-sends presence, relayed to every member, only if what it says changed: the
   addresses it passes on are those of members it links directly, here the anchor alone); then
   idle windows of 60 s (one of 3 s with --quick) until one is quiet (under 0.5 UDP packets a second
   per link at the anchor; keepalives alone are 0.2), at most five; the windows before the quiet
   one count as settling. For settling and idle: the anchor's CPU (utime+stime from /proc/<pid>/stat),
   VmRSS and VmHWM, the UDP packets and bytes the anchor sent and received (nftables counters on its
   port, in the namespace), the members' own CPU and RSS, and the packets members send to the dead
   port (their dial loops, which keep trying a teammate they reach only through the anchor). The
   baseline is the same anchor with 0 members, measured first.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench_mesh import cpu_seconds, latency, ms, percentile, pump, section, status_kb, wait_until  # noqa: E402

from hive.sidecar.client import Client  # noqa: E402
from tests.conftest import process_gone  # noqa: E402
from tests.reach.natsim import PUB, Internet, NetHive, simulated_internet  # noqa: E402

# The benchmark sends far more than a person's agents would: lift the rate limits (60 a minute by
# default) and the loop guard, or most of it would measure their refusals.
LIFTED = "[mesh]\nrate_limit = 1000000\nloop_limit = 1000000\n"
DEAD = f"{PUB}:9"  # a port nothing listens on: what a member in section 3 tells teammates to dial
NFT_TABLE = "benchrelay"
# An idle window is quiet under this many UDP packets a second per link at the anchor: keepalives
# alone (a QUIC ping each way every 20 s, and its ack) are 0.2.
QUIET = 0.5


@dataclass(frozen=True)
class Plan:
    latency_rounds: int  # per path
    latency_blocks: int  # the paths alternate this many times
    warmup: int
    throughput_messages: int
    in_flight: int
    custody_messages: int
    stages: tuple[int, ...]
    join_batch: int
    settle: float
    idle_seconds: float
    idle_tries: int


FULL = Plan(
    latency_rounds=500,
    latency_blocks=10,
    warmup=20,
    throughput_messages=500,
    in_flight=8,
    custody_messages=500,
    stages=(10, 25, 50),
    join_batch=5,
    settle=65.0,
    idle_seconds=60.0,
    idle_tries=5,
)
QUICK = Plan(
    latency_rounds=40,
    latency_blocks=4,
    warmup=5,
    throughput_messages=40,
    in_flight=4,
    custody_messages=40,
    stages=(4,),
    join_batch=4,
    settle=2.0,
    idle_seconds=3.0,
    idle_tries=1,
)


def ratio(a: float, b: float) -> str:
    return f"x{a / b:.2f}" if b else "x-"


async def in_thread(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A blocking call (a CLI run in a namespace) off the event loop."""
    return await anyio.to_thread.run_sync(functools.partial(func, *args, **kwargs))


async def register(client: Client, person: str, name: str) -> str:
    """A session on the client's machine, held live by the client's connection; its mailbox key."""
    key = f"{person}-{name}"
    session = {"key": key, "agent": "codex", "cwd": f"/src/{name}", "name": name}
    await client.call("register", session=session, hold=True)
    return key


async def links(client: Client) -> dict[str, Any]:
    found: dict[str, Any] = (await client.call("mesh"))["links"]
    return found


# ---- 1 and 2: the simulated internet ----------------------------------------------------------


def anchored_team(net: Internet) -> tuple[NetHive, NetHive, NetHive]:
    """As tests/reach/test_relay.py: ops's machine on the internet founds acme as its anchor, alice's
    and bob's laptops behind their NATs join it with its team link."""
    anchor = net.hive("pub", "ops", "vps", config=LIFTED)
    alice = net.hive("hA", "alice", "lap-a", config=LIFTED)
    bob = net.hive("hB", "bob", "lap-b", config=LIFTED)
    anchor.cli("init", "acme", "--as", "ops", "--anchor", check=True)
    link = anchor.cli_json("invite")["link"]
    for laptop, person in ((alice, "alice"), (bob, "bob")):
        laptop.cli("join", link, "--as", person, check=True)
    return anchor, alice, bob


async def bench_latency(
    net: Internet, anchor: NetHive, alice: NetHive, bob: NetHive, plan: Plan, results: dict[str, float]
) -> None:
    section("1. send -> inbox: relayed through the anchor, against direct to the anchor's machine")
    anchor_pid = anchor.pid()
    async with AsyncExitStack() as stack:
        sender = await stack.enter_async_context(Client.open(alice.paths, autostart=False))
        on_anchor = await stack.enter_async_context(Client.open(anchor.paths, autostart=False))
        on_bob = await stack.enter_async_context(Client.open(bob.paths, autostart=False))
        local = await register(on_anchor, "ops", "local")
        api = await register(on_bob, "bob", "api")

        async def ready() -> bool:
            live = {s["address"] for s in (await sender.call("who"))["sessions"] if s["live"]}
            return {"ops/local", "bob/api"} <= live and len(await links(sender)) == 2

        await wait_until(ready, 60, interval=0.05)
        paths = sorted((row["relayed"], row["address"]) for row in (await links(sender)).values())
        print(f"alice's links: {', '.join(f'{a} (relayed)' if r else f'{a} (direct)' for r, a in paths)}")
        readers = {
            "direct": (await stack.enter_async_context(Client.open(anchor.paths, autostart=False)), "ops/local", local),
            "relayed": (await stack.enter_async_context(Client.open(bob.paths, autostart=False)), "bob/api", api),
        }
        waits: dict[str, list[float]] = {"direct": [], "relayed": []}
        sends: dict[str, list[float]] = {"direct": [], "relayed": []}
        anchor_cpu = dict.fromkeys(waits, 0.0)
        for reader, target, session in readers.values():  # first sends open flows: not timed
            await latency(sender, reader, target, session, plan.warmup)
        per_block = max(plan.latency_rounds // plan.latency_blocks, 1)
        for block in range(plan.latency_blocks):
            order = ("direct", "relayed") if block % 2 == 0 else ("relayed", "direct")
            for label in order:
                reader, target, session = readers[label]
                before = cpu_seconds(anchor_pid)
                got, took = await latency(sender, reader, target, session, per_block)
                anchor_cpu[label] += cpu_seconds(anchor_pid) - before
                waits[label] += got
                sends[label] += took
    for label, title in (("direct", "direct, alice -> ops/local"), ("relayed", "relayed, alice -> bob/api")):
        results[f"{label}_p50"], results[f"{label}_p99"] = percentile(waits[label], 50), percentile(waits[label], 99)
        print(
            f"{title:<28} {len(waits[label]):>4} rounds: send -> inbox p50 {ms(results[f'{label}_p50'])}, "
            f"p99 {ms(results[f'{label}_p99'])}; send call p50 {ms(percentile(sends[label], 50))}, "
            f"p99 {ms(percentile(sends[label], 99))}; anchor CPU {ms(anchor_cpu[label] / len(waits[label]))}/message"
        )
    print(
        f"relayed / direct: send -> inbox p50 {ratio(results['relayed_p50'], results['direct_p50'])}, "
        f"p99 {ratio(results['relayed_p99'], results['direct_p99'])}; send call p50 "
        f"{ratio(percentile(sends['relayed'], 50), percentile(sends['direct'], 50))} (goal: relayed under x2)"
    )


async def bench_custody(
    net: Internet, anchor: NetHive, alice: NetHive, bob: NetHive, plan: Plan, results: dict[str, float]
) -> None:
    section("2. custody: sends the anchor holds while bob's laptop is off, and their hand-over")
    anchor_pid = anchor.pid()
    async with AsyncExitStack() as stack:
        senders = [
            await stack.enter_async_context(Client.open(alice.paths, autostart=False)) for _ in range(plan.in_flight)
        ]
        on_anchor = await stack.enter_async_context(Client.open(anchor.paths, autostart=False))
        rates: dict[str, float] = {}
        n = plan.throughput_messages
        # Baselines while bob's laptop is up: the same sends to the anchor's own session (one link,
        # answered delivered) and to bob's (through the anchor, answered by bob).
        for label, target in (("direct", "ops/local"), ("relayed, online", "bob/api")):
            for flight in (1, plan.in_flight):
                cpu = cpu_seconds(anchor_pid)
                took, states = await pump(senders[:flight], target, n)
                rates[f"{label} {flight}"] = n / took
                print(
                    f"{label:<16} {n} messages, {flight:>2} in flight: {n / took:>6.0f} msg/s; states {states}; "
                    f"anchor CPU {ms((cpu_seconds(anchor_pid) - cpu) / n)}/message"
                )
        async with Client.open(bob.paths, autostart=False) as on_bob:
            unread_before = (await on_bob.call("unread", session="bob-api"))["count"]
        anchor_links_before = set(await links(on_anchor))
        await in_thread(bob.stop)

        async def bob_gone() -> bool:
            return len(await links(on_anchor)) == len(anchor_links_before) - 1 and len(await links(senders[0])) == 1

        await wait_until(bob_gone, 60, interval=0.05)
        (bob_key,) = anchor_links_before - set(await links(on_anchor))
        held_states: dict[str, int] = {}
        for flight in (1, plan.in_flight):
            cpu = cpu_seconds(anchor_pid)
            took, states = await pump(senders[:flight], "bob/api", plan.custody_messages)
            for state, count in states.items():
                held_states[state] = held_states.get(state, 0) + count
            rates[f"custody {flight}"] = plan.custody_messages / took
            print(
                f"{'custody, bob off':<16} {plan.custody_messages} messages, {flight:>2} in flight: "
                f"{plan.custody_messages / took:>6.0f} msg/s; states {states}; "
                f"anchor CPU {ms((cpu_seconds(anchor_pid) - cpu) / plan.custody_messages)}/message"
            )
        held = (await on_anchor.call("mesh"))["custody"].get(bob_key, 0)
        total = 2 * plan.custody_messages
        print(f"the anchor holds {held} frames for bob's laptop ({total} sent; states {held_states})")
        for flight in (1, plan.in_flight):
            results[f"custody_{flight}"] = rates[f"custody {flight}"]
            results[f"direct_rate_{flight}"] = rates[f"direct {flight}"]
            results[f"relayed_rate_{flight}"] = rates[f"relayed, online {flight}"]
            custody, direct, online = (rates[f"{k} {flight}"] for k in ("custody", "direct", "relayed, online"))
            print(
                f"custody / direct, {flight:>2} in flight: {ratio(custody, direct)}; "
                f"custody / relayed online: {ratio(custody, online)}"
            )
        # bob's laptop starts: the anchor hands over what it holds once bob links.
        anchor_cpu = cpu_seconds(anchor_pid)
        started = time.perf_counter()
        await in_thread(bob.start)
        up = time.perf_counter()
        marks: dict[str, float] = {}
        async with Client.open(bob.paths, autostart=False) as on_bob:

            async def handed_over() -> bool:
                now = time.perf_counter()
                if "linked" not in marks and any(not row["relayed"] for row in (await links(on_bob)).values()):
                    marks["linked"] = now
                if "linked" in marks and "all" not in marks:
                    count = (await on_bob.call("unread", session="bob-api"))["count"]
                    if count >= unread_before + total:
                        marks["all"] = now
                if "all" in marks:
                    if not (await on_anchor.call("mesh"))["custody"].get(bob_key):
                        marks["released"] = now
                        return True
                return False

            await wait_until(handed_over, 300, interval=0.005)
            final = (await on_bob.call("unread", session="bob-api"))["count"] - unread_before
        anchor_cpu = cpu_seconds(anchor_pid) - anchor_cpu
    handover = marks["all"] - marks["linked"]
    results["handover"] = handover
    results["handover_rate"] = total / handover if handover else math.nan
    results["custody_total"] = total
    print(
        f"bob's laptop started in {up - started:.2f} s, linked to the anchor {marks['linked'] - started:.2f} s after "
        f"its start; all {total} held messages in bob/api's mailbox {handover:.3f} s after the link "
        f"({results['handover_rate']:.0f} msg/s; {final} new there); the anchor held nothing "
        f"{marks['released'] - marks['linked']:.3f} s after the link; anchor CPU {anchor_cpu:.2f} s"
    )


async def relay_sections(net: Internet, plan: Plan, results: dict[str, float]) -> None:
    anchor, alice, bob = await in_thread(anchored_team, net)
    await bench_latency(net, anchor, alice, bob, plan, results)
    await bench_custody(net, anchor, alice, bob, plan, results)


# ---- 3: many members ---------------------------------------------------------------------------


class Counters:
    """nftables counters in the public machine's namespace: UDP to and from the anchor's port, and
    to the dead port members advertise (their dial attempts to each other)."""

    def __init__(self, net: Internet, port: int) -> None:
        self.net = net
        rules = f"""
table inet {NFT_TABLE} {{
    counter anchor_in {{}}
    counter anchor_out {{}}
    counter dead_dials {{}}
    chain input {{
        type filter hook input priority filter; policy accept;
        udp dport {port} counter name anchor_in
        udp dport 9 counter name dead_dials
    }}
    chain output {{
        type filter hook output priority filter; policy accept;
        udp sport {port} counter name anchor_out
    }}
}}
"""
        net.run("pub", "nft", "-f", "-", input=rules)

    def read(self) -> dict[str, tuple[int, int]]:
        listed = json.loads(self.net.run("pub", "nft", "-j", "list", "counters", "table", "inet", NFT_TABLE).stdout)
        return {
            item["counter"]["name"]: (int(item["counter"]["packets"]), int(item["counter"]["bytes"]))
            for item in listed["nftables"]
            if "counter" in item
        }


@dataclass
class Member:
    hive: NetHive
    person: str
    client: Client | None = None
    pid: int = 0


def join(member: Member, link: str) -> None:
    """``hive join`` in the namespace: it starts the member's sidecar there, which joins the team."""
    member.hive.cli("join", link, "--as", member.person, check=True, timeout=180)


async def relayed_mesh(on_anchor: Client, members: list[Member], n: int) -> str:
    """The anchor's key once it links all ``n`` members directly and each member links it directly
    and the others relayed; else ""."""
    seen = await links(on_anchor)
    if len(seen) < n or any(row["relayed"] for row in seen.values()):
        return ""
    anchor_key = ""
    for member in members:
        assert member.client is not None
        theirs = await links(member.client)
        direct = [key for key, row in theirs.items() if not row["relayed"]]
        if len(theirs) < n or len(direct) != 1 or (anchor_key and direct[0] != anchor_key):
            return ""
        anchor_key = direct[0]
    return anchor_key


@dataclass
class Idle:
    members: int
    anchor_cpu: float  # seconds over the window
    rss: float  # MB
    hwm: float
    packets_in: int
    packets_out: int
    bytes_in: int
    bytes_out: int
    dead: int
    members_cpu: float
    members_rss: list[float]
    log_bytes: int
    window: float


@dataclass(frozen=True)
class Snapshot:
    at: float
    anchor_cpu: float
    traffic: dict[str, tuple[int, int]]
    log_size: int
    members_cpu: float


def snapshot(anchor: NetHive, anchor_pid: int, members: list[Member], counters: Counters) -> Snapshot:
    log = anchor.home / "sidecar.log"
    return Snapshot(
        at=time.perf_counter(),
        anchor_cpu=cpu_seconds(anchor_pid),
        traffic=counters.read(),
        log_size=log.stat().st_size if log.exists() else 0,
        members_cpu=sum(cpu_seconds(m.pid) for m in members),
    )


def between(first: Snapshot, last: Snapshot, anchor_pid: int, members: list[Member]) -> Idle:
    """What happened from ``first`` to ``last``; memory as it is now."""

    def delta(name: str, index: int) -> int:
        return last.traffic.get(name, (0, 0))[index] - first.traffic.get(name, (0, 0))[index]

    return Idle(
        members=len(members),
        anchor_cpu=last.anchor_cpu - first.anchor_cpu,
        rss=status_kb(anchor_pid, "VmRSS") / 1024,
        hwm=status_kb(anchor_pid, "VmHWM") / 1024,
        packets_in=delta("anchor_in", 0),
        packets_out=delta("anchor_out", 0),
        bytes_in=delta("anchor_in", 1),
        bytes_out=delta("anchor_out", 1),
        dead=delta("dead_dials", 0),
        members_cpu=last.members_cpu - first.members_cpu,
        members_rss=[status_kb(m.pid, "VmRSS") / 1024 for m in members],
        log_bytes=last.log_size - first.log_size,
        window=last.at - first.at,
    )


async def settle_then_idle(
    anchor: NetHive, anchor_pid: int, members: list[Member], counters: Counters, plan: Plan
) -> tuple[Idle, Idle, bool]:
    """(settling, idle, quiet): at least ``plan.settle`` seconds of settling, then idle windows of
    ``plan.idle_seconds`` until one is quiet (the anchor under :data:`QUIET` packets a second per
    link), at most ``plan.idle_tries``; the windows before the quiet one count as settling."""
    take = functools.partial(snapshot, anchor, anchor_pid, members, counters)
    start = await in_thread(take)
    await anyio.sleep(plan.settle)
    opened = await in_thread(take)
    for attempt in range(plan.idle_tries):
        await anyio.sleep(plan.idle_seconds)
        closed = await in_thread(take)
        idle = between(opened, closed, anchor_pid, members)
        quiet = not members or (idle.packets_in + idle.packets_out) / idle.window / len(members) < QUIET
        if quiet or attempt == plan.idle_tries - 1:
            return between(start, opened, anchor_pid, members), idle, quiet
        opened = closed
    raise AssertionError("no idle window")  # idle_tries is at least 1


def show_idle(row: Idle, base: Idle | None, what: str = "idle") -> None:
    w = row.window
    line = (
        f"{row.members:>3} members, {what}: anchor CPU {row.anchor_cpu / w * 100:.2f}% of a core "
        f"({row.anchor_cpu:.2f} s in {w:.0f} s), VmRSS {row.rss:.1f} MB, VmHWM {row.hwm:.1f} MB; "
        f"UDP at the anchor {row.packets_in / w:.1f} pkt/s in, {row.packets_out / w:.1f} pkt/s out "
        f"({(row.bytes_in + row.bytes_out) / w / 1024:.1f} KB/s); its log +{row.log_bytes / w:.0f} B/s"
    )
    print(line)
    if row.members:
        rss = row.members_rss
        print(
            f"     members' own: CPU {row.members_cpu / w * 100:.1f}% of a core in all "
            f"({row.members_cpu / w / row.members * 1000:.1f} ms/s each), RSS mean {sum(rss) / len(rss):.1f} MB, "
            f"max {max(rss):.1f} MB; dial attempts at dead addresses {row.dead / w:.1f} pkt/s"
        )
    if base is not None and row.members:
        cpu = (row.anchor_cpu / w - base.anchor_cpu / base.window) / row.members
        print(
            f"     against 0 members: CPU {ratio(row.anchor_cpu / w, base.anchor_cpu / base.window)} "
            f"({cpu * 1000:+.2f} ms/s per link), RSS +{row.rss - base.rss:.1f} MB "
            f"({(row.rss - base.rss) * 1024 / row.members:+.0f} KB per link), "
            f"{(row.packets_in + row.packets_out) / w / row.members:.2f} pkt/s per link (in + out)"
        )


async def bench_members(net: Internet, plan: Plan, results: dict[str, float]) -> None:
    stages = sorted(set(plan.stages))
    section(f"3. one anchor with {', '.join(map(str, stages))} members on this host, idle")
    anchor = net.hive("pub", "ops", "anchor", config=LIFTED)
    await in_thread(anchor.cli, "init", "bench", "--as", "ops", "--anchor", check=True)
    link = (await in_thread(anchor.cli_json, "invite"))["link"]
    members: list[Member] = []
    try:
        await grow_and_measure(net, anchor, link, members, plan, stages, results)
    finally:
        # Stopped here, all at once (the simulated internet's teardown runs `hive stop` per machine,
        # which for fifty takes long); the teardown then checks that none is left.
        await in_thread(stop_members, [m for m in members if m.pid])


async def grow_and_measure(
    net: Internet,
    anchor: NetHive,
    link: str,
    members: list[Member],
    plan: Plan,
    stages: list[int],
    results: dict[str, float],
) -> None:
    anchor_pid = anchor.pid()
    rows: list[Idle] = []
    async with AsyncExitStack() as stack:
        on_anchor = await stack.enter_async_context(Client.open(anchor.paths, autostart=False))
        counters = await in_thread(Counters, net, (await on_anchor.call("mesh"))["listening"])
        _, base, _ = await settle_then_idle(
            anchor, anchor_pid, [], counters, replace(plan, settle=min(plan.settle, 10))
        )
        show_idle(base, None)
        rows.append(base)
        for target in stages:
            new = [
                Member(
                    net.hive("pub", f"p{i:02d}", f"m{i:02d}", config=LIFTED + f'advertise = ["{DEAD}"]\n'), f"p{i:02d}"
                )
                for i in range(len(members) + 1, target + 1)
            ]
            started = time.perf_counter()
            cpu_before, traffic_before = cpu_seconds(anchor_pid), await in_thread(counters.read)
            for offset in range(0, len(new), plan.join_batch):
                async with anyio.create_task_group() as tg:
                    for member in new[offset : offset + plan.join_batch]:
                        tg.start_soon(in_thread, join, member, link)
            joined = time.perf_counter()
            for member in new:
                member.pid = member.hive.pid()
                member.client = await stack.enter_async_context(Client.open(member.hive.paths, autostart=False))
                await register(member.client, member.person, "work")
            members += new
            n = len(members)
            registered = time.perf_counter()
            anchor_key = ""

            async def converged(members: list[Member] = members, n: int = n) -> bool:
                nonlocal anchor_key
                anchor_key = await relayed_mesh(on_anchor, members, n)
                return bool(anchor_key)

            settled = await wait_until(converged, 600, interval=0.5)
            cpu_joins, traffic = cpu_seconds(anchor_pid) - cpu_before, await in_thread(counters.read)
            moved = sum(traffic[k][1] - traffic_before.get(k, (0, 0))[1] for k in ("anchor_in", "anchor_out"))
            direct_to_members = 0
            for member in members:
                assert member.client is not None
                for key, row in (await links(member.client)).items():
                    direct_to_members += key != anchor_key and not row["relayed"]
            print(
                f"{n} members: {len(new)} joined ({plan.join_batch} at a time) in {joined - started:.1f} s; every "
                f"member linked to the anchor directly and to the {n - 1} others relayed {settled:.1f} s after the "
                f"last registration ({registered - started:.1f} s after the first join); direct links between "
                f"members: {direct_to_members}"
            )
            print(
                f"     joining until then: anchor CPU {cpu_joins:.2f} s, {moved / 2**20:.1f} MB through its port "
                f"({cpu_joins / len(new) * 1000:.0f} ms and {moved / len(new) / 1024:.0f} KB per member joining)"
            )
            wave, row, quiet = await settle_then_idle(anchor, anchor_pid, members, counters, plan)
            show_idle(wave, None, f"settling ({wave.window:.0f} s from then until the idle window)")
            show_idle(row, base, "idle" if quiet else f"idle, NOT QUIET after {plan.idle_tries} windows")
            rows.append(row)
            results[f"settled_{n}"] = settled
    top = rows[-1]
    results["wave_cpu"] = wave.anchor_cpu / wave.window
    results["wave_s"] = wave.window
    results["wave_pkts"] = (wave.packets_in + wave.packets_out) / wave.window
    results["members"] = top.members
    results["idle_cpu_base"] = base.anchor_cpu / base.window
    results["idle_cpu"] = top.anchor_cpu / top.window
    results["rss_base"], results["rss"], results["hwm"] = base.rss, top.rss, top.hwm
    results["pkts"] = (top.packets_in + top.packets_out) / top.window
    results["member_rss_mean"] = sum(top.members_rss) / len(top.members_rss)
    results["member_rss_max"] = max(top.members_rss)
    print("anchor with  N members: idle CPU, VmRSS, per link against 0 members")
    for row in rows:
        cpu = row.anchor_cpu / row.window
        per = (cpu - results["idle_cpu_base"]) / row.members * 1000 if row.members else math.nan
        mem = (row.rss - base.rss) * 1024 / row.members if row.members else math.nan
        print(
            f"  {row.members:>3}: {cpu * 100:6.2f}% of a core, {row.rss:6.1f} MB"
            + (f"   {per:+.2f} ms CPU/s and {mem:+.0f} KB per link" if row.members else "   (baseline)")
        )


def stop_members(members: list[Member]) -> None:
    for member in members:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member.pid, 15)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(process_gone(m.pid) for m in members):
        time.sleep(0.1)


# ---- running it --------------------------------------------------------------------------------


def run(plan: Plan, sections: set[int]) -> dict[str, float]:
    results: dict[str, float] = {}
    if sections & {1, 2}:
        with simulated_internet() as net:
            anyio.run(relay_sections, net, plan, results)
    if 3 in sections:
        with simulated_internet() as net:
            anyio.run(bench_members, net, plan, results)
    return results


def summary(plan: Plan, results: dict[str, float]) -> None:
    section("summary ==")

    def get(key: str) -> float:
        return results.get(key, math.nan)

    flight = plan.in_flight
    rows = [
        ("relayed send -> inbox p50", ms(get("relayed_p50")), f"direct {ms(get('direct_p50'))}"),
        ("relayed send -> inbox p99", ms(get("relayed_p99")), f"direct {ms(get('direct_p99'))}"),
        (
            "  relayed / direct p50, p99",
            f"{ratio(get('relayed_p50'), get('direct_p50'))}, {ratio(get('relayed_p99'), get('direct_p99'))}",
            "goal < x2",
        ),
        (
            "custody anchored, 1 in flight",
            f"{get('custody_1'):.0f} msg/s",
            f"direct {get('direct_rate_1'):.0f}, {ratio(get('custody_1'), get('direct_rate_1'))}",
        ),
        (
            f"custody anchored, {flight} in flight",
            f"{get(f'custody_{flight}'):.0f} msg/s",
            f"direct {get(f'direct_rate_{flight}'):.0f}, "
            f"{ratio(get(f'custody_{flight}'), get(f'direct_rate_{flight}'))}",
        ),
        (
            "custody hand-over",
            f"{get('handover'):.2f} s",
            f"{get('custody_total'):.0f} messages, {get('handover_rate'):.0f} msg/s after the link",
        ),
        (
            f"anchor idle CPU, {get('members'):.0f} members",
            f"{get('idle_cpu') * 100:.2f}%",
            f"0 members {get('idle_cpu_base') * 100:.2f}% (of one core)",
        ),
        (
            f"anchor VmRSS, {get('members'):.0f} members",
            f"{get('rss'):.1f} MB",
            f"0 members {get('rss_base'):.1f} MB; VmHWM {get('hwm'):.1f} MB",
        ),
        ("anchor UDP at idle", f"{get('pkts'):.1f} pkt/s", "in + out"),
        (
            "  settling after the last joins",
            f"{get('wave_cpu') * 100:.2f}%",
            f"anchor CPU, {get('wave_pkts'):.1f} pkt/s, over {get('wave_s'):.0f} s",
        ),
        ("member RSS (mean/max)", f"{get('member_rss_mean'):.1f} / {get('member_rss_max'):.1f} MB", ""),
    ]
    for name, value, aside in rows:
        print(f"{name:<34} {value:>16}   {aside}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: few rounds, 4 members, short windows")
    parser.add_argument("--stages", help="members in section 3, comma separated (default 10,25,50; quick 4)")
    parser.add_argument("--idle", type=float, help="seconds of each idle window in section 3 (default 60; quick 3)")
    parser.add_argument("--sections", default="1,2,3", help="which sections to run (default 1,2,3)")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    if args.stages:
        plan = replace(plan, stages=tuple(max(int(s), 1) for s in args.stages.split(",")))
    if args.idle:
        plan = replace(plan, idle_seconds=args.idle)
    sections = {int(s) for s in args.sections.split(",")}
    if os.geteuid() != 0 or shutil.which("nft") is None:
        print("this benchmark makes network namespaces: run it as root, with nftables installed", file=sys.stderr)
        return 2
    print(
        f"hive relay benchmark on {platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{plan}; load average {os.getloadavg()[0]:.1f} (other work on this host skews every figure)",
        flush=True,
    )
    results = run(plan, sections)
    summary(plan, results)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    print("every sidecar stopped, the namespaces deleted and the state folders removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
