"""Benchmark of the mesh: real sidecars on loopback, each in its own HIVE_HOME (its own "machine").

Run it from the repository root with the project's venv:

    /work/venv/bin/python tests/bench/bench_mesh.py                 # full run: 50 machines
    /work/venv/bin/python tests/bench/bench_mesh.py --machines 20   # a smaller mesh
    /work/venv/bin/python tests/bench/bench_mesh.py --quick         # smoke run: 6 machines, few rounds

Machines are formed into a team the way people do it (``team_init``, ``team_invite``,
``team_join``), over the public client library; every figure crosses real QUIC links. Nothing
is asserted: the machines that run this are small and noisy, so the figures are for people.

1. send -> inbox latency between two machines: the recipient session long-polls ``inbox``
   (``wait: 30``) on machine B; the time runs from just before ``send`` on machine A until B's
   poll returns the message. The sender's ``send`` (which returns once B acknowledged) is timed too.
   Baseline, in the same run: the same path within machine A (a session of A's own). Then the
   mesh path again with a 16 KB attachment.
2. throughput between two machines: sends from several concurrent clients on A to one session
   on B, each returning once B has it on disk and acknowledged it.
3. presence propagation: B changes a session's ``doing``; A's ``who`` is polled every
   millisecond until it shows the change.
4. an N-machine mesh on this host (50 by default): one machine founds the team, the others join
   with its link (a few at a time), each registers a session; then the time until every machine
   is linked to every other and lists every session, and each sidecar's RSS.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from hive.sidecar.base.paths import StatePaths
from hive.sidecar.client import Client, start_detached

BODY = "benchmark message: " + "x" * 180


@dataclass(frozen=True)
class Plan:
    latency_rounds: int
    throughput_messages: int
    in_flight: int
    presence_rounds: int
    machines: int
    join_batch: int


FULL = Plan(latency_rounds=500, throughput_messages=2_000, in_flight=16, presence_rounds=100, machines=50, join_batch=6)
QUICK = Plan(latency_rounds=50, throughput_messages=200, in_flight=8, presence_rounds=20, machines=6, join_batch=3)


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return math.nan
    return ordered[max(math.ceil(pct / 100 * len(ordered)), 1) - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def section(title: str) -> None:
    print(f"\n== {title}", flush=True)


class Machine:
    def __init__(self, root: Path, index: int) -> None:
        self.index = index
        self.person = f"p{index}"
        self.home = root / f"m{index}"
        self.home.mkdir(mode=0o700)
        (self.home / "config.toml").write_text(
            # The benchmark sends far more than a person's agents would: lift the rate limits (60 a
            # minute by default) and the loop guard, or most of it would measure their refusals.
            f'person = "{self.person}"\nmachine = "m{index}"\n[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n'
            "rate_limit = 1000000\nloop_limit = 1000000\n",
            encoding="utf-8",
        )
        self.paths = StatePaths(self.home)
        self.client: Client

    def start(self) -> None:
        if not start_detached(self.paths, timeout=60):
            raise SystemExit(f"machine {self.index} did not start: {(self.home / 'sidecar.stderr').read_text()}")

    @property
    def pid(self) -> int:
        return int(self.paths.lock.read_text().strip())


async def wait_until(check: Callable[[], Awaitable[bool]], within: float, interval: float = 0.001) -> float:
    """Poll another process's state (there is no event to wait on across processes)."""
    start = time.perf_counter()
    with anyio.fail_after(within):
        while not await check():  # noqa: ASYNC110
            await anyio.sleep(interval)
    return time.perf_counter() - start


async def form_team(machines: list[Machine], batch: int) -> tuple[float, float]:
    """Found on the first machine, join the rest a few at a time; returns (joins took, first join at)."""
    founder = machines[0]
    await founder.client.call("team_init", team="bench", person=founder.person)
    link = (await founder.client.call("team_invite"))["link"]
    started = time.perf_counter()
    for offset in range(1, len(machines), batch):
        async with anyio.create_task_group() as tg:
            for machine in machines[offset : offset + batch]:
                tg.start_soon(lambda m=machine: m.client.call("team_join", link=link, person=m.person))
    return time.perf_counter() - started, started


async def register(machine: Machine, name: str) -> None:
    await machine.client.call(
        "register",
        session={"key": f"{machine.person}-{name}", "agent": "codex", "cwd": f"/src/{name}", "name": name},
        hold=True,
    )


async def pump(clients: list[Client], target: str, count: int) -> tuple[float, dict[str, int]]:
    """``count`` sends to ``target``, one client per message in flight; (seconds, states answered)."""
    remaining = iter(range(count))
    states: dict[str, int] = {}

    async def one(client: Client) -> None:
        for _ in remaining:
            result = await client.call("send", to=target, body=BODY, fyi=True)
            state = result["results"][0]["state"]
            states[state] = states.get(state, 0) + 1

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for client in clients:
            tg.start_soon(one, client)
    return time.perf_counter() - started, states


