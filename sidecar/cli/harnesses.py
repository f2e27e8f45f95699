"""``hive mcp``, ``hook``, ``integrations``, ``setup`` and ``doctor``: what connects coding agents to hive.

Each hands over to the part of hive that does the work (the MCP server, the hook client, the
harness registry, the installer), which only its own command imports.
"""

from __future__ import annotations

import argparse
import sys

from .main import AddCommand

TYPE_CHECKING = False
if TYPE_CHECKING:  # for the type checker only: the installer is only doctor's and setup's to load
    from hive.installer.doctor import Check


def cmd_mcp(args: argparse.Namespace) -> int:
    from ..mcp.server import main as mcp_main  # the MCP SDK is heavy; only this command needs it

    return mcp_main()


def cmd_hook(args: argparse.Namespace) -> int:
    from hive.integrations import hook_command  # the harness registry: only this command needs it

    if args.command_line:
        try:
            print(hook_command.hook_command(args.harness, args.event))
        except KeyError as exc:
            print(f"hive: {exc.args[0]}", file=sys.stderr)
            return 1
        return 0
    return hook_command.run_hook(args.harness, args.event)


def cmd_integrations(args: argparse.Namespace) -> int:
    from hive.integrations.build import build  # pluggy and every harness plugin: only this command needs them

    differing = build(check=args.check)
    for path in differing:
        print(path)
    return 1 if args.check and differing else 0


def cmd_setup(args: argparse.Namespace) -> int:
    from hive.installer.setup import main as setup_main  # the harness registry: only setup and doctor need it

    return setup_main(args)


def cmd_doctor(args: argparse.Namespace) -> int:

    from hive.installer import doctor  # the harness registry and the MCP SDK: only this command needs them

    checks = doctor.run_checks()
    # The installer's checks say whether this machine is in a team; how each teammate's machine is
    # reached from here (the question a team that cannot link asks first) only the running mesh knows.
    if any(c.area == "team" and c.name == "state" and c.status == "ok" for c in checks):
        after = max(i for i, c in enumerate(checks) if c.area == "team") + 1
        checks[after:after] = _team_paths()
    return doctor.report(checks, as_json=args.json)


