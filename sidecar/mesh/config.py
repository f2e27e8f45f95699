"""The mesh's settings: ``[mesh]`` in config.toml, and the timings every part of the mesh shares."""

from __future__ import annotations

import contextlib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.config import DAY

BACKOFF_START = 2.0
BACKOFF_MAX = 60.0
HELLO_TIMEOUT = 10.0
OUTBOX_GIVE_UP = 7 * DAY
RATE_WINDOW = 60.0


@dataclass(frozen=True)
class MeshConfig:
    """``[mesh]`` in config.toml (``[inbound]`` is hive.sidecar.mail.policy's, read as it changes).

    ``listen`` is ``host:port`` (port 0: reuse the last port if free, else any); ``advertise``
    overrides the addresses told to teammates; ``static`` lists addresses always worth dialing
    (a VPN or public host); ``mdns`` turns LAN discovery on, on ``mdns_interfaces`` or all.
    ``custody_frames`` and ``custody_bytes``: what an anchor holds for offline machines from any
    one sender machine (:mod:`.custody`). ``relayed_redial``: the longest wait between dials of a
    member an anchor relays to (a direct link is only an improvement then, and each failed dial
    retransmits handshakes for ``connect_timeout``).
    """

    listen: str = "0.0.0.0:0"
    advertise: tuple[str, ...] = ()
    static: tuple[str, ...] = ()
    mdns: bool = True
    mdns_interfaces: tuple[str, ...] = ()
    ack_wait: float = 5.0
    rate_limit: int = 60
    rate_window: float = RATE_WINDOW
    loop_limit: int = 12
    connect_timeout: float = 10.0
    outbox_give_up: float = OUTBOX_GIVE_UP
    custody_frames: int = 5_000
    custody_bytes: int = 64 * 1024 * 1024
    relayed_redial: float = 600.0


def load_mesh_config(path: Path) -> MeshConfig:
    data: dict[str, Any] = {}
    if path.exists():
        with contextlib.suppress(tomllib.TOMLDecodeError, OSError):
            data = tomllib.loads(path.read_text(encoding="utf-8"))
    mesh = data.get("mesh") if isinstance(data.get("mesh"), dict) else {}
    assert isinstance(mesh, dict)

    def strings(value: Any) -> tuple[str, ...]:
        return tuple(str(v) for v in value) if isinstance(value, list) else ()

    base = MeshConfig()
    return MeshConfig(
        listen=str(mesh.get("listen", base.listen)),
        advertise=strings(mesh.get("advertise")),
        static=strings(mesh.get("static")),
        mdns=bool(mesh.get("mdns", base.mdns)),
        mdns_interfaces=strings(mesh.get("mdns_interfaces")),
        ack_wait=float(mesh.get("ack_wait", base.ack_wait)),
        rate_limit=int(mesh.get("rate_limit", base.rate_limit)),
        rate_window=float(mesh.get("rate_window", base.rate_window)),
        loop_limit=int(mesh.get("loop_limit", base.loop_limit)),
        connect_timeout=float(mesh.get("connect_timeout", base.connect_timeout)),
        outbox_give_up=float(mesh.get("outbox_give_up", base.outbox_give_up)),
        custody_frames=int(mesh.get("custody_frames", base.custody_frames)),
        custody_bytes=int(mesh.get("custody_bytes", base.custody_bytes)),
        relayed_redial=float(mesh.get("relayed_redial", base.relayed_redial)),
    )
