"""Benchmark of the opencode plugin and the pi extension: what their hooks and tools cost a harness.

Run it from the repository root with the project's venv (node and the TypeScript toolchain from
.cache/npm, as the tests use them):

    .venv/bin/python tests/bench/bench_plugins.py           # full run, 200 calls a row
    .venv/bin/python tests/bench/bench_plugins.py --quick   # smoke run, 10 calls a row

Both templates are rendered and compiled as the tests do, then hosted by the tests' Node drivers
(the harness faked, hive real). Each row is timed inside Node (the driver's ``ms``), so Python
and the pipe are not in it:

- baseline: opencode's ``tool.execute.before`` for a tool that is not hive's, which the plugin
  answers without the sidecar, the floor of any hook call in the same run;
- opencode ``tool.execute.after`` and ``chat.message`` against a running sidecar with nothing
  waiting (the hot path of every tool call and prompt);
- the same two with no sidecar to be had (``HIVE_HOME`` under a file): the fail-open path, which
  pays the client's own deadline;
- pi ``check_inbox`` waiting for mail: from a send on the sidecar's socket until the tool
  returned the message (one socket round trip of the send is in it).

It prints p50 and p99 of each and the ratio to the baseline. Nothing is asserted: these replace
the wall-clock bounds the plugin tests used to assert.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hive.sidecar.base.paths import StatePaths  # noqa: E402
from tests.bench.bench_hook import percentile, request  # noqa: E402
from tests.conftest import loopback_config  # noqa: E402
from tests.integrations.test_typescript import (  # noqa: E402
    SAMPLE_COMMAND,
    Driver,
    Sidecar,
    after_hook,
    created,
    run_tsc,
    tsc_project,
)


def compile_template(harness: str, folder: Path) -> Path:
    tsc_project(folder, harness, SAMPLE_COMMAND, emit=True)
    result = run_tsc(folder)
    if result.returncode != 0:
        sys.exit(f"tsc failed for {harness}:\n{result.stdout}{result.stderr}")
    return folder / "out" / f"{harness}.js"


@contextlib.contextmanager
def running_sidecar(base: Path) -> Iterator[Sidecar]:
    home = Path(tempfile.mkdtemp(prefix="hb-", dir="/tmp"))  # short: the socket path must fit
    # Many sends between one pair of sessions: lift the mail guards, which would refuse most of them.
    (home / "config.toml").write_text(
        loopback_config('person = "alice"\nmachine = "m1"\n[mesh]\nrate_limit = 1000000\nloop_limit = 1000000\n'),
        encoding="utf-8",
    )
    machine = Sidecar(home)
    try:
        machine.json("status")
        yield machine
    finally:
        machine.cli("stop")
        shutil.rmtree(home, ignore_errors=True)


def timed(n: int, call: Callable[[], dict[str, object]]) -> list[float]:
    samples = []
    for _ in range(n):
        reply = call()
        samples.append(float(reply["ms"]))  # type: ignore[arg-type]
    return samples


def opencode_rows(plugin: Path, env: dict[str, str], folder: Path, n: int, label: str) -> dict[str, list[float]]:
    driver = Driver("opencode_driver.mjs", [str(plugin)], env)
    try:
        driver.call(do="load", directory=str(folder))
        driver.call(do="event", instance=0, event=created("ses_bench"))
        rows = {
            f"opencode tool.execute.after, {label}": timed(
                n, lambda: after_hook(driver, 0, "ses_bench", {"title": "t", "output": "o", "metadata": {}})
            ),
            f"opencode chat.message, {label}": timed(
                n,
                lambda: driver.call(
                    do="hook",
                    instance=0,
                    name="chat.message",
                    input={"sessionID": "ses_bench"},
                    output={"message": {"id": "msg_1", "sessionID": "ses_bench"}, "parts": []},
                ),
            ),
        }
        if label == "sidecar running":
            rows["baseline: tool.execute.before, not hive's tool"] = timed(
                n,
                lambda: driver.call(
                    do="hook",
                    instance=0,
                    name="tool.execute.before",
                    input={"tool": "bash", "sessionID": "ses_bench", "callID": "c"},
                    output={"args": {}},
                ),
            )
        return rows
    finally:
        driver.close()


def pi_wake_rows(extension: Path, sidecar: Sidecar, folder: Path, n: int) -> dict[str, list[float]]:
    driver = Driver("pi_driver.mjs", [str(extension), "019a0000-0000-7000-8000-00000000beef", str(folder)], sidecar.env)
    samples: list[float] = []
    try:
        driver.call(do="emit", event="session_start", payload={"reason": "startup"})
        address, deadline = "", time.monotonic() + 60
        while not address:
            if time.monotonic() > deadline:
                sys.exit("the pi session never registered with the sidecar")
            entry = next((s for s in sidecar.json("who", "--all")["sessions"] if s["agent"] == "pi"), None)
            address = entry["address"] if entry else ""
        for k in range(n):
            sent_at: list[float] = []

            def later(body: str = f"wake {k}", sent_at: list[float] = sent_at) -> None:
                time.sleep(0.2)  # the tool is waiting by then; the wake-up is timed from the send
                sent_at.append(time.monotonic())
                request(StatePaths(sidecar.home), {"id": 1, "op": "send", "to": address, "body": body})

            sender = threading.Thread(target=later)
            sender.start()
            waited = driver.call(do="tool", name="check_inbox", params={"wait_secs": 30}, timeout=60)
            returned = time.monotonic()
            sender.join()
            assert f"wake {k}" in waited["result"]["content"][0]["text"], waited
            samples.append((returned - sent_at[0]) * 1000)
        return {"pi check_inbox wake-up (send to return)": samples}
    finally:
        driver.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 calls a row, 3 wake-ups")
    args = parser.parse_args()
    n, wakes = (10, 3) if args.quick else (200, 20)
    with tempfile.TemporaryDirectory(prefix="hive-bench-plugins-") as tmp:
        base = Path(tmp)
        plugin = compile_template("opencode", base / "opencode")
        extension = compile_template("pi", base / "pi")
        project = base / "shop"
        project.mkdir()
        rows: dict[str, list[float]] = {}
        with running_sidecar(base) as sidecar:
            rows.update(opencode_rows(plugin, sidecar.env, project, n, "sidecar running"))
            rows.update(pi_wake_rows(extension, sidecar, project, wakes))
        blocker = base / "not-a-folder"
        blocker.write_text("")  # HIVE_HOME under a file: no sidecar can start
        rows.update(
            opencode_rows(
                plugin, {**os.environ, "HIVE_HOME": str(blocker / "home")}, project, max(n // 10, 3), "no sidecar"
            )
        )
    floor = percentile(rows["baseline: tool.execute.before, not hive's tool"], 50)
    print(f"{'row':<52} {'n':>4} {'p50 ms':>9} {'p99 ms':>9} {'p50/floor':>10}")
    for name, samples in rows.items():
        p50, p99 = percentile(samples, 50), percentile(samples, 99)
        print(f"{name:<52} {len(samples):>4} {p50:>9.2f} {p99:>9.2f} {p50 / floor:>9.1f}x")


if __name__ == "__main__":
    main()
