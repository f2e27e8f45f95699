"""Where a machine's sidecar can be dialed: checking an address, and this machine's own."""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from typing import Any

from .transport import split_address

MAX_ADDRESSES = 8  # kept per member, and carried for each in a presence or a ticket

_ADDRESS = re.compile(r"^[A-Za-z0-9._:\[\]-]{1,100}:[0-9]{1,5}$")


def valid_address(value: Any) -> bool:
    """A ``host:port`` a peer may have sent: a short host of address characters and a port in range."""
    if not isinstance(value, str) or not _ADDRESS.match(value):
        return False
    try:
        host, port = split_address(value)
    except ValueError:
        return False
    return 0 < port < 65536 and bool(host)


WILDCARDS = ("0.0.0.0", "::", "")


def _interface_addresses() -> list[str]:
    import ifaddr  # zeroconf's own dependency; lists interface addresses without root

    return [ip.ip for adapter in ifaddr.get_adapters() for ip in adapter.ips if isinstance(ip.ip, str)]


def is_local(host: str) -> bool:
    """Whether ``host`` (an IP address, maybe in brackets) is one of this machine's interfaces' addresses."""
    bare = host.strip("[]")
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        return False  # a name: whatever it resolves to, it is not ours to bind
    with contextlib.suppress(Exception):
        return bare in _interface_addresses()
    return False


def local_addresses(listen_host: str, port: int) -> list[str]:
    """The addresses teammates can try for this machine's listener."""
    if listen_host not in WILDCARDS:
        host = listen_host if ":" not in listen_host else f"[{listen_host}]"
        return [f"{host}:{port}"]
    found: list[str] = []
    try:
        for ip in _interface_addresses():
            address = ipaddress.ip_address(ip)
            if not address.is_loopback and not address.is_link_local:
                found.append(f"{ip}:{port}")
    except Exception:  # no interface list: the hostname's address is the best guess
        with contextlib.suppress(OSError):
            found.append(f"{socket.gethostbyname(socket.gethostname())}:{port}")
    return found[:MAX_ADDRESSES]


HEX_KEY = re.compile(r"^[0-9a-f]{64}$")  # a machine's public key, as members name each other
