"""This machine's tailnet addresses, asked of the ``tailscale`` CLI, so that a team on one tailnet
links with no ``[mesh] static`` lines.

A tailnet address reaches a teammate wherever both machines are (home, office, a phone's hotspot),
which a LAN address does not: it goes first in what this machine advertises, since an invite
carries only the first two of a machine's addresses. Everything here answers ``[]`` rather than
raise: tailscale missing, stopped, logged out, slow or saying something unexpected only means
"no tailnet address", and the sidecar's listener must start regardless.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import time
from typing import Any

TIMEOUT = 2.0  # for both CLI calls together: the listener's addresses (and `hive init`'s invite) wait for it
# Tailscale's own ranges (CGNAT space and its ULA prefix): what marks an address as a tailnet one.
TAILNET_V4 = ipaddress.ip_network("100.64.0.0/10")
TAILNET_V6 = ipaddress.ip_network("fd7a:115c:a1e0::/48")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def is_tailnet(host: str) -> bool:
    """Whether ``host`` (an IP, brackets allowed) lies in tailscale's address ranges."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return ip in (TAILNET_V4 if ip.version == 4 else TAILNET_V6)


def tailnet_ips(timeout: float = TIMEOUT) -> list[IPAddress]:
    """This machine's tailnet IPs, IPv4 first; ``[]`` unless tailscale runs here, logged in and up."""
    binary = shutil.which("tailscale")
    if binary is None:  # the common case, and the sidecar pays for this check at every listen
        return []
    deadline = time.monotonic() + timeout
    said = _run([binary, "status", "--json"], deadline)
    if said is not None:
        try:
            status = json.loads(said)
        except (ValueError, RecursionError):
            status = None
        if isinstance(status, dict) and "BackendState" in status:
            # Stopped, NeedsLogin, Starting…: the addresses it may still list would not answer.
            if status["BackendState"] != "Running":
                return []
            me = status.get("Self")
            listed = me.get("TailscaleIPs") if isinstance(me, dict) else None
            return _ordered(listed if listed is not None else status.get("TailscaleIPs"))
    # An older CLI, or a status not understood: `tailscale ip` lists the addresses one per line,
    # and fails itself unless tailscale is up.
    said = _run([binary, "ip"], deadline)
    return _ordered(said.split()) if said is not None else []


def tailnet_addresses(port: int, timeout: float = TIMEOUT) -> list[str]:
    """This machine's tailnet addresses as ``host:port`` (``[v6]:port``), IPv4 first."""
    return [f"{ip}:{port}" if ip.version == 4 else f"[{ip}]:{port}" for ip in tailnet_ips(timeout)]


def advertised_addresses(listen_host: str, port: int, timeout: float = TIMEOUT) -> list[str]:
    """What teammates are told to dial for a listener on ``listen_host:port``: the tailnet addresses
    first, then the interfaces' (``local_addresses``), each once, at most ``MAX_ADDRESSES``.

    Blocks for up to ``timeout`` (the CLI is another process): call it off the event loop.
    """
    # addresses.py loads the QUIC transport; the doctor, which only needs is_tailnet, does not.
    from .addresses import MAX_ADDRESSES, WILDCARDS, local_addresses

    local = local_addresses(listen_host, port)
    if listen_host not in WILDCARDS:
        return local  # bound to one address: no other one answers, a tailnet one included
    tailnet = tailnet_addresses(port, timeout)
    if listen_host == "0.0.0.0":
        tailnet = [a for a in tailnet if not a.startswith("[")]  # an IPv4 socket: IPv6 never reaches it
    merged: dict[tuple[str, str], str] = {}
    for address in [*tailnet, *local]:
        host, _, port_text = address.rpartition(":")
        merged.setdefault((_canonical(host), port_text), address)
    return list(merged.values())[:MAX_ADDRESSES]


def _canonical(host: str) -> str:
    """One spelling per IP, so ``fd7a::1`` and ``[fd7a:0::1]`` count once."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return host


def _run(argv: list[str], deadline: float) -> str | None:
    """The command's standard output, or None if it failed, said nothing or outlived ``deadline``."""
    left = deadline - time.monotonic()
    if left <= 0.05:
        return None
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=left, check=False)
    except (OSError, subprocess.SubprocessError):  # not executable, vanished, or too slow (killed)
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return done.stdout.decode("utf-8", errors="replace")


def _ordered(values: Any) -> list[IPAddress]:
    """The usable IPs among ``values`` (anything the CLI printed), each once, IPv4 first."""
    if not isinstance(values, list):
        return []
    found: list[IPAddress] = []
    for value in values:
        if not isinstance(value, str):
            continue
        try:
            ip = ipaddress.ip_address(value.strip())
        except ValueError:
            continue
        if not (ip.is_loopback or ip.is_unspecified or ip.is_link_local or ip.is_multicast) and ip not in found:
            found.append(ip)
    return sorted(found, key=lambda ip: ip.version)  # stable: tailscale's own order within each family
