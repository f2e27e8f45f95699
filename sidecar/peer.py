"""Who is on the other end of the local socket: the connecting process and whether a person typed.

The sidecar asks the kernel (``SO_PEERCRED`` on Linux) for the client's pid, then whether that
process has a controlling terminal. A process an agent harness starts for a tool call normally
has none; a person's shell does. This decides who may address groups and be shown as a person.
It is a local heuristic, not proof: the desktop confirmation of the ask_user work replaces it
for group sends.
"""

from __future__ import annotations

import socket
import struct
import sys
from pathlib import Path


def peer_pid(sock: socket.socket | None) -> int | None:
    if sock is None:
        return None
    try:
        if sys.platform.startswith("linux"):
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, _uid, _gid = struct.unpack("3i", creds)
            return pid or None
        if sys.platform == "darwin":
            local_peerpid = 0x002
            raw = sock.getsockopt(0, local_peerpid, struct.calcsize("i"))
            return struct.unpack("i", raw)[0] or None
    except OSError:
        return None
    return None


def has_terminal(pid: int | None) -> bool:
    """Whether ``pid`` has a controlling terminal (Linux /proc; elsewhere: assume not)."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    # The command name in field 2 may contain spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[4]) != 0  # tty_nr
