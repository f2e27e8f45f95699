"""Who is on the other end of the local socket: the connecting process and whether a person typed.

The sidecar asks the kernel (``SO_PEERCRED`` on Linux) for the client's pid, then whether that
process has a controlling terminal. A process an agent harness starts for a tool call normally
has none; a person's shell does. A harness running in a person's terminal hands that terminal
down to its tool calls, so a process under an agent harness is never taken for a person, however
its terminal looks: otherwise an agent could answer the confirmations meant for its person.
This decides who may address groups, review lessons and be shown as a person. It is a local
heuristic, not proof: where a desktop exists, its dialog asks instead.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

# Launchers whose program is their first argument (`node /…/bin/gemini`).
INTERPRETERS = frozenset({"node", "nodejs", "bun", "deno", "python", "python3"})


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


def ancestor_pids(pid: int | None = None) -> list[int]:
    """The ancestors of ``pid`` (default: this process), nearest first (Linux /proc; elsewhere only the parent)."""
    own = pid is None
    pid = os.getpid() if pid is None else pid
    chain: list[int] = []
    while len(chain) < 64:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        except OSError:
            break
        # The command name may hold spaces and parentheses: fields resume after the last ')'.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent <= 1:
            break
        chain.append(parent)
        pid = parent
    if not chain and own and os.getppid() > 1:
        chain.append(os.getppid())
    return chain


def program_names(pid: int) -> set[str]:
    """The names a process runs as: its executable and, for an interpreter, the script it runs."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return set()
    names = {Path(os.fsdecode(argv[0])).name} if argv and argv[0] else set()
    if names & INTERPRETERS or any(n.startswith("python3.") for n in names):
        script = next((a for a in argv[1:] if a and not a.startswith(b"-")), b"")
        if script:
            names.add(Path(os.fsdecode(script)).name)
    return names


def under_harness(pid: int | None, binaries: Iterable[str]) -> bool:
    """Whether an agent harness (one of ``binaries``) is among the ancestors of ``pid``."""
    if not pid:
        return False
    wanted = set(binaries)
    return any(program_names(ancestor) & wanted for ancestor in ancestor_pids(pid))


def person_at_terminal(pid: int | None, binaries: Iterable[str]) -> bool:
    """A process with a controlling terminal that no agent harness started."""
    return has_terminal(pid) and not under_harness(pid, binaries)
