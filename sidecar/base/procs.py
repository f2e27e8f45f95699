"""Process facts through psutil, so the same code reads them on Linux and macOS.

A process is named by its pid *and* its start time: a pid is reused once its process is gone, and
only the pair says that the process running now is the one hive recorded. :func:`exited` returns
when such a process ends, woken by the kernel where it can be (a pidfd on Linux) and otherwise by
a slow timer (macOS, BSD).
"""

from __future__ import annotations

import contextlib
import os

import anyio
import psutil

POLL = 2.0  # seconds between looks where the kernel cannot wake us when a process exits
SAME_START = 0.05  # start times within this many seconds are the same process (float rounding)


def started(pid: int | None) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None if there is none to see."""
    if not pid or pid <= 0:
        return None
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def alive(pid: int | None, start: float | None) -> bool:
    """Whether ``pid`` still runs and is the process that started at ``start`` (None: any process)."""
    if not pid or pid <= 0:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return False  # exited; only its parent has not collected it yet
        return start is None or abs(process.create_time() - start) < SAME_START
    except psutil.AccessDenied:
        return True  # another user's process: it exists, and that is all we may know
    except (psutil.Error, OSError):
        return False


def folder(pid: int | None) -> str:
    """The folder process ``pid`` runs in, as the kernel says; "" when there is none to see."""
    if not pid or pid <= 0:
        return ""
    try:
        return psutil.Process(pid).cwd()
    except (psutil.Error, OSError):
        return ""


def parent(pid: int | None) -> int | None:
    """The pid of the parent of process ``pid``, as the kernel says; None when there is none to see."""
    if not pid or pid <= 0:
        return None
    try:
        return psutil.Process(pid).ppid()
    except (psutil.Error, OSError):
        return None


async def exited(pid: int, start: float | None) -> None:
    """Return once process ``pid`` (the one that started at ``start``) has exited."""
    fd = None
    with contextlib.suppress(AttributeError, OSError):
        fd = os.pidfd_open(pid)  # Linux 5.3+: readable once the process exits
    try:
        if not alive(pid, start):  # gone already, or the pid was reused before we opened it
            return
        if fd is not None:
            await anyio.wait_readable(fd)
            return
        while alive(pid, start):  # noqa: ASYNC110 - nothing sets an event here: this is the slow timer
            await anyio.sleep(POLL)
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
