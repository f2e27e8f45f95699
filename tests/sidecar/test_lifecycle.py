"""The sidecar starts by itself, runs once per state folder, survives crashes and stops cleanly."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import Hive, loopback_config


def test_the_first_client_starts_a_sidecar_when_none_is_running(make_hive: Any) -> None:
    hive: Hive = make_hive()
    assert not hive.paths.socket.exists()
    result = hive.cli("status", "--json", check=True)
    assert '"pid"' in result.stdout
    assert hive.request({"id": 1, "op": "ping"})["ok"]


def test_a_second_sidecar_on_the_same_folder_refuses_at_once(hive: Hive) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hive.sidecar"], env=hive.env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 1
    assert "already running" in result.stderr and str(hive.pid()) in result.stderr
    assert hive.request({"id": 1, "op": "ping"})["result"]["pid"] == hive.pid()


def test_a_stale_socket_and_lock_left_by_a_crash_do_not_stop_the_next_start(hive: Hive) -> None:
    first = hive.pid()
    hive.kill9()
    assert hive.paths.socket.exists() and hive.paths.lock.exists()  # what the crash left behind
    assert hive.cli("status", check=True).returncode == 0
    assert hive.pid() != first


def test_state_files_and_socket_are_private_to_the_user(hive: Hive) -> None:
    hive.cli("send", "alice/terminal", "hi", check=True)
    assert stat.S_IMODE(os.stat(hive.home).st_mode) == 0o700
    for path in [
        hive.paths.socket,
        hive.paths.database,
        hive.paths.lock,
        hive.paths.log,
        Path(f"{hive.paths.database}-wal"),
    ]:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_a_state_folder_too_long_for_a_socket_path_still_works(make_hive: Any) -> None:
    hive: Hive = make_hive()
    deep = hive.home / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    (deep / "config.toml").write_text(loopback_config('person = "alice"\n'))
    long_hive = Hive(deep)
    try:
        assert long_hive.cli("send", "alice/terminal", "hello", check=True).returncode == 0
        assert not str(long_hive.paths.socket).startswith(str(deep))
        assert stat.S_IMODE(os.stat(long_hive.paths.socket).st_mode) == 0o600
        assert "hello" in long_hive.cli("inbox", check=True).stdout
    finally:
        long_hive.stop()


def test_stop_stops_it_and_stopping_again_is_harmless(hive: Hive) -> None:
    pid = hive.pid()
    assert hive.cli("stop").returncode == 0
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
    assert not hive.paths.socket.exists()
    again = hive.cli("stop")
    assert again.returncode == 0 and "no sidecar" in again.stdout


def test_it_logs_to_a_file_in_the_state_folder(hive: Hive) -> None:
    assert "listening on" in hive.paths.log.read_text()


def test_a_client_that_cannot_start_a_sidecar_exits_2_with_the_reason(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", "who"],
        env={**os.environ, "HIVE_HOME": str(blocked / "home")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("hive: ") and len(result.stderr.strip().splitlines()) == 1


def _gone(pid: int) -> bool:
    stat_file = Path(f"/proc/{pid}/stat")
    try:
        return stat_file.read_text().rsplit(")", 1)[1].split()[0] == "Z"  # finished, not yet reaped
    except FileNotFoundError:
        return True


def test_a_sidecar_that_cannot_read_its_config_is_reported_at_once_with_the_cause(make_hive: Any) -> None:
    hive: Hive = make_hive()
    hive.paths.config.write_text('person = "alice"\n[mesh\nlisten = "127.0.0.1:0"\n')
    result = hive.cli("status")
    assert result.returncode == 2
    assert "config.toml is not valid TOML" in result.stderr and "sidecar.stderr" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert _gone(hive.pid())  # the sidecar that took the lock and failed has exited
    # One start, not a retry loop: the sidecar said its error once.
    assert (hive.home / "sidecar.stderr").read_text().count("not valid TOML") == 1


def test_a_sidecar_that_cannot_open_its_database_is_reported_with_the_database_error(make_hive: Any) -> None:
    hive: Hive = make_hive('[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n')
    hive.paths.database.mkdir()  # a folder where the database file should be
    result = hive.cli("who")
    assert result.returncode == 2
    assert "unable to open database file" in result.stderr and "could not start" in result.stderr
    assert _gone(hive.pid())
    assert not hive.paths.socket.exists()
