"""The approval steps a person takes in each harness after ``hive setup``; hive never takes them itself.

Harnesses guard hooks, project configs and MCP servers behind the person's own approval, and
``hive setup`` never writes a setting that skips one (no pre-approved hook hashes, no trusted
folders, no auto-approval of project MCP files). It prints these steps instead. They are about
the harnesses' approval prompts, measured in ``../shared/notes/harnesses.md``.
"""

from __future__ import annotations

from hive.integrations import registry
from hive.integrations.descriptor import Scope

RESTART = "restart sessions that are already running: agents load MCP servers, hooks and plugins at start-up"


def steps(harness: str, scope: Scope) -> tuple[str, ...]:
    """What the person must approve in ``harness`` for hive's ``scope`` files to take effect
    (each harness states its own: ``hive_setup_steps``)."""
    found = registry.harnesses().get(harness)
    return tuple(found.setup_steps(scope)) if found else ()