async def latency(
    sender: Client, reader: Client, target: str, session: str, rounds: int, body: str = BODY, **extra: Any
) -> tuple[list[float], list[float]]:
    """``rounds`` sends of ``body`` to ``target``, each taken by a long poll already parked on
    ``session``'s mailbox: the times from just before ``send`` until the poll returns it, and of the
    ``send`` calls."""
    waits, sends = [], []
    for _ in range(rounds):
        got: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:

            async def poll(got: dict[str, Any] = got) -> None:
                got.update(await reader.call("inbox", session=session, wait=30))
                got["at"] = time.perf_counter()

            tg.start_soon(poll)
            await anyio.sleep(0.005)  # let the poll park, so the figure is the wake-up path
            t0 = time.perf_counter()
            await sender.call("send", to=target, body=body, **extra)
            sends.append(time.perf_counter() - t0)
        waits.append(got["at"] - t0)
        await reader.call("delivered", session=session, ids=got["ids"])
    return waits, sends


async def bench_pair(a: Machine, b: Machine, plan: Plan, results: dict[str, float]) -> None:
    await register(b, "api")
    target = f"{b.person}/api"

    async def visible() -> bool:
        return any(s["address"] == target and s["live"] for s in (await a.client.call("who"))["sessions"])

    await wait_until(visible, 30)

    section("1. send -> inbox latency between two machines, against a one-machine baseline")
    # The baseline is the same path with no mesh in it: a send on machine A to a session on A,
    # taken by a parked long poll there; measured in this run, on this load, right before.
    await register(a, "local")
    project = a.home.parent / "bench-project"
    (project / ".git").mkdir(parents=True, exist_ok=True)
    attachment = project / "trace.txt"
    attachment.write_text("log line of a trace\n" * 800)  # 16 KB: a typical attached log or diff
    async with Client.open(a.paths, autostart=False) as local_reader, Client.open(b.paths, autostart=False) as reader:
        local = await latency(a.client, local_reader, f"{a.person}/local", f"{a.person}-local", plan.latency_rounds)
        remote = await latency(a.client, reader, target, f"{b.person}-api", plan.latency_rounds)
        # Files leave as the person sends them: at a terminal any text file of theirs, from a script
        # with no terminal only one in the folder the sending process runs in, as the kernel says.
        before = os.getcwd()
        os.chdir(project)
        try:
            files = await latency(
                a.client, reader, target, f"{b.person}-api", max(plan.latency_rounds // 5, 10), files=[str(attachment)]
            )
        finally:
            os.chdir(before)
    for label, (waits, sends) in (
        ("baseline, one machine", local),
        ("across the mesh", remote),
        ("across the mesh, 16 KB file", files),
    ):
        print(
            f"{label:<28} {len(waits):>4} rounds: send -> inbox p50 {ms(percentile(waits, 50))}, "
            f"p99 {ms(percentile(waits, 99))}; send call p50 {ms(percentile(sends, 50))}, "
            f"p99 {ms(percentile(sends, 99))}"
        )
    results["latency_p50"], results["latency_p99"] = percentile(remote[0], 50), percentile(remote[0], 99)
    results["baseline_p50"], results["baseline_p99"] = percentile(local[0], 50), percentile(local[0], 99)
    results["files_p50"], results["files_p99"] = percentile(files[0], 50), percentile(files[0], 99)
    print(
        f"mesh / baseline: p50 x{results['latency_p50'] / results['baseline_p50']:.2f}, "
        f"p99 x{results['latency_p99'] / results['baseline_p99']:.2f}; with a 16 KB file / without: "
        f"p50 x{results['files_p50'] / results['latency_p50']:.2f}"
    )

    section("2. throughput between two machines")
    count = plan.throughput_messages
    cpu_a, cpu_b = cpu_seconds(a.pid), cpu_seconds(b.pid)
    async with AsyncExitStack() as stack:
        senders = [
            await stack.enter_async_context(Client.open(a.paths, autostart=False)) for _ in range(plan.in_flight)
        ]
        elapsed, states = await pump(senders, target, count)
    results["throughput"] = count / elapsed
    print(
        f"{count} messages, {plan.in_flight} in flight: {results['throughput']:.0f} msg/s acknowledged "
        f"({elapsed:.2f} s); states {states}; CPU sender {cpu_seconds(a.pid) - cpu_a:.2f} s, "
        f"recipient {cpu_seconds(b.pid) - cpu_b:.2f} s"
    )

    section("3. presence propagation")
    samples = []
    for n in range(plan.presence_rounds):
        doing = f"round {n}"

        async def shows(doing: str = doing) -> bool:
            return any(s["doing"] == doing for s in (await a.client.call("who"))["sessions"])

        t0 = time.perf_counter()
        await b.client.call("set_status", session=f"{b.person}-api", doing=doing)
        await wait_until(shows, 10)
        samples.append(time.perf_counter() - t0)
    results["presence_p50"], results["presence_p99"] = percentile(samples, 50), percentile(samples, 99)
    print(
        f"{plan.presence_rounds} changes: visible on the other machine p50 {ms(results['presence_p50'])}, "
        f"p99 {ms(results['presence_p99'])} (polled every 1 ms)"
    )


async def bench_mesh(machines: list[Machine], plan: Plan, results: dict[str, float]) -> None:
    n = len(machines)
    section(f"4. a {n}-machine mesh on one host")
    joins, joins_started = await form_team(machines, plan.join_batch)
    for machine in machines:
        await register(machine, "work")
    registered = time.perf_counter()

    async def converged() -> bool:
        for machine in machines:
            links = len((await machine.client.call("mesh"))["links"])
            if links < n - 1:
                return False
            live = sum(1 for s in (await machine.client.call("who"))["sessions"] if s["live"])
            if live < n:
                return False
        return True

    await wait_until(converged, 300, interval=0.05)
    done = time.perf_counter()
    results["mesh_after_joins"] = done - registered
    results["mesh_total"] = done - joins_started
    rss = [status_kb(m.pid, "VmRSS") / 1024 for m in machines]
    results["rss_mean"], results["rss_max"] = sum(rss) / n, max(rss)
    cpu = sum(cpu_seconds(m.pid) for m in machines)
    print(
        f"{n} machines, {n * (n - 1) // 2} links, {n} sessions; joins ({plan.join_batch} at a time) took {joins:.2f} s"
    )
    print(
        f"every machine linked to every other and listing every session: {results['mesh_after_joins']:.2f} s "
        f"after the last join and registration, {results['mesh_total']:.2f} s after the first join"
    )
    print(
        f"RSS per sidecar: mean {results['rss_mean']:.1f} MB, max {results['rss_max']:.1f} MB; "
        f"CPU of all sidecars so far {cpu:.1f} s"
    )


async def started(machines: list[Machine]) -> AsyncExitStack:
    print(f"starting {len(machines)} sidecars ...", flush=True)
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for machine in machines:
            tg.start_soon(anyio.to_thread.run_sync, machine.start)
    print(f"started in {time.perf_counter() - t0:.1f} s", flush=True)
    stack = AsyncExitStack()
    for machine in machines:
        machine.client = await stack.enter_async_context(Client.open(machine.paths, autostart=False))
    return stack


def stop(machines: list[Machine]) -> None:
    for machine in machines:
        try:
            os.kill(machine.pid, 15)
        except (OSError, ValueError):
            pass


async def run(plan: Plan, root: Path) -> dict[str, float]:
    results: dict[str, float] = {}
    # Sections 1-3 on a team of two, with nothing else running; then the big mesh on its own.
    pair = [Machine(root, i + 1) for i in range(2)]
    try:
        async with await started(pair):
            await form_team(pair, 1)
            await bench_pair(pair[0], pair[1], plan, results)
    finally:
        stop(pair)
    machines = [Machine(root, i + 1) for i in range(2, 2 + max(plan.machines, 2))]
    try:
        async with await started(machines):
            await bench_mesh(machines, plan, results)
    finally:
        stop(machines)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 6 machines, few rounds")
    parser.add_argument("--machines", type=int, help="machines in the mesh section (default 50, quick 6)")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    if args.machines:
        plan = Plan(**{**plan.__dict__, "machines": max(args.machines, 2)})
    os.environ["HIVE_KEYRING"] = "off"  # many machines on one host: keys in their state folders
    root = Path(tempfile.mkdtemp(prefix="hive-mesh-bench-", dir="/tmp"))
    print(
        f"hive mesh benchmark on {platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{plan}; load average {os.getloadavg()[0]:.1f} (other work on this host skews every figure)"
    )
    try:
        results = anyio.run(run, plan, root)
    finally:
        time.sleep(1)
        shutil.rmtree(root, ignore_errors=True)
    section("summary ==")
    rows = [
        ("send -> inbox p50", ms(results.get("latency_p50", math.nan)), "< 5 ms"),
        ("send -> inbox p99", ms(results.get("latency_p99", math.nan)), ""),
        (
            "  baseline (one machine) p50/p99",
            f"{ms(results.get('baseline_p50', math.nan))} / {ms(results.get('baseline_p99', math.nan))}",
            "same run",
        ),
        (
            "  with a 16 KB file p50/p99",
            f"{ms(results.get('files_p50', math.nan))} / {ms(results.get('files_p99', math.nan))}",
            "",
        ),
        ("throughput", f"{results.get('throughput', math.nan):.0f} msg/s", ""),
        ("presence p50", ms(results.get("presence_p50", math.nan)), "< 50 ms"),
        (
            f"{plan.machines}-machine mesh converged",
            f"{results.get('mesh_after_joins', math.nan):.2f} s",
            "< 10 s (50 machines)",
        ),
        (
            "RSS per sidecar (mean/max)",
            f"{results.get('rss_mean', math.nan):.1f} / {results.get('rss_max', math.nan):.1f} MB",
            "< 80 MB",
        ),
    ]
    for name, value, aim in rows:
        print(f"{name:<32} {value:>20}   {aim}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    print(f"state folders under {root} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
