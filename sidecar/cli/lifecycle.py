"""``hive sidecar``, ``hive stop`` and ``hive status``: this machine's sidecar, run, stopped and asked how it is."""

from __future__ import annotations

import argparse
import sys
import time

from ..base.errors import Unreachable
from .main import AddCommand, _call, _print_json


def cmd_sidecar(args: argparse.Namespace) -> int:
    from ..__main__ import main as sidecar_main

    return sidecar_main([])


def cmd_stop(args: argparse.Namespace) -> int:
    from ..base.paths import state_paths
    from ..client import lock_held

    paths = state_paths()
    try:
        result = _call("shutdown", autostart=False)
    except Unreachable:
        print("no sidecar is running")
        return 0
    pid = int(result.get("pid") or 0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _process_gone(pid) and not lock_held(paths.lock):
            print(f"stopped the sidecar (pid {pid})")
            return 0
        time.sleep(0.02)
    print(f"asked the sidecar (pid {pid}) to stop, but it is still running", file=sys.stderr)
    return 2


def _process_gone(pid: int) -> bool:
    from ..base import procs  # psutil: only `hive stop` looks at processes

    return not procs.alive(pid, None)  # a zombie has finished too


def cmd_status(args: argparse.Namespace) -> int:
    status = _call("status")
    if args.json:
        _print_json(status)
        return 0
    print(f"sidecar {status['version']} running (pid {status['pid']}, up {status['uptime']:.0f}s)")
    print(f"  state folder  {status['home']}")
    print(f"  socket        {status['socket']}")
    print(f"  you           {status['person']} on {status['machine']}")
    print(f"  team          {status['team'] or 'none (this machine only)'}")
    print(f"  sessions      {status['sessions_live']} live, {status['sessions_known']} known")
    unread = status["terminal_unread"]
    if unread:
        print(f"  your inbox    {unread} unread from {', '.join(status['terminal_unread_from'])}: `hive inbox`")
    return 0


def add_arguments(add: AddCommand) -> None:
    """``hive sidecar``, ``stop`` and ``status``, in the order the help lists them."""
    add("sidecar", cmd_sidecar, "run the sidecar in the foreground")
    add("stop", cmd_stop, "stop this machine's sidecar")
    p = add("status", cmd_status, "show the sidecar and your inbox")
    p.add_argument("--json", action="store_true")
