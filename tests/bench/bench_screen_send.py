"""What screening adds to a message between two machines: the send -> inbox latency of a 2 KB
message, and in the same run the time the screening of that same text takes.

Run it from the repository root with the project's venv:

    .venv/bin/python tests/bench/bench_screen_send.py           # 200 rounds
    .venv/bin/python tests/bench/bench_screen_send.py --quick   # 30 rounds

Two real sidecars on loopback (``bench_mesh``'s machines) form a team; a session on A sends a
2 KB message (a traceback and a question, no secret, nothing hostile) to a session on B whose
long poll is parked on ``inbox``. Every send passes outbound screening on A (secrets, and the
session's recent credential reads) and inbound screening on B (the rule set) before B answers.
Beside it, in this process and on the same text: ``find_secrets`` (what A adds) and
``inbound_hold`` (what B adds). The latency without screening is the measured one less those.
The first send pays detect-secrets' import (about 150-200 ms) in A's sidecar: a warm-up round
runs before the figures.

Measured on the 2-core dev machine (200 rounds, p50 / p99): between two machines send -> inbox
9.98 / 13.26 ms, find_secrets 1.19 ms and inbound_hold 0.98 ms: screening 2.18 ms, 22% of the
send; between two sessions of one machine 4.07 / 6.41 ms, of which screening 0.98 ms (24%). (Until
it sent the text it screens, it timed bench_mesh's 199-byte body against 2 KB of screening.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio
from bench_mesh import Machine, form_team, latency, percentile, register, started, stop, wait_until

from hive.sidecar.mail.screen import inbound_hold
from hive.sidecar.screening.outbound import find_secrets

TRACEBACK = "\n".join(
    [
        "the refresh endpoint fails since this morning's deploy, do you know why?",
        "Traceback (most recent call last):",
        *[
            f'  File "/src/api/handlers/auth_{n}.py", line {40 + n}, in refresh\n    token = session.renew(user)'
            for n in range(12)
        ],
        "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://api.internal/v2/renew",
        "I already tried clearing the cache; the staging config looks the same as last week.",
    ]
)
BODY = (TRACEBACK * 2)[:2048]


def timed(func: object, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        func()  # type: ignore[operator]
        samples.append(time.perf_counter() - t0)
    return samples


async def run(rounds: int, root: Path) -> None:
    pair = [Machine(root, 1), Machine(root, 2)]
    try:
        async with await started(pair):
            a, b = pair
            await form_team(pair, 1)
            await register(a, "web")
            await register(b, "api")
            target, session = f"{b.person}/api", f"{b.person}-api"

            async def visible() -> bool:
                found = await a.client.call("who")
                return any(s["address"] == target for s in found["sessions"])

            await wait_until(visible, 60, 0.05)
            sender = {"from": f"{a.person}-web"}
            await latency(a.client, b.client, target, session, 3, BODY, **sender)  # warm-up: imports
            waits, _ = await latency(a.client, b.client, target, session, rounds, BODY, **sender)
            # Between two sessions of one machine only inbound screening runs (nothing leaves it).
            await register(a, "docs")
            here = await latency(a.client, a.client, f"{a.person}/docs", f"{a.person}-docs", rounds, BODY, **sender)
            local = here[0]
    finally:
        stop(pair)
    find_secrets(BODY)  # this process's own warm-up
    secrets = timed(lambda: find_secrets(BODY), rounds)
    rules = timed(lambda: inbound_hold(BODY, []), rounds)
    both = [s + r for s, r in zip(secrets, rules, strict=True)]
    send, added = percentile(waits, 50), percentile(both, 50)

    def row(name: str, samples: list[float]) -> None:
        p50, p99 = percentile(samples, 50) * 1e3, percentile(samples, 99) * 1e3
        print(f"  {name:<38}{p50:7.2f} / {p99:7.2f} ms")

    print(f"{len(BODY)}-byte message, {rounds} rounds, p50 / p99:")
    row("send -> inbox between two machines", waits)
    row("find_secrets (sender)", secrets)
    row("inbound_hold (receiver)", rules)
    print(f"  screening, both ends                  {added * 1e3:7.2f} ms = {added / send:.0%} of the send")
    print(f"  send without screening (estimate)     {(send - added) * 1e3:7.2f} ms")
    row("send -> inbox on one machine", local)
    here_send, here_added = percentile(local, 50), percentile(rules, 50)
    share = here_added / here_send
    print(f"  screening there                       {here_added * 1e3:7.2f} ms = {share:.0%} of the send")
    print(f"  send without screening (estimate)     {(here_send - here_added) * 1e3:7.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="30 rounds")
    args = parser.parse_args()
    os.environ["HIVE_KEYRING"] = "off"
    root = Path(tempfile.mkdtemp(prefix="hive-screen-bench-", dir="/tmp"))
    try:
        anyio.run(run, 30 if args.quick else 200, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
