"""The commands people and agents type most start cheaply: they load neither the mesh nor an event loop.

Every ``hive`` command builds its parser, and each command runs as a new process, so what a
command imports is paid on every call: the mesh transport alone (aioquic, cryptography,
service_identity) took about 190 ms of CPU before its import moved into the commands that use it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hive.sidecar.base.paths import socket_path_from_env, state_paths
from tests.conftest import Hive

HIVE = Path(sys.executable).parent / "hive"
BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_cli.py"
# Packages and modules none of these commands may load: the mesh transport and what it stands on, the
# gate, the harness registry and its plugin manager, the MCP SDK, mDNS, the database, process facts,
# and an event loop (asyncio, anyio's backend for it), which a few blocking socket calls do not need.
HEAVY = (
    "aioquic",
    "cryptography",
    "service_identity",
    "OpenSSL",
    "zeroconf",
    "mcp",
    "pluggy",
    "aiosqlite",
    "psutil",
    "tomlkit",
    "asyncio",
    "anyio._backends",
    "hive.sidecar.mesh.transport",
    "hive.sidecar.mesh.links",
    "hive.sidecar.gate.engine",
    "hive.sidecar.base.store",
    "hive.integrations.registry",
    # and what the standard library's own can spare: typing (about 5 ms) is for the type checker, and
    # shutil (about 4 ms, with the compression modules) is what argparse loads to ask the terminal's width.
    # (pathlib, about 5 ms, is left out by the installed package, but the editable install's finder loads it.)
    "typing",
    "shutil",
)


def imported_by(
    env: dict[str, str], *args: str, timeout: float = 60
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the installed ``hive`` console script; what it did, and every module it imported."""
    # PYTHONPROFILEIMPORTTIME makes the interpreter list each module it imports on stderr.
    done = subprocess.run(
        [str(HIVE), *args], capture_output=True, text=True, timeout=timeout, env={**env, "PYTHONPROFILEIMPORTTIME": "1"}
    )
    return done, {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}


def heavy_in(imported: set[str]) -> list[str]:
    return sorted(name for name in imported for heavy in HEAVY if name == heavy or name.startswith(heavy + "."))


def test_hive_help_version_and_bare_hive_load_no_command_and_no_part_of_the_sidecar(tmp_path: Path) -> None:
    env = {**os.environ, "HIVE_HOME": str(tmp_path / "home")}
    for args in (("--help",), ("--version",), ()):
        done, imported = imported_by(env, *args)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        assert "hive.sidecar.cli.main" in imported, args  # the listing is there, so an absence means something
        assert heavy_in(imported) == [], args
        for module in (
            "hive.sidecar.client",
            "hive.sidecar.cli.gate",
            "hive.sidecar.cli.lessons",
            "hive.sidecar.person.dialog",
        ):
            assert module not in imported, (args, module)
    assert not (tmp_path / "home").exists()  # no sidecar was started for the help


def test_hive_send_and_hive_inbox_talk_to_the_sidecar_without_the_mesh_the_gate_or_an_event_loop(hive: Hive) -> None:
    sent, imported = imported_by(hive.env, "send", "alice/terminal", "the build is green")
    assert sent.returncode == 0, sent.stderr[-2000:]
    assert "hive.sidecar.client" in imported
    assert heavy_in(imported) == []
    # The sidecar finds the person's desktop itself (never one a client names): send reads no dialog code.
    assert "hive.sidecar.person.dialog" not in imported
    read, imported = imported_by(hive.env, "inbox")
    assert read.returncode == 0, read.stderr[-2000:]
    assert "the build is green" in read.stdout and "<hive-message" in read.stdout
    assert "hive.sidecar.client" in imported
    assert heavy_in(imported) == []
    assert hive.request({"id": 1, "op": "unread"})["result"]["count"] == 0  # inbox confirmed what it printed


def test_hive_inbox_wait_gets_mail_sent_while_it_waits_without_the_mesh_the_gate_or_an_event_loop(hive: Hive) -> None:
    with subprocess.Popen(
        [str(HIVE), "inbox", "--wait", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**hive.env, "PYTHONPROFILEIMPORTTIME": "1"},
    ) as waiting:
        deadline = time.monotonic() + 30
        while "alice/terminal" not in hive.request({"id": 1, "op": "status"})["result"]["waiting"]:
            assert waiting.poll() is None and time.monotonic() < deadline, "hive inbox --wait never waited"
            time.sleep(0.01)
        reply = hive.request({"id": 2, "op": "send", "to": "alice/terminal", "body": "deploy when ready"})
        assert reply["ok"], reply
        out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err[-2000:]
    assert "deploy when ready" in out
    imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if "|" in line}
    assert "hive.sidecar.client" in imported
    assert heavy_in(imported) == []


@pytest.mark.parametrize(
    "home", ["/tmp/h", "/tmp//h/./x/", "relative/h", "/tmp/a/../b", "/" + "x" * 95, "/", ".", "//h", "~/h", ""]
)
def test_the_socket_a_command_tries_first_is_the_one_its_state_folder_names(
    home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `hive send` and `inbox` connect to the socket HIVE_HOME names before they load pathlib for StatePaths.
    monkeypatch.setenv("HIVE_HOME", home)
    quick = socket_path_from_env()
    if home in ("/tmp/h", "relative/h", "/tmp/a/../b", "/", "."):
        assert quick is not None
    if quick is not None:
        assert quick == str(state_paths().socket)


def test_the_cli_benchmark_runs_and_prints_its_figures_next_to_its_baselines() -> None:
    # tests/bench is not collected; this keeps the script working. Its numbers are not asserted.
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    for row in (
        'python -I -c "import json, socket"',
        "hive --help",
        "hive send",
        "hive inbox",
        "reference: stdlib client",
        "hive send -> hive inbox --wait",
    ):
        assert any(
            line.startswith(row) and any(c.isdigit() for c in line[len(row) :])
            for line in completed.stdout.splitlines()
        ), f"no figure for {row!r}:\n{completed.stdout}"
    # agent-peer comes from PyPI: with no network the bench says why it is not measured
    assert "agent-peer send -> agent-peer wait" in completed.stdout or "agent-peer   not measured: " in completed.stdout