def _team_paths() -> list[Check]:
    """This machine's advertised addresses (tailnet ones marked), whether tailscale runs here unadvertised,
    and one line per teammate machine: linked directly (to which address), through the anchor, or not."""
    import time

    from hive.installer.doctor import Check

    from ..base.errors import HiveError
    from ..mesh.tailscale import is_tailnet, tailnet_ips
    from .main import _call

    try:
        team = _call("team_show", autostart=False)  # the installer's check started it if it had to
        mesh = _call("mesh", autostart=False)
    except (HiveError, OSError, ValueError) as exc:
        said = getattr(exc, "message", None) or repr(exc)
        return [Check("team", "paths", "warn", f"the sidecar did not say how teammates are reached: {said}")]

    checks: list[Check] = []
    addresses = [str(a) for a in mesh.get("addresses") or []]
    if addresses:
        shown = ", ".join(f"{a} (tailnet)" if is_tailnet(_host(a)) else a for a in addresses)
        checks.append(Check("team", "addresses", "ok", f"teammates dial this machine at {shown}"))
    else:
        checks.append(Check("team", "addresses", "warn", "none: teammates cannot dial this machine, only it them"))
    if not any(is_tailnet(_host(a)) for a in addresses):
        running = tailnet_ips()  # [] at once when tailscale is not installed
        if running:
            checks.append(
                Check(
                    "team",
                    "tailnet",
                    "info",  # maybe on purpose (advertise names a public address): said, not failed
                    f"tailscale is up here ({', '.join(map(str, running))}), but teammates are not told "
                    "this machine's tailnet address",
                    "remove `advertise` from `[mesh]` in config.toml, or add the tailnet address to it; "
                    'keep `listen` on all interfaces ("0.0.0.0:<port>")',
                )
            )

    links = mesh.get("links") or {}
    for person in team.get("people") or []:
        for m in person.get("machines") or []:
            if m.get("me"):
                continue
            name = f"{person.get('person')}@{m.get('machine')}"
            anchor = " (the team's anchor)" if m.get("role") == "anchor" else ""
            path = m.get("path")
            if m.get("online") and path == "direct":
                host = _host(str((links.get(m.get("key")) or {}).get("address") or ""))
                over = " over the tailnet" if is_tailnet(host) else ""
                checks.append(Check("team", name, "ok", f"direct{over}" + (f", to {host}" if host else "") + anchor))
            elif m.get("online"):
                # Mail still flows, sealed, through the anchor; a direct link replaces it once one dials.
                checks.append(Check("team", name, "ok", f"{path or 'linked'}: no direct link{anchor}"))
            elif m.get("unreachable"):
                checks.append(
                    Check(
                        "team",
                        name,
                        "warn",
                        f"up (linked to {', '.join(m.get('linked_by') or [])}) but unreachable from here{anchor}",
                        "this machine cannot dial it, nor it this one: one tailnet (tailscale up on both), a "
                        "team anchor (`hive join … --anchor` on an always-on machine), or a port forward it "
                        "advertises in `[mesh] advertise`",
                    )
                )
            elif m.get("last_seen"):
                seen = time.strftime("%Y-%m-%d %H:%M", time.localtime(m["last_seen"]))
                checks.append(Check("team", name, "info", f"offline, last seen {seen}{anchor}"))
            else:
                known = ", ".join(m.get("addresses") or []) or "none known"
                checks.append(
                    Check(
                        "team",
                        name,
                        "warn",
                        f"never linked (its addresses: {known}){anchor}",
                        "when it is on, both machines need a way to each other: one tailnet (tailscale up on "
                        "both), one LAN, a team anchor, or a `[mesh] static` address one of them can reach",
                    )
                )
    return checks


def _host(address: str) -> str:
    """The host of ``host:port``, ``[v6]:port`` or the bare ``v6:port`` a link reports."""
    host, colon, _ = address.rpartition(":")
    return host.strip("[]") if colon else address


def add_arguments(add: AddCommand) -> None:
    """``hive mcp``, ``hook``, ``integrations``, ``setup`` and ``doctor``, in the order the help lists them."""
    add("mcp", cmd_mcp, "serve hive's tools to an agent over MCP on stdin/stdout")
    p = add("hook", cmd_hook, "answer a harness hook: its JSON on standard input, the reply on standard output")
    p.add_argument(
        "--command",
        dest="command_line",
        action="store_true",
        help="print the command line `hive setup` writes for this hook on this machine",
    )
    p.add_argument("harness", help="claude-code, codex, cursor, gemini, ...")
    p.add_argument("event", help="the harness's own event name (PostToolUse, stop, ...), or watch")
    p = add("integrations", cmd_integrations, "regenerate the harnesses' reference files from their descriptors")
    p.add_argument("action", choices=["build"])
    p.add_argument("--check", action="store_true", help="change nothing; list files that differ and exit 1 if any")
    p = add("setup", cmd_setup, "wire every installed coding agent to hive (MCP, hooks, plugins, skills)")
    p.add_argument("--only", metavar="NAMES", help="comma-separated harnesses (aliases allowed), e.g. codex,gemini")
    p.add_argument(
        "--project",
        nargs="?",
        const=".",
        metavar="DIR",
        help="write the project-scoped files of DIR (default: this folder) instead of your user files",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would change, per harness; write nothing")
    p.add_argument("--diff", action="store_true", help="with --dry-run: print the full unified diffs")
    p.add_argument("--remove", action="store_true", help="undo setup: restore or clean every file hive changed")
    p.add_argument("--service", action="store_true", help="also run the sidecar as a login service (systemd/launchd)")
    p = add("doctor", cmd_doctor, "check the sidecar, the team and every harness; print the fix for each problem")
    p.add_argument("--json", action="store_true")
