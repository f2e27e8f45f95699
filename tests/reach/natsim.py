"""A simulated internet in network namespaces: one always-on public machine, two laptops behind home NATs.

Five namespaces (/work/shared/notes/natsim.md has the measurements behind this layout)::

    hA 10.200.1.2 ── 10.200.1.1 rA 198.18.0.2 ──┐
                                                 ├── pub: a bridge, 198.18.0.1 (the always-on machine)
    hB 10.200.2.2 ── 10.200.2.1 rB 198.18.0.3 ──┘

``pub`` is the internet and the public machine on it: it forwards nothing and has no route to the
private ranges, so a packet addressed to a laptop's LAN address dies there (its ``prerouting``
counts them: :meth:`Internet.stray_packets_to`). ``rA``/``rB`` are home routers: forwarding on,
masquerade on the WAN (Linux' default, which keeps source ports when it can) and a forward chain
that drops anything new arriving from the WAN. ``hA``/``hB`` are the laptops.

Every name carries a random prefix (tests run in parallel, in several pytest-xdist workers); every
veth is created with both ends already inside namespaces, so nothing ever appears in the root
namespace; teardown kills whatever still runs inside them (a process keeps a deleted namespace
alive, invisibly) and deletes only the namespaces this builder created, also after a failure.

Machines running hive (:class:`NetHive`) run every CLI command inside their namespace: the CLI
starts a sidecar when none answers, and one started in the root namespace would be on the real
network.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import tomlkit

from hive.sidecar.person.dialog import DESKTOP_VARIABLES
from tests.conftest import Hive, process_gone, sidecar_logs

T = TypeVar("T")

NETNS_DIR = Path("/run/netns")  # where `ip netns add` pins a namespace by name
CLONE_NEWNET = 0x40000000

PUB = "198.18.0.1"  # the always-on machine, on the "internet" (198.18.0.0/15 is a benchmarking range)
ROUTERS = ("rA", "rB")
LAPTOPS = ("hA", "hB")
ROLES = ("pub", *ROUTERS, *LAPTOPS)
WAN = {"rA": "198.18.0.2", "rB": "198.18.0.3"}
LAN = {"rA": "10.200.1.0/24", "rB": "10.200.2.0/24"}
GATEWAY = {"rA": "10.200.1.1", "rB": "10.200.2.1"}
LAPTOP = {"hA": "10.200.1.2", "hB": "10.200.2.2"}
ROUTER_OF = {"hA": "rA", "hB": "rB"}
ADDRESS = {"pub": PUB, **WAN, **LAPTOP}  # each namespace's own address on its way to the internet

# A home router: masquerade on the WAN, and nothing new in from it (masquerade alone is no firewall).
ROUTER_RULES = """
table ip nat {
    chain postrouting {
        type nat hook postrouting priority srcnat; policy accept;
        oifname "wan" masquerade
    }
}
table inet filter {
    chain forward {
        type filter hook forward priority filter; policy accept;
        ct state established,related accept
        iifname "wan" drop
    }
}
"""
# The internet counts what arrives for a private address (it routes none of them anywhere).
PUB_RULES = """
table ip natsim {
    counter to_rA {}
    counter to_rB {}
    chain prerouting {
        type filter hook prerouting priority raw; policy accept;
        ip daddr 10.200.1.0/24 counter name to_rA
        ip daddr 10.200.2.0/24 counter name to_rB
    }
}
"""

_libc = ctypes.CDLL(None, use_errno=True)


def wait_for(check: Callable[[], T], what: str, timeout: float = 30) -> T:
    """Poll ``check`` until it returns something true (returned), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def holds(check: Callable[[], bool], what: str, seconds: float) -> None:
    """Poll ``check`` for ``seconds`` and fail the first time it is false: something that must not
    happen, watched for as long as it would take to happen."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        assert check(), f"{what}: no longer true after {time.monotonic() - started:.1f} s"
        time.sleep(0.1)


def _enter_namespace(netns: str) -> None:
    """Move the calling thread (only it: a network namespace is a per-thread attribute) into ``netns``."""
    fd = os.open(NETNS_DIR / netns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({netns}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def _run(argv: list[str], input: str | None = None, timeout: float = 30) -> str:
    result = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


class Internet:
    """The five namespaces, named ``<prefix>-<role>``; build it with :func:`simulated_internet`.

    ``ns(role)`` is a namespace's name, ``address(role)`` its address towards the internet (a
    laptop's LAN address, a router's WAN address, the public machine's); :meth:`run` runs a command
    inside a namespace, :meth:`inside` a Python function in a thread that joined it (its sockets
    stay in it), :meth:`udp` is a bound UDP socket there, :meth:`hive` a hive machine there.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.created: list[str] = []  # the namespaces this object made, in order; teardown deletes just these
        self.hives: list[NetHive] = []
        self.timings: dict[str, float] = {}  # seconds: build, stop_hives, teardown
        self.stopped: list[int] = []  # the sidecars `hive stop` stopped at the end
        self.killed: list[int] = []  # what teardown found still running inside, and killed

    # ---- names and addresses -----------------------------------------------------------------

    def ns(self, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"no namespace {role!r}: one of {', '.join(ROLES)}")
        return f"{self.prefix}-{role}"

    @staticmethod
    def address(role: str) -> str:
        return ADDRESS[role]

    @staticmethod
    def router_of(laptop: str) -> str:
        return ROUTER_OF[laptop]

    # ---- running things inside ---------------------------------------------------------------

    def run(
        self, role: str, *argv: str, input: str | None = None, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """``ip netns exec <ns> argv...``: the command, and whatever it starts, lives in that namespace."""
        result = subprocess.run(
            ["ip", "netns", "exec", self.ns(role), *argv], input=input, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(f"[{role}] {' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    @contextlib.contextmanager
    def joined(self, role: str) -> Iterator[None]:
        """Move the calling thread into ``role``'s namespace for the block, then back: every process
        and socket it makes meanwhile (a harness, a sidecar the CLI starts, a listening server) is
        that machine's."""
        original = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _enter_namespace(self.ns(role))
            try:
                yield
            finally:
                if _libc.setns(original, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "cannot return to the original network namespace")
        finally:
            os.close(original)

    def inside(self, role: str, work: Callable[[], T]) -> T:
        """``work()`` run in a thread that joined ``role``'s namespace; sockets it makes stay there."""
        netns = self.ns(role)
        outcome: list[T] = []
        failure: list[BaseException] = []

        def thread() -> None:
            try:
                _enter_namespace(netns)
                outcome.append(work())
            except BaseException as exc:
                failure.append(exc)

        worker = threading.Thread(target=thread, name=f"in-{netns}")
        worker.start()
        worker.join()
        if failure:
            raise failure[0]
        return outcome[0]

    def udp(self, role: str, port: int = 0, timeout: float = 1.0) -> socket.socket:
        """A UDP socket in ``role``'s namespace bound to its address (never 0.0.0.0: a machine with
        several addresses would answer from the wrong one, which a NAT drops)."""

        def make() -> socket.socket:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                sock.bind((self.address(role), port))
            except BaseException:
                sock.close()
                raise
            sock.settimeout(timeout)
            return sock

        return self.inside(role, make)

    def stray_packets_to(self, router: str) -> int:
        """Packets that reached the internet addressed to a private address behind ``router``
        (``rA``/``rB``): the internet routes none of them, so each one died there."""
        listed = json.loads(_run(["ip", "netns", "exec", self.ns("pub"), "nft", "-j", "list", "counters"]))
        for item in listed["nftables"]:
            counter = item.get("counter")
            if counter and counter["name"] == f"to_{router}":
                return int(counter["packets"])
        raise AssertionError(f"no counter to_{router} in pub: {listed}")

    def pids(self, role: str) -> list[int]:
        """The processes inside ``role``'s namespace (compared by the namespace's inode)."""
        try:
            pinned = os.stat(NETNS_DIR / self.ns(role))
        except FileNotFoundError:
            return []
        found = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    held = os.stat(f"/proc/{entry.name}/ns/net")
                    if (held.st_dev, held.st_ino) == (pinned.st_dev, pinned.st_ino):
                        found.append(int(entry.name))
        return found

    # ---- hive machines -----------------------------------------------------------------------

    def hive(self, role: str, person: str, machine: str | None = None, port: int = 0, config: str = "") -> NetHive:
        """A hive machine in ``role``'s namespace (not started yet: :meth:`NetHive.start`, or any
        CLI command, starts it there): its own HIVE_HOME, ``[mesh] listen`` on the namespace's
        address (``port`` 0: any), no mDNS, keys in files, no desktop. ``config`` is more TOML."""
        home = Path(tempfile.mkdtemp(prefix="hive-", dir="/tmp"))  # short: the socket lives in it
        runtime = home / "run"  # an empty XDG_RUNTIME_DIR: no way to a desktop (no pop-ups)
        runtime.mkdir(mode=0o700)
        document = tomlkit.parse(config)
        document["person"] = person
        document["machine"] = machine or role.lower()
        mesh = document.setdefault("mesh", tomlkit.table())
        mesh["listen"] = f"{self.address(role)}:{port}"
        mesh["mdns"] = False
        (home / "config.toml").write_text(tomlkit.dumps(document))
        made = NetHive(home=home, internet=self, role=role, runtime=runtime)
        self.hives.append(made)
        sidecar_logs(home)
        return made

    def stop_hives(self) -> None:
        """``hive stop`` on every machine at once (one can take seconds); then each sidecar's pid must be
        gone. One that is not is killed, and this raises."""
        started = time.monotonic()
        running = [(hive, pid) for hive in self.hives if (pid := hive.running_pid()) is not None]

        def stop(hive: NetHive) -> None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # its pid, checked below, tells
                hive.cli("stop", timeout=30)

        with ThreadPoolExecutor(max_workers=max(1, len(running))) as pool:
            list(pool.map(stop, [hive for hive, _ in running]))
        deadline = time.monotonic() + 15
        while not all(process_gone(pid) for _, pid in running) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.timings["stop_hives"] = time.monotonic() - started
        self.stopped = [pid for _, pid in running]
        survivors = {str(hive.home): pid for hive, pid in running if not process_gone(pid)}
        for pid in survivors.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if survivors:
            raise AssertionError(f"sidecars still running after `hive stop` (killed): {survivors}")

    # ---- building and tearing down -----------------------------------------------------------

    def build(self) -> None:
        started = time.monotonic()
        for role in ROLES:
            _run(["ip", "netns", "add", self.ns(role)])
            self.created.append(self.ns(role))
        # One `ip -batch` per namespace, in an order where each link's other end already exists.
        script = {
            "pub": [
                "link set lo up",
                "link add br0 type bridge",
                f"addr add {PUB}/24 dev br0",
                "link set br0 up",
                *(
                    f"link add {router}-wan master br0 up type veth peer name wan netns {self.ns(router)}"
                    for router in ROUTERS
                ),
            ],
            **{
                router: [
                    "link set lo up",
                    f"addr add {WAN[router]}/24 dev wan",
                    "link set wan up",
                    f"link add lan type veth peer name lan0 netns {self.ns(laptop)}",
                    f"addr add {GATEWAY[router]}/24 dev lan",
                    "link set lan up",
                    f"route add default via {PUB}",
                ]
                for laptop, router in ROUTER_OF.items()
            },
            **{
                laptop: [
                    "link set lo up",
                    f"addr add {LAPTOP[laptop]}/24 dev lan0",
                    "link set lan0 up",
                    f"route add default via {GATEWAY[router]}",
                ]
                for laptop, router in ROUTER_OF.items()
            },
        }
        # The rules go in before any traffic: conntrack fixes a flow's NAT at its first packet.
        for role in ("pub", *ROUTERS):
            self._ip_batch(role, script[role])
            rules = PUB_RULES if role == "pub" else ROUTER_RULES
            forwarding = "1" if role in ROUTERS else "0"
            self.run(
                role, "sh", "-c", f"echo {forwarding} >/proc/sys/net/ipv4/ip_forward && exec nft -f -", input=rules
            )
        for role in LAPTOPS:
            self._ip_batch(role, script[role])
        self.timings["build"] = time.monotonic() - started

    def _ip_batch(self, role: str, lines: list[str]) -> None:
        _run(["ip", "-n", self.ns(role), "-batch", "-"], input="\n".join(lines) + "\n")

    def teardown(self) -> None:
        """Kill what still runs inside (a process keeps a deleted namespace alive), then delete the
        namespaces this object created, and no other."""
        started = time.monotonic()
        errors = []
        for netns in reversed(self.created):
            role = netns.rsplit("-", 1)[1]
            deadline = time.monotonic() + 10
            while (pids := self.pids(role)) and time.monotonic() < deadline:  # again: one may have forked
                self.killed += [pid for pid in pids if pid not in self.killed]
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                while not all(process_gone(pid) for pid in pids) and time.monotonic() < deadline:
                    time.sleep(0.01)
            if pids:
                errors.append(f"{netns} still holds processes {pids}: it outlives its deletion")
            try:
                _run(["ip", "netns", "delete", netns])
            except RuntimeError as exc:
                errors.append(str(exc))
        self.created.clear()
        self.timings["teardown"] = time.monotonic() - started
        if errors:
            raise AssertionError("namespaces not cleanly deleted: " + "; ".join(errors))


@contextlib.contextmanager
def simulated_internet() -> Iterator[Internet]:
    """The topology, built; on the way out (also after a failure) its hive machines are stopped, what
    still runs inside is killed, the namespaces are deleted and the machines' state folders removed."""
    internet = Internet(f"hs{secrets.token_hex(3)}")
    try:
        internet.build()
        yield internet
    finally:
        stopped = False
        try:
            internet.stop_hives()
            stopped = True
        finally:
            internet.teardown()
            if stopped:  # else the state folders (the sidecars' logs) stay for the teardown error's report
                for hive in internet.hives:
                    shutil.rmtree(hive.home, ignore_errors=True)


@dataclass(eq=False)
class NetHive(Hive):
    """A hive machine living in one namespace of an :class:`Internet`. ``cli`` (and ``cli_json``)
    run inside it; raw ``request``s go over the state folder's unix socket, which any namespace reaches."""

    internet: Internet = field(repr=False, kw_only=True)
    role: str = field(kw_only=True)
    runtime: Path = field(kw_only=True)

    @property
    def env(self) -> dict[str, str]:
        env = {**os.environ, "HIVE_HOME": str(self.home), "HIVE_KEYRING": "off", "XDG_RUNTIME_DIR": str(self.runtime)}
        for name in DESKTOP_VARIABLES:
            env.pop(name, None)
        return env

    @property
    def address(self) -> str:
        return self.internet.address(self.role)

    def cli(
        self, *args: str, input: str | None = None, check: bool = False, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["ip", "netns", "exec", self.internet.ns(self.role), sys.executable, "-m", "hive.sidecar.cli", *args],
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"[{self.role}] hive {' '.join(args)} exited {result.returncode}: {result.stderr}")
        return result

    def start(self) -> int:
        """Start the sidecar inside the namespace and return its pid."""
        started = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.internet.ns(self.role),
                sys.executable,
                "-c",
                "import sys; from hive.sidecar.base.paths import state_paths; from hive.sidecar.client import "
                "start_detached; sys.exit(0 if start_detached(state_paths()) else 1)",
            ],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert started.returncode == 0, f"[{self.role}] no sidecar started: {started.stderr}"
        return self.pid()

    def running_pid(self) -> int | None:
        """The sidecar's pid while it runs inside this machine's namespace, else None."""
        try:
            pid = self.pid()
        except (OSError, ValueError):
            return None
        return pid if pid in self.internet.pids(self.role) else None
