"""LAN discovery over mDNS: this machine advertised, teammates' addresses learned the same way."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from typing import TYPE_CHECKING, Any

import anyio

from .addresses import HEX_KEY
from .transport import split_address

if TYPE_CHECKING:
    from .links import Mesh

log = logging.getLogger("hive.sidecar.mesh.mdns")

MDNS_TYPE = "_hive._udp.local."


async def run_mdns(mesh: Mesh, port: int) -> None:
    """Advertise this machine on the LAN and learn teammates' addresses the same way.

    TXT records are hints (anyone can send them); the QUIC pin is the proof. The team is
    a keyed tag, so a LAN observer cannot link advertisements to a team name or id.
    """
    try:
        from zeroconf import IPVersion, ServiceStateChange
        from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf
    except ImportError:
        log.warning("zeroconf is not installed: no LAN discovery")
        return
    interfaces: Any = list(mesh.config.mdns_interfaces) or None
    tag = mesh.team.mdns_tag()
    me = mesh.team.my_key()
    kwargs: dict[str, Any] = {"ip_version": IPVersion.V4Only}
    if interfaces:
        kwargs["interfaces"] = interfaces
    zc = AsyncZeroconf(**kwargs)
    hosts = [split_address(a)[0] for a in mesh.my_addresses]
    packed = [socket.inet_aton(h) for h in hosts if _is_ipv4(h)]
    if not packed and interfaces:
        packed = [socket.inet_aton(i) for i in interfaces if _is_ipv4(i)]
    info = AsyncServiceInfo(
        MDNS_TYPE,
        f"{me[:16]}-{tag[:8]}.{MDNS_TYPE}",
        addresses=packed,
        port=port,
        server=f"hive-{me[:16]}.local.",
        properties={"tag": tag, "key": me},
    )
    found: anyio.abc.ObjectSendStream[str]
    found, names = anyio.create_memory_object_stream[str](256)

    def on_change(zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        if state_change in (ServiceStateChange.Added, ServiceStateChange.Updated):
            with contextlib.suppress(anyio.WouldBlock):
                found.send_nowait(name)

    browser = None
    try:
        await zc.async_register_service(info)
        browser = AsyncServiceBrowser(zc.zeroconf, [MDNS_TYPE], handlers=[on_change])
        async with names:
            async for name in names:
                peer_info = AsyncServiceInfo(MDNS_TYPE, name)
                if not await peer_info.async_request(zc.zeroconf, 3000):
                    continue
                props = {
                    k.decode(errors="replace"): (v or b"").decode(errors="replace")
                    for k, v in (peer_info.properties or {}).items()
                }
                key = props.get("key", "")
                if props.get("tag") != tag or key == me or not HEX_KEY.match(key):
                    continue
                member = mesh.team.member(key)
                if member is None or not member.active:
                    continue
                found_at = [f"{a}:{peer_info.port}" for a in peer_info.parsed_addresses()]
                if any(a not in mesh.addresses.get(key, []) for a in found_at):
                    log.info("%s@%s found over mDNS at %s", member.person, member.machine, ", ".join(found_at))
                mesh.learn(key, found_at, front=True)
    finally:
        with anyio.CancelScope(shield=True):
            if browser is not None:
                with contextlib.suppress(Exception):
                    await browser.async_cancel()
            with contextlib.suppress(Exception):
                await zc.async_unregister_service(info)
            with contextlib.suppress(Exception):
                await zc.async_close()
            found.close()


def _is_ipv4(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    except ValueError:
        return False
