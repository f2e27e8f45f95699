"""``python -m hive.sidecar``: run the sidecar in the foreground (what `hive sidecar` runs)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback

from hive.integrations import registry

from .base.errors import HiveError
from .base.paths import state_paths
from .base.peer import agent_reason
from .daemon.server import AlreadyRunning, run_sidecar
from .person.dialog import note_start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hive sidecar", description="Run the hive sidecar in the foreground.")
    parser.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--detach", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # Before the fork, while whoever started this sidecar is still its ancestry: only a sidecar its
    # person started may take its desktop from its own environment (dialog.note_start).
    note_start(by_person=not agent_reason(os.getpid(), registry.binaries(), registry.agent_environment()))
    if args.detach and os.fork() > 0:
        os._exit(0)  # the launcher exits; the sidecar goes on as a child of init
    try:
        run_sidecar(state_paths(), ready_fd=args.ready_fd)
    except AlreadyRunning as exc:
        if args.ready_fd is not None:  # tells the starting client to connect to that one instead
            with contextlib.suppress(OSError):
                os.write(args.ready_fd, b"busy\n")
        print(f"hive: {exc.message}", file=sys.stderr)
        return 1
    except HiveError as exc:
        print(f"hive: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except Exception as exc:
        # The traceback for the log, then one line of ours for the client that started it: a
        # library's helper thread may print its own failure after ours (aiosqlite's, when its
        # loop closed under it), so the client looks for this line, not the last one.
        traceback.print_exc()
        print(f"hive: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
