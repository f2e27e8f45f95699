"""Who is on the other end of the local socket: the connecting process, and whether it is an agent's.

The sidecar asks the kernel (``SO_PEERCRED`` on Linux, ``LOCAL_PEERPID`` on macOS) for the client's
pid and reads the process facts through psutil and the POSIX calls for a process's group and
session, so the same rules hold on Linux and macOS. A process is an agent's (:func:`agent_reason`)
when any of these holds:

- an agent harness is among its ancestors (a harness in a person's terminal hands that terminal
  down to its tool calls, so the terminal alone proves nothing);
- its environment carries a variable a harness sets in every process it starts (``CLAUDECODE``,
  ``OPENCODE``, …): it descends from a harness, however it was cut loose since (``setsid``, a
  ``tmux new -d`` whose panes have a terminal of their own);
- it, or an ancestor before the first one with a terminal, is a session leader with no terminal
  that was handed to init (or to a ``systemd --user`` subreaper): ``setsid -f hive …`` from an
  agent's shell cuts the ancestry, and this is what that leaves behind. A person's commands run
  in a terminal, or under a parent that is still there;
- it was handed to init inside a session it does not lead, and is in the process group or the
  session that a running harness of this user leads, or on its terminal: a tool call's
  ``(hive … &)`` is handed to init but keeps its harness's group, session and tty. A process that
  still descends from its session's leader is not judged by what else runs there, nor one that
  merely shares a group with a harness (a test runner or a script may run a harness beside the
  person's own commands).

Harnesses that have run here count after they exit: the sidecar records the group, session and
terminal of every harness a session registered (``seen``), so a tool call's ``(hive … &)`` that
outlived its harness is still an agent's.

A person's terminal (:func:`person_at_terminal`) is a controlling terminal owned by this user (a
terminal of the person's own login, not one another user opened) in a process that is not an
agent's. Only a command there may change the team, address groups or review lessons without a
pop-up: a process with no such terminal (a script, a cron job, anything an agent cut loose) is
asked like an agent. It is a local heuristic, not proof: where a desktop exists, its dialog asks.
"""

from __future__ import annotations

import glob
import itertools
import os
import socket
import stat as stat_mode
import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

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


# Where orphans go: init itself, or a per-user service manager acting as a subreaper.
ORPHAN_KEEPERS = frozenset({"systemd", "init", "launchd"})


@dataclass(frozen=True)
class Stat:
    """The facts about a process that bear on who runs it."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    tty: int  # its controlling terminal's device number, 0 without one


def _terminal(pid: int) -> int:
    """The device number of ``pid``'s controlling terminal (0: none).

    Not psutil's ``Process.terminal()``: it names terminals from a table of ``/dev`` it builds
    once per process, so a long-running sidecar would never see a terminal opened after it
    started. Linux says the number in ``/proc/<pid>/stat``; elsewhere psutil's name is used."""
    if sys.platform.startswith("linux"):
        try:
            text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return 0
        return int(text.rsplit(")", 1)[1].split()[4])  # the name before may hold spaces and ')'
    name = psutil.Process(pid).terminal()
    return os.stat(name).st_rdev if name else 0


def proc_stat(pid: int) -> Stat | None:
    try:
        return Stat(
            pid=pid, ppid=psutil.Process(pid).ppid(), pgid=os.getpgid(pid), sid=os.getsid(pid), tty=_terminal(pid)
        )
    except (psutil.Error, OSError):
        return None


def terminal_owner(device: int) -> int | None:
    """The uid that owns the terminal whose device number is ``device`` (None: no such terminal).

    A pseudo-terminal is looked up by its number first (``/dev/pts/N``: major 136, minor N, the
    common case); any other by a scan of the terminals in ``/dev``."""
    named = [f"/dev/pts/{os.minor(device)}"] if os.major(device) == 136 else []
    for path in itertools.chain(named, glob.iglob("/dev/pts/*"), glob.iglob("/dev/tty*"), ["/dev/console"]):
        try:
            found = os.stat(path)
        except OSError:
            continue
        if stat_mode.S_ISCHR(found.st_mode) and found.st_rdev == device:
            return found.st_uid
    return None


def has_terminal(pid: int | None) -> bool:
    """Whether ``pid`` has a controlling terminal of this user's own (owned by this uid)."""
    found = proc_stat(pid) if pid else None
    return found is not None and found.tty != 0 and terminal_owner(found.tty) == os.getuid()


def ancestor_pids(pid: int | None = None) -> list[int]:
    """The ancestors of ``pid`` (default: this process), nearest first, up to init (excluded)."""
    try:
        parents = psutil.Process(os.getpid() if pid is None else pid).parents()
    except (psutil.Error, OSError):
        return []
    return [p.pid for p in parents[:64] if p.pid > 1]


