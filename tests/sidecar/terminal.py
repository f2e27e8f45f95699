"""Run the hive CLI as a person at a terminal who answers its confirmation question."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

PROMPT = b"[y/N] "


def run_in_terminal_answering(
    env: dict[str, str],
    answer: str,
    *args: str,
    timeout: float = 30,
    under: str | None = None,
    cwd: Path | None = None,
    prompts: tuple[bytes, ...] = (PROMPT,),
) -> tuple[int, str]:
    """Run ``hive ARGS`` with a pty as its controlling terminal; type ``answer`` when it asks.

    ``under``: a program path that starts the command and waits for it, as an agent harness
    running a tool call in the person's terminal does. ``prompts``: how its questions end.
    """
    master, slave = pty.openpty()
    command = [sys.executable, "-m", "hive.sidecar.cli", *args]
    if under:
        command = [under, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))", *command]
    process = subprocess.Popen(
        command, env=env, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, preexec_fn=lambda: os.login_tty(slave)
    )
    os.close(slave)
    output = b""
    answered = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
            if not answered and output.rstrip().endswith(tuple(p.rstrip() for p in prompts)):
                os.write(master, answer.encode() + b"\n")
                answered = True
    finally:
        os.close(master)
    return process.wait(timeout=timeout), output.decode(errors="replace").replace("\r\n", "\n")
