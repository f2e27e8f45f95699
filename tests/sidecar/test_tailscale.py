"""Tailscale without configuration: this machine's tailnet addresses, asked of the ``tailscale`` CLI,
go first among those teammates are told, and ``hive doctor`` says how each teammate is reached.

The ``tailscale`` here is a fake on PATH (a shell script answering as the real CLI does, in each
state tailscale can be in); hive's own code runs unchanged, and the doctor runs against real
sidecars linked on loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hive.sidecar.mesh.addresses import MAX_ADDRESSES, local_addresses
from hive.sidecar.mesh.tailscale import TIMEOUT, advertised_addresses, tailnet_addresses

from ..conftest import Hive, process_gone
from .test_mesh import MESH, form_team, linked, wait_for

TAILNET_V4 = "100.101.102.103"
TAILNET_V6 = "fd7a:115c:a1e0::6b01:2c3d"


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    # Several machines on one host: each keeps its key in its own state folder.
    monkeypatch.setenv("HIVE_KEYRING", "off")


def status_json(state: str = "Running", ips: list[str] | None = None) -> str:
    """What ``tailscale status --json`` prints (trimmed to the fields that matter and a few around them)."""
    ips = [TAILNET_V4, TAILNET_V6] if ips is None else ips
    return json.dumps(
        {
            "Version": "1.76.6-t1234abcd",
            "TUN": True,
            "BackendState": state,
            "AuthURL": "",
            "TailscaleIPs": ips,
            "Self": {
                "ID": "nKx7z1CNTRL",
                "HostName": "alice-laptop",
                "DNSName": "alice-laptop.tail1234.ts.net.",
                "OS": "linux",
                "TailscaleIPs": ips,
                "Online": state == "Running",
            },
            "Peer": {},
            "Health": [],
        },
        indent=2,
    )


class FakeTailscale:
    """A ``tailscale`` executable in its own folder, first on PATH, recording each call's arguments."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.calls = folder / "calls"
        self.pid = folder / "pid"

    def answer(self, status: str | None = None, ip: str | None = None, hang: bool = False) -> None:
        """``status --json`` prints ``status`` and ``ip`` prints ``ip`` (exit 0); None: fails as the CLI
        does when tailscaled is not there; ``hang``: ``status`` never answers."""

        def reply(text: str | None) -> str:
            if text is None:
                return 'echo "failed to connect to local tailscaled; it doesn\'t appear to be running" >&2; exit 1'
            return f"cat <<'EOF'\n{text}\nEOF\nexit 0"

        hanging = f'echo $$ > "{self.pid}"; exec sleep 60'
        script = self.folder / "tailscale"
        script.write_text(
            "#!/bin/sh\n"
            f'echo "$*" >> "{self.calls}"\n'
            'case "$1" in\n'
            f"status)\n{hanging if hang else reply(status)}\n;;\n"
            f"ip)\n{reply(ip)}\n;;\n"
            "esac\n"
            "exit 1\n"
        )
        script.chmod(0o755)

    def called(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def tailscale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTailscale:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return FakeTailscale(folder)


# ---- asking tailscale --------------------------------------------------------------------------


def test_a_running_tailscale_gives_both_addresses_ipv4_first_and_ipv6_in_brackets(tailscale: FakeTailscale) -> None:
    tailscale.answer(status=status_json(ips=[TAILNET_V6, TAILNET_V4]))  # listed IPv6 first on purpose
    assert tailnet_addresses(4433) == [f"{TAILNET_V4}:4433", f"[{TAILNET_V6}]:4433"]
    assert tailscale.called() == ["status --json"]  # one call when status answers


@pytest.mark.parametrize("state", ["Stopped", "NeedsLogin", "Starting"])
def test_a_tailscale_that_is_not_up_gives_no_address_even_if_it_still_lists_some(
    tailscale: FakeTailscale, state: str
) -> None:
    # `tailscale ip` would still print the addresses of a stopped node: it must not be asked.
    tailscale.answer(status=status_json(state), ip=f"{TAILNET_V4}\n{TAILNET_V6}")
    assert tailnet_addresses(4433) == []
    assert tailscale.called() == ["status --json"]


def test_without_tailscale_installed_there_is_no_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no tailscale anywhere on PATH
    assert tailnet_addresses(4433) == []


def test_a_tailscaled_that_is_not_running_gives_no_address(tailscale: FakeTailscale) -> None:
    tailscale.answer(status=None, ip=None)
    assert tailnet_addresses(4433) == []


def test_a_tailscale_that_hangs_gives_no_address_within_the_timeout_and_is_not_left_running(
    tailscale: FakeTailscale,
) -> None:
    tailscale.answer(hang=True, ip=TAILNET_V4)
    started = time.monotonic()
    assert tailnet_addresses(4433) == []
    assert time.monotonic() - started < TIMEOUT + 1
    assert tailscale.called() == ["status --json"]  # the whole time went to status: `ip` was not tried after
    assert process_gone(int(tailscale.pid.read_text()))


def test_a_status_that_is_not_json_falls_back_to_tailscale_ip(tailscale: FakeTailscale) -> None:
    tailscale.answer(status="Warning: client version != tailscaled server version\n{", ip=f"{TAILNET_V4}\n{TAILNET_V6}")
    assert tailnet_addresses(4433) == [f"{TAILNET_V4}:4433", f"[{TAILNET_V6}]:4433"]
    assert tailscale.called() == ["status --json", "ip"]


@pytest.mark.parametrize(
    "status",
    [
        '{"BackendState": "Running", "Self": {"TailscaleIPs": "100.101.102.103"}}',  # a string, not a list
        '{"BackendState": "Running", "Self": {"TailscaleIPs": [42, "not an ip", "127.0.0.1", "::"]}}',
        "[1, 2, 3]",
    ],
)
def test_garbage_from_tailscale_gives_no_address(tailscale: FakeTailscale, status: str) -> None:
    tailscale.answer(status=status, ip="no current Tailscale IPs; state: Stopped")
    assert tailnet_addresses(4433) == []


# ---- what teammates are told -------------------------------------------------------------------


def test_teammates_are_told_the_tailnet_address_first_then_the_interfaces_each_once(tailscale: FakeTailscale) -> None:
    local = local_addresses("0.0.0.0", 4433)
    also_local = [local[0].rpartition(":")[0]] if local else []  # tailscale0's address is an interface's too
    tailscale.answer(status=status_json(ips=[TAILNET_V4, *also_local, TAILNET_V6]))

    told = advertised_addresses("0.0.0.0", 4433)
    # An IPv4 socket (0.0.0.0) never answers on IPv6: its tailnet IPv6 address is left out.
    assert told == [f"{TAILNET_V4}:4433", *local][:MAX_ADDRESSES]
    assert len(told) == len(set(told))

    # Listening on both families, the IPv6 one is told too, after every IPv4 one tailscale has.
    on_both = advertised_addresses("::", 4433)
    tailnet = [f"{TAILNET_V4}:4433", *(f"{host}:4433" for host in also_local), f"[{TAILNET_V6}]:4433"]
    assert on_both == list(dict.fromkeys([*tailnet, *local]))[:MAX_ADDRESSES]


def test_without_tailscale_teammates_are_told_the_interfaces_addresses_as_before(tailscale: FakeTailscale) -> None:
    tailscale.answer(status=status_json("NeedsLogin", ips=[]))
    assert advertised_addresses("0.0.0.0", 4433) == local_addresses("0.0.0.0", 4433)


def test_a_listener_on_one_address_advertises_only_it_and_never_asks_tailscale(tailscale: FakeTailscale) -> None:
    tailscale.answer(status=status_json())
    assert advertised_addresses("127.0.0.1", 4433) == ["127.0.0.1:4433"]
    assert tailscale.called() == []


# ---- hive doctor -------------------------------------------------------------------------------


def doctor(machine: Hive, home: Path, path: str | None = None) -> list[str]:
    """The team section of ``hive doctor`` on ``machine``, run with an empty HOME (no harnesses) and
    ``path`` as PATH if given; each line's spaces squeezed."""
    home.mkdir(exist_ok=True)
    env: dict[str, str] = {**machine.env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    if path is not None:
        env["PATH"] = path
    done = subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", "doctor"], env=env, capture_output=True, text=True, timeout=180
    )
    lines = done.stdout.splitlines()
    assert "team" in lines, done.stdout + done.stderr
    section = lines[lines.index("team") + 1 :]
    # Spaces squeezed: the name column is as wide as the longest name of every section.
    return [
        " ".join(line.split()) for line in section[: next(i for i, s in enumerate(section) if not s.startswith(" "))]
    ]


def line_of(section: list[str], name: str) -> str:
    found = [line for line in section if line.split()[1:2] == [name]]
    assert len(found) == 1, section
    return found[0]


def test_doctor_names_each_teammate_machine_and_says_it_is_linked_directly_then_offline(
    make_hive: Any, tmp_path: Path
) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    port = alice.request({"id": 1, "op": "mesh"})["result"]["listening"]

    section = doctor(alice, tmp_path / "home")
    assert line_of(section, "bob@m2").split(None, 2)[2] == "direct, to 127.0.0.1"
    assert line_of(section, "addresses").endswith(f"teammates dial this machine at 127.0.0.1:{port}")
    assert "(tailnet)" not in "\n".join(section)

    bob.stop()
    wait_for(lambda: linked(alice) == 0, what="alice to see bob's machine gone")
    bob_now = line_of(doctor(alice, tmp_path / "home"), "bob@m2")
    assert bob_now.startswith("--") and "offline, last seen " in bob_now


def test_doctor_marks_tailnet_addresses_and_says_when_tailscale_runs_unadvertised(
    make_hive: Any, tmp_path: Path, tailscale: FakeTailscale
) -> None:
    alone = make_hive(MESH)
    alone.start()
    # In no team, the team section stays one line, whatever tailscale says.
    tailscale.answer(status=status_json())
    assert doctor(alone, tmp_path / "home") == ["-- state no team yet: this machine only (alice on m1)"]

    alone.cli("init", "acme", "--as", "alice", check=True)
    # Listening on loopback only (as every test sidecar), this machine tells teammates 127.0.0.1
    # while tailscale is up: the doctor says the tailnet address is not advertised.
    section = doctor(alone, tmp_path / "home")
    tailnet = line_of(section, "tailnet")
    assert f"tailscale is up here ({TAILNET_V4}, {TAILNET_V6})" in tailnet
    assert not any("@" in line for line in section)  # a team of one: no teammate lines

    advertised = make_hive(MESH + f'advertise = ["{TAILNET_V4}:4433", "192.168.1.20:4433"]\n', person="bob")
    advertised.start()
    advertised.cli("init", "acme", "--as", "bob", check=True)
    section = doctor(advertised, tmp_path / "home")
    assert line_of(section, "addresses").endswith(
        f"teammates dial this machine at {TAILNET_V4}:4433 (tailnet), 192.168.1.20:4433"
    )
    assert not any(line.split()[1:2] == ["tailnet"] for line in section)