def program_names(pid: int) -> set[str]:
    """The names a process runs as: its executable and, for an interpreter, the script it runs."""
    try:
        argv = psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return set()
    return names_of(argv)


def _environment(pid: int) -> set[str]:
    """The names of the variables in ``pid``'s environment (as it was started)."""
    try:
        return set(psutil.Process(pid).environ())
    except (psutil.Error, OSError):
        return set()


def names_of(argv: list[str]) -> set[str]:
    names = {Path(argv[0]).name} if argv and argv[0] else set()
    if names & INTERPRETERS or any(n.startswith("python3.") for n in names):
        script = next((a for a in argv[1:] if a and not a.startswith("-")), "")
        if script:
            names.add(Path(script).name)
    return names


def under_harness(pid: int | None, binaries: Iterable[str]) -> bool:
    """Whether an agent harness (one of ``binaries``) is among the ancestors of ``pid``."""
    if not pid:
        return False
    wanted = set(binaries)
    return any(program_names(ancestor) & wanted for ancestor in ancestor_pids(pid))


def _orphan_keeper(pid: int) -> bool:
    return pid == 1 or bool(program_names(pid) & ORPHAN_KEEPERS)


def detached(pid: int) -> bool:
    """Whether ``pid`` runs in a terminal-less session that was cut loose from whoever started it.

    Walks from the process up to the first one with a terminal: a session leader on the way whose
    parent is init or a subreaper, or a session whose leader is gone, is what ``setsid -f`` (or a
    double fork out of a ``setsid`` shell) leaves behind.
    """
    for current in (pid, *ancestor_pids(pid)):
        found = proc_stat(current)
        if found is None or found.tty != 0:
            return False
        if found.sid == current and _orphan_keeper(found.ppid):
            return True
        if found.sid > 0 and proc_stat(found.sid) is None:
            return True  # its session leader exited: nothing is left to say who started it
    return False


def orphaned_in_session(pid: int) -> bool:
    """Whether ``pid``, or an ancestor below its session's leader, was handed to init (a double fork)."""
    for current in (pid, *ancestor_pids(pid)):
        found = proc_stat(current)
        if found is None or found.sid == current:
            return False  # its session's leader, reached by parents that are all still there
        if _orphan_keeper(found.ppid):
            return True
    return False


def running_harnesses(binaries: Iterable[str], uid: int | None = None) -> list[tuple[int, Stat]]:
    """This user's running harness processes, with their facts."""
    wanted = set(binaries)
    uid = os.getuid() if uid is None else uid
    found: list[tuple[int, Stat]] = []
    for process in psutil.process_iter(["uids", "cmdline"]):
        uids, argv = process.info.get("uids"), process.info.get("cmdline")
        if uids is None or uids.real != uid or not names_of(argv or []) & wanted:
            continue
        stat = proc_stat(process.pid)
        if stat is not None:
            found.append((process.pid, stat))
    return found


def agent_reason(
    pid: int | None, binaries: Iterable[str], environment: Iterable[str] = (), seen: Iterable[Stat] = ()
) -> str:
    """Why ``pid`` is an agent's process ("" when nothing says so). See the module's rules.

    ``binaries``: the programs harnesses run as; ``environment``: the variables they set in
    every process they start (registry.agent_environment); ``seen``: harnesses recorded while
    they ran, which may have exited since."""
    if not pid or not psutil.pid_exists(pid):
        return ""
    wanted = set(binaries)
    if program_names(pid) & wanted:
        return "it is an agent harness"
    for ancestor in ancestor_pids(pid):
        names = program_names(ancestor) & wanted
        if names:
            return f"it runs under the agent harness {min(names)} (pid {ancestor})"
    carried = _environment(pid) & set(environment)
    if carried:
        return f"its environment is an agent harness's ({min(carried)} is set)"
    if detached(pid):
        return "it was detached from any terminal and from whatever started it (setsid)"
    own = proc_stat(pid)
    if own is None or not orphaned_in_session(pid):
        return ""
    for stat in (*(found for _, found in running_harnesses(wanted)), *seen):
        # The group or session a harness leads (as a shell's job, or started in a session of its
        # own) is its tool calls'; a harness that merely runs in the same group as this process
        # (a test runner's, a script's) says nothing about who started this one.
        if stat.pid in (own.pgid, own.sid) or (own.tty and own.tty == stat.tty):
            return f"it is in the process group, session or terminal of the agent harness pid {stat.pid}"
    return ""


def person_at_terminal(
    pid: int | None, binaries: Iterable[str], environment: Iterable[str] = (), seen: Iterable[Stat] = ()
) -> bool:
    """A process with a controlling terminal of this user's own that is not an agent's."""
    return has_terminal(pid) and not agent_reason(pid, binaries, environment, seen)
