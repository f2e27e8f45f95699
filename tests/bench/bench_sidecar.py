"""Benchmark of one real sidecar: socket round trip, durable sends, delivery latency, idle cost.

Run it from the repository root with the project's venv:

    /work/venv/bin/python tests/bench/bench_sidecar.py           # full run, about 80 s
    /work/venv/bin/python tests/bench/bench_sidecar.py --quick   # smoke run, about 10 s

It starts a real sidecar (``python -m hive.sidecar``) on a fresh temporary ``HIVE_HOME`` under
/tmp, talks to it only through the public client library over its unix socket, stops it with
the ``shutdown`` op at the end and removes the folder. It prints four sections, then a table
that puts each figure next to its aim from issue 2. Nothing is asserted on the numbers: the
machines that run this are small and noisy, so the figures are for people to read.

1. ping round trip: p50 and p99 of sequential ``ping`` calls (one in flight). Next to it, the
   same client against a trivial NDJSON echo server (this script with ``--echo-server``, a
   separate process on the same interpreter and anyio stack, answering each line with a
   pong). Their ratio is what the sidecar's own dispatch costs on top of the socket, JSON and
   event loop, which no sidecar could avoid.
2. durable send throughput: messages per second for sends pipelined with a bounded number in
   flight over a few connections. The sidecar commits every message to disk (SQLite WAL,
   ``synchronous=FULL``) before it replies, and concurrent sends share one commit (group
   commit). The sequential figure (one in flight) shows what a lone writer pays: one fsync
   per message.
3. send -> inbox latency: a reader long-polls ``inbox`` (``wait: 30``) for its session; the
   time runs from just before ``send`` until the reader's poll returns the message. Messages
   go one at a time, each confirmed with ``delivered`` before the next poll. The sender waits
   a short settle time after the reader asks, so that the poll is parked when the message
   lands and the figure is the wake-up path rather than a race with the reader's own query.
4. idle cost: VmRSS and VmHWM (peak) from /proc/<pid>/status, and CPU from the utime+stime
   deltas in /proc/<pid>/stat over an idle window (60 s; 5 s with --quick) during which one
   client stays connected with a long poll parked, as an MCP server would leave it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import platform
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from hive.sidecar import __version__
from hive.sidecar.base.paths import StatePaths
from hive.sidecar.client import Client

START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
# Long enough for the reader's poll to get past its own bookkeeping (a durable last-seen write
# and an unread query) and park, short enough that a thousand rounds stay quick.
SETTLE = 0.010
BODY = "benchmark message: " + "x" * 180  # about the size of a short agent note


@dataclass(frozen=True)
class Plan:
    pings: int
    sends: int
    sequential_sends: int
    in_flight: int
    connections: int
    latency_rounds: int
    idle_seconds: float


FULL = Plan(
    pings=5_000,
    sends=10_000,
    sequential_sends=1_000,
    in_flight=64,
    connections=4,
    latency_rounds=1_000,
    idle_seconds=60.0,
)
QUICK = Plan(
    pings=500, sends=1_000, sequential_sends=100, in_flight=64, connections=4, latency_rounds=100, idle_seconds=5.0
)


@dataclass
class Results:
    ping_p50: float = math.nan
    ping_p99: float = math.nan
    echo_p50: float = math.nan
    echo_p99: float = math.nan
    pipelined_rate: float = math.nan
    sequential_rate: float = math.nan
    burst_cpu: float = math.nan
    latency_p50: float = math.nan
    latency_p99: float = math.nan
    rss_mb: float = math.nan
    hwm_mb: float = math.nan
    idle_cpu: float = math.nan


# ---- small helpers --------------------------------------------------------------------------


def percentile(samples: list[float], pct: float) -> float:
    """Nearest-rank percentile: always a value that was actually observed."""
    ordered = sorted(samples)
    rank = max(math.ceil(pct / 100 * len(ordered)), 1)
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    # The command name may hold spaces or parentheses, so count fields after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def filesystem_of(path: Path) -> str:
    """The mount type under ``path``: a tmpfs would make the durability figures meaningless."""
    best, kind = "", "?"
    with open("/proc/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            parts = line.split()
            mount_point, fs_type = parts[1], parts[2]
            if str(path).startswith(mount_point) and len(mount_point) > len(best):
                best, kind = mount_point, fs_type
    return kind


def section(title: str) -> None:
    print(f"\n== {title} ==", flush=True)


@contextlib.asynccontextmanager
async def clients(paths: StatePaths, count: int) -> AsyncIterator[list[Client]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(Client.open(paths, autostart=False)) for _ in range(count)]


# ---- processes --------------------------------------------------------------------------------


def start_sidecar(home: Path) -> subprocess.Popen[bytes]:
    """Start a sidecar on ``home`` and return once it listens.

    Started here rather than through the client's autostart so that this script owns the
    process: it knows the pid to read /proc from and can reap it at the end.
    """
    read_fd, write_fd = os.pipe()
    env = dict(os.environ, HIVE_HOME=str(home), HIVE_PERSON="bench")
    with open(home / "sidecar.stderr", "ab") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "hive.sidecar", "--ready-fd", str(write_fd)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            pass_fds=(write_fd,),
            env=env,
            cwd=home,
        )
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], START_TIMEOUT)
        if not ready or not os.read(read_fd, 16).startswith(b"ready"):
            process.kill()
            process.wait()
            log = (home / "sidecar.stderr").read_text(errors="replace")
            raise SystemExit(f"the sidecar did not start within {START_TIMEOUT:.0f} s:\n{log}")
    finally:
        os.close(read_fd)
    return process


def start_echo_server(folder: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--echo-server", str(folder)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT)
    if not ready or process.stdout.readline().strip() != "ready":
        process.kill()
        process.wait()
        raise SystemExit("the echo server did not start")
    return process


def stop_process(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_echo_server(folder: Path) -> None:
    """The baseline: read a line, parse it, answer a pong; nothing else."""

    async def handle(stream: SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            while True:
                try:
                    line = await reader.receive_until(b"\n", 1 << 20)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                    return
                request = json.loads(line)
                reply = {"id": request.get("id"), "ok": True, "result": {"pong": True}}
                await stream.send((json.dumps(reply, separators=(",", ":")) + "\n").encode())

    async def serve() -> None:
        # The same socket name the sidecar uses, so the unchanged hive client can connect to it.
        listener = await anyio.create_unix_listener(StatePaths(folder).socket)
        print("ready", flush=True)
        async with listener:
            await listener.serve(handle)

    anyio.run(serve)


# ---- the four measurements --------------------------------------------------------------------


async def ping_times(paths: StatePaths, count: int) -> list[float]:
    async with Client.open(paths, autostart=False) as client:
        for _ in range(min(count // 10, 200)):
            await client.call("ping")  # warm up: first calls pay for imports and allocations
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            await client.call("ping")
            samples.append(time.perf_counter() - start)
    return samples


async def send_rate(connections: list[Client], to: str, count: int, in_flight: int) -> float:
    """Messages per second with ``in_flight`` concurrent senders spread over ``connections``."""
    numbers: Iterator[int] = iter(range(count))

    async def sender(client: Client) -> None:
        # One shared iterator: each worker takes the next number until all are sent.
        for number in numbers:
            await client.call("send", to=to, body=f"{BODY} {number}")

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(in_flight):
            tg.start_soon(sender, connections[index % len(connections)])
    return count / (time.perf_counter() - start)


async def delivery_latencies(reader: Client, sender: Client, session: str, address: str, rounds: int) -> list[float]:
    async def poll(polled: dict[str, Any]) -> None:
        reply = await reader.call("inbox", session=session, wait=30)
        polled["at"] = time.perf_counter()
        polled["ids"] = reply["ids"]

    samples = []
    for number in range(rounds):
        polled: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll, polled)
            await anyio.sleep(SETTLE)
            start = time.perf_counter()
            sent = await sender.call("send", to=address, body=f"{BODY} {number}")
        message_id = sent["results"][0]["id"]
        if polled["ids"] != [message_id]:
            raise SystemExit(f"the reader got {polled['ids']} instead of {message_id}")
        samples.append(polled["at"] - start)
        await reader.call("delivered", session=session, ids=polled["ids"])
    return samples


async def register(client: Client, key: str, cwd: Path) -> str:
    result = await client.call("register", session={"key": key, "agent": "bench", "cwd": str(cwd)})
    return str(result["address"])


async def measure(plan: Plan, paths: StatePaths, echo_paths: StatePaths, pid: int, results: Results) -> None:
    section(f"1. ping round trip ({plan.pings:,} sequential calls)")
    sidecar_pings = await ping_times(paths, plan.pings)
    echo_pings = await ping_times(echo_paths, plan.pings)
    results.ping_p50, results.ping_p99 = percentile(sidecar_pings, 50), percentile(sidecar_pings, 99)
    results.echo_p50, results.echo_p99 = percentile(echo_pings, 50), percentile(echo_pings, 99)
    print(f"sidecar ping     p50 {ms(results.ping_p50)}   p99 {ms(results.ping_p99)}")
    print(f"echo baseline    p50 {ms(results.echo_p50)}   p99 {ms(results.echo_p99)}")
    print(
        f"ratio            p50 {results.ping_p50 / results.echo_p50:.2f}x   "
        f"p99 {results.ping_p99 / results.echo_p99:.2f}x"
    )

    section(f"2. durable send throughput ({plan.sends:,} messages)")
    async with clients(paths, plan.connections) as conns:
        sink = await register(conns[0], "bench-sink", paths.home)
        before_cpu, before_wall = cpu_seconds(pid), time.perf_counter()
        results.pipelined_rate = await send_rate(conns, sink, plan.sends, plan.in_flight)
        results.burst_cpu = 100 * (cpu_seconds(pid) - before_cpu) / (time.perf_counter() - before_wall)
        results.sequential_rate = await send_rate(conns[:1], sink, plan.sequential_sends, 1)
    print(
        f"pipelined        {results.pipelined_rate:,.0f} messages/s   "
        f"({plan.in_flight} in flight over {plan.connections} connections; "
        f"sidecar CPU {results.burst_cpu:.0f}% of one core)"
    )
    print(
        f"sequential       {results.sequential_rate:,.0f} messages/s   "
        f"(1 in flight, {plan.sequential_sends:,} messages: one commit each)"
    )

    section(f"3. send -> inbox latency ({plan.latency_rounds:,} messages, one at a time)")
    async with clients(paths, 2) as (reader, sender):
        address = await register(reader, "bench-reader", paths.home / "reader")
        latencies = await delivery_latencies(reader, sender, "bench-reader", address, plan.latency_rounds)
    results.latency_p50, results.latency_p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(
        f"send -> inbox    p50 {ms(results.latency_p50)}   p99 {ms(results.latency_p99)}   "
        f"max {ms(max(latencies))}   (reader long-polls with wait=30; includes the durable commit)"
    )
    # The first delivery is the sidecar's first rendering of mail; one-time costs show up here.
    print(f"first delivery   {ms(latencies[0])}")

    section(f"4. idle sidecar ({plan.idle_seconds:.0f} s, one long poll parked)")
    async with clients(paths, 1) as (client,), anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(client.call, "inbox", session="bench-reader", wait=600))
        await anyio.sleep(0.5)  # let the poll park and the last writes settle before counting
        before_cpu, before_wall = cpu_seconds(pid), time.perf_counter()
        await anyio.sleep(plan.idle_seconds)
        used = cpu_seconds(pid) - before_cpu
        results.idle_cpu = 100 * used / (time.perf_counter() - before_wall)
        results.rss_mb = status_kb(pid, "VmRSS") / 1024
        results.hwm_mb = status_kb(pid, "VmHWM") / 1024
        tg.cancel_scope.cancel()
    print(f"RSS              {results.rss_mb:.1f} MB now, {results.hwm_mb:.1f} MB peak (VmHWM)")
    print(f"CPU              {results.idle_cpu:.3f} % ({used * 1000:.0f} ms of CPU in {plan.idle_seconds:.0f} s)")


def print_summary(results: Results) -> None:
    def verdict(ok: bool) -> str:
        return "meets" if ok else "MISSES"

    rows: list[tuple[str, str, str, str]] = [
        ("ping p50", ms(results.ping_p50), "< 0.5 ms", verdict(results.ping_p50 < 0.0005)),
        ("ping p99", ms(results.ping_p99), "", ""),
        ("ping p50 / echo baseline", f"{results.ping_p50 / results.echo_p50:.2f}x", "", ""),
        (
            "durable sends, pipelined",
            f"{results.pipelined_rate:,.0f} msg/s",
            ">= 3,000 msg/s",
            verdict(results.pipelined_rate >= 3000),
        ),
        ("durable sends, sequential", f"{results.sequential_rate:,.0f} msg/s", "", ""),
        ("send -> inbox p50", ms(results.latency_p50), "", ""),
        ("send -> inbox p99", ms(results.latency_p99), "", ""),
        ("idle CPU", f"{results.idle_cpu:.3f} %", "< 0.5 %", verdict(results.idle_cpu < 0.5)),
        ("RSS", f"{results.rss_mb:.1f} MB", "< 60 MB", verdict(results.rss_mb < 60)),
    ]
    header = ("figure", "measured", "aim", "")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    section("summary")
    print("  ".join(text.ljust(width) for text, width in zip(header, widths, strict=True)).rstrip())
    print(line)
    for row in rows:
        print("  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip())


def shutdown(paths: StatePaths, process: subprocess.Popen[bytes]) -> None:
    async def ask() -> None:
        async with Client.open(paths, autostart=False) as client:
            await client.call("shutdown")

    if process.poll() is None:
        with contextlib.suppress(Exception):
            anyio.run(ask)
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        stop_process(process)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (used by the test suite)")
    parser.add_argument("--echo-server", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.echo_server is not None:
        run_echo_server(args.echo_server)
        return 0
    plan = QUICK if args.quick else FULL

    home = Path(tempfile.mkdtemp(prefix="hive-bench-", dir="/tmp"))
    # The mesh on loopback and no mDNS: a benchmark has no teammates to find. Its sessions send far
    # more than agents would: the mail guards are lifted, or it would time their refusals.
    (home / "config.toml").write_text(
        '[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\nrate_limit = 1000000\nloop_limit = 1000000\n', encoding="utf-8"
    )
    echo_home = home / "echo"
    echo_home.mkdir(mode=0o700)
    print(f"hive {__version__} sidecar benchmark{' (quick)' if args.quick else ''}")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, HIVE_HOME {home} on {filesystem_of(home)}")
    results = Results()
    sidecar = start_sidecar(home)
    echo = start_echo_server(echo_home)
    try:
        anyio.run(functools.partial(measure, plan, StatePaths(home), StatePaths(echo_home), sidecar.pid, results))
    finally:
        stop_process(echo)
        shutdown(StatePaths(home), sidecar)
        shutil.rmtree(home, ignore_errors=True)
    print_summary(results)
    print(f"\nsidecar exited with {sidecar.returncode}; {home} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
