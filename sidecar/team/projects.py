"""Projects: one id per repository however it was cloned, and who is a member (who gets its lessons).

A project id is ``sha256:`` and the SHA-256 of the normalised remote URL: ``git@host:org/repo.git``,
``ssh://git@host:22/org/repo``, ``https://user@Host/org/repo/`` and ``https://host/org/repo`` are all
``https://host/org/repo`` (lower-cased, no credentials, port or ``.git``), so an ssh clone and an
https clone share one project and its memory. A repository without a remote is identified by its
absolute path, which is then a project of one machine.

Membership is signed in the roster (:class:`hive.sidecar.team.roster.ProjectMember`), so it travels
and merges with the team: a person's first session in a repository proposes their membership (or,
when the project has no owner yet, claims it), and the project's owner confirms proposals
(``project_confirm``). Inferring membership from activity would let anyone who clones a repo
receive its lessons, so only a confirmed member (or the owner) receives project lessons.

Ops::

    project_join {repo? | cwd?}          propose this machine's person (or claim an ownerless project)
    project_confirm {project, person, desktop?, confirmed_on_terminal?}
                                         the owner confirms a proposal, in a desktop pop-up or typed at
                                         the command's own terminal (``hive project confirm``): never an
                                         agent's tool call, since membership decides who receives lessons
    project_remove {project, person}     the owner removes a member; a person may remove themselves
    project_show {project? | repo?}      owner, members and open proposals

``hive project [show|join|confirm PERSON|remove PERSON] [--repo R]`` (hive.sidecar.cli.projects).
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any

from ..base.errors import BadRequest, NotFound, NotMember, Refused
from ..base.git import git_facts, remote_project
from ..person.confirm import asks_person, confirm_by_person
from ..person.dialog import Prompt, clean
from .roster import ProjectView, Roster

if TYPE_CHECKING:
    from ..base.host import Connection
    from .local import TeamHost

log = logging.getLogger("hive.sidecar.team.projects")

CONFIRM_TIME = 300.0  # seconds the owner's confirmation pop-up stays up
LABEL_KEY = "project_label:"  # kv: project id -> the remote it was seen as here, for people to read


def normalise_remote(url: str) -> str:
    """``https://host/org/repo`` for any spelling of a git remote; an absolute path stays a path."""
    url = (url or "").strip()
    if not url:
        raise BadRequest("no remote URL or path")
    if url.startswith("/") or url.startswith("file://"):
        return url.removeprefix("file://").rstrip("/").removesuffix(".git") or "/"
    if "://" not in url and ":" not in url and url.count("/") >= 2:
        return f"https://{url.strip('/').removesuffix('.git').lower()}"  # already host/org/repo
    return f"https://{remote_project(url).lower()}"


def project_id(remote_or_path: str) -> str:
    """The project id of a remote URL, a ``host/org/repo`` (as sessions hold it) or a repository path."""
    return "sha256:" + hashlib.sha256(normalise_remote(remote_or_path).encode("utf-8")).hexdigest()


def project_of_session(repo: str, cwd: str = "") -> str | None:
    """The project of a session from its ``repo`` (normalised remote) or, lacking one, its repo root."""
    if repo and "/" in repo:
        return project_id(repo)
    root = git_facts(cwd).get("repo_root", "") if cwd else ""
    return project_id(root) if root else None


def view_of(roster: Roster | None, project: str) -> ProjectView | None:
    return None if roster is None else roster.projects.get(project)


def members(roster: Roster | None, project: str) -> frozenset[str]:
    view = view_of(roster, project)
    return view.members if view is not None else frozenset()


def is_member(roster: Roster | None, project: str, person: str) -> bool:
    return person in members(roster, project)


def projects_of(roster: Roster | None, person: str) -> list[str]:
    """The projects ``person`` is a confirmed member (or owner) of."""
    if roster is None:
        return []
    return sorted(p for p, v in roster.projects.items() if person in v.members)


async def remember_label(sidecar: TeamHost, project: str, repo: str) -> None:
    if repo and "/" in repo and await sidecar.store.get_kv(LABEL_KEY + project) is None:
        await sidecar.store.set_kv(LABEL_KEY + project, normalise_remote(repo).removeprefix("https://"))


async def label_of(sidecar: TeamHost, project: str) -> str:
    return await sidecar.store.get_kv(LABEL_KEY + project) or project[:19]


async def join(sidecar: TeamHost, project: str) -> dict[str, Any]:
    """Propose this machine's person for ``project``; claim it when it has no owner. Idempotent."""
    team = sidecar.team
    person = sidecar.settings.person
    view = view_of(team.roster, project)
    if view is not None and (person in view.members or person in view.proposed):
        return show(team.roster, project)
    role = "owner" if view is None or not view.owner else "proposed"
    await team.project_entry(project, person, role)
    return show(team.roster, project)


async def on_session(sidecar: TeamHost, repo: str) -> None:
    """A session registered in ``repo`` (its normalised remote): the person's first session there
    proposes their membership (or claims an ownerless project). Only repositories with a remote:
    a path-only project is one machine's, and nothing of it travels."""
    team = getattr(sidecar, "team", None)
    if team is None or team.roster is None or not repo or "/" not in repo:
        return
    project = project_id(repo)
    await remember_label(sidecar, project, repo)
    view = view_of(team.roster, project)
    person = sidecar.settings.person
    if view is not None and (person in view.members or person in view.proposed):
        return
    try:
        await join(sidecar, project)
    except Exception:  # the session works without it; the person can `project_join` later
        log.exception("could not propose %s for the project of %s", person, repo)


def confirm_question(person: str, label: str) -> str:
    """What the owner confirms (the terminal path repeats it back as ``confirmed_on_terminal``)."""
    return f"Add {person} to project {label}? They will receive its lessons."


async def owner_confirms(conn: Connection, request: dict[str, Any], question: str) -> str:
    """How the owner confirmed (``desktop`` or ``terminal``), or raise: the one person check
    (``person.confirm_by_person``), never an agent's tool call."""
    prompt = Prompt(title="hive · confirm a project member", body=clean(question), timeout=CONFIRM_TIME)
    return await confirm_by_person(
        conn,
        request,
        question,
        title=prompt.title,
        outcome="not recorded",
        refused=Refused,
        prompt=prompt,
        hint="A project member is confirmed by its owner in person, with `hive project confirm` typed at a terminal.",
    )


async def confirm(sidecar: TeamHost, project: str, person: str) -> dict[str, Any]:
    """The owner's confirmation of ``person`` (the caller had the owner confirm it in person).
    Raises ``not_member`` unless this machine's person owns the project and ``person`` is in the team."""
    team = sidecar.team
    view = check_confirm(sidecar, project, person)
    if person not in view.members:
        await team.project_entry(project, person, "member")
    return show(team.roster, project)


def check_confirm(sidecar: TeamHost, project: str, person: str) -> ProjectView:
    """The project, if this machine's person may confirm ``person`` in it; else ``not_found`` or ``not_member``."""
    team = sidecar.team
    view = view_of(team.roster, project)
    if view is None:
        raise NotFound("no such project in the team")
    if view.owner != sidecar.settings.person:
        raise NotMember(f"only the project's owner ({view.owner or 'nobody yet'}) confirms its members")
    if team.roster is None or person not in {m.person for m in team.roster.active().values()}:
        raise NotMember(f"{person} is not a member of the team")
    return view


async def remove(sidecar: TeamHost, project: str, person: str) -> dict[str, Any]:
    team = sidecar.team
    view = view_of(team.roster, project)
    if view is None:
        raise NotFound("no such project in the team")
    me = sidecar.settings.person
    if me not in (view.owner, person):
        raise Refused("only the project's owner removes another member")
    await team.project_entry(project, person, "removed")
    return show(team.roster, project)


def show(roster: Roster | None, project: str) -> dict[str, Any]:
    view = view_of(roster, project)
    if view is None:
        return {"project": project, "owner": "", "members": [], "proposed": []}
    return {"project": project, "owner": view.owner, "members": sorted(view.members), "proposed": sorted(view.proposed)}


def _project_arg(request: dict[str, Any]) -> str:
    project = request.get("project")
    if isinstance(project, str) and project.startswith("sha256:"):
        return project
    repo, cwd = request.get("repo"), request.get("cwd")
    found = project_of_session(repo if isinstance(repo, str) else "", cwd if isinstance(cwd, str) else "")
    if found is None:
        raise BadRequest("name the project (sha256:...) or a repo (host/org/repo, a remote URL or a cwd in a repo)")
    return found


def _person_arg(request: dict[str, Any]) -> str:
    person = request.get("person")
    if not isinstance(person, str) or not person:
        raise BadRequest("person is required")
    return person


async def op_project_join(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Propose this machine's person as a member of a project, or claim it when it has no owner.

    Request: ``project`` (str): its ``sha256:`` id; or ``repo`` (str): host/org/repo or a remote
    URL; or ``cwd`` (str): a folder in the repository. Returns ``{"project", "owner", "members",
    "proposed"}``; joining twice changes nothing. Raises ``bad_request`` when no project is named,
    ``not_found`` in no team.
    """
    project = _project_arg(request)
    if isinstance(request.get("repo"), str):
        await remember_label(sidecar, project, request["repo"])
    return await join(sidecar, project)


@asks_person
async def op_project_confirm(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """The project's owner confirms a proposed member, in a desktop pop-up or typed at the terminal.

    Request: ``project``, ``repo`` or ``cwd`` (str): the project, as for ``project_join``;
    ``person`` (str, required): the member; ``confirmed_on_terminal`` (str): the question typed
    back at the terminal. Returns ``{"project", "owner", "members", "proposed"}``, plus
    ``confirmed`` (how) when it changed. Raises ``bad_request``, ``not_found`` (no such project),
    ``not_member`` (not the owner, or not in the team), ``refused``/``confirm_on_terminal`` when
    the owner does not confirm.
    """
    project, person = _project_arg(request), _person_arg(request)
    if person in check_confirm(sidecar, project, person).members:  # refused with the reason before asking
        return show(sidecar.team.roster, project)
    how = await owner_confirms(conn, request, confirm_question(person, await label_of(sidecar, project)))
    result = await confirm(sidecar, project, person)
    return {**result, "confirmed": how}


@asks_person
async def op_project_remove(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Remove a member from a project: the owner removes anyone, a person themselves.

    Request: ``project``, ``repo`` or ``cwd`` (str): the project, as for ``project_join``;
    ``person`` (str, required): the member. Returns ``{"project", "owner", "members",
    "proposed"}``. Raises ``bad_request``, ``not_found`` (no such project), ``refused`` (neither
    the owner nor that person), ``needs_person``/``confirm_on_terminal`` when an agent asks
    unconfirmed.
    """
    project, person = _project_arg(request), _person_arg(request)
    # Who receives a project's lessons is the person's call, not something a teammate's text can ask for.
    await confirm_by_person(
        conn,
        request,
        f"Remove {person} from project {await label_of(sidecar, project)}?",
        title="hive · confirm a project change",
        outcome="not changed",
        hint="Ask your person to run `hive project remove` in a terminal.",
        agents_only=True,
    )
    return await remove(sidecar, project, person)


async def op_project_show(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Show a project's owner, members and open proposals.

    Request: ``project``, ``repo`` or ``cwd`` (str): the project, as for ``project_join``. Returns
    ``{"project", "owner", "members", "proposed", "label"}``; ``label`` is the remote it was seen
    as here. Raises ``bad_request`` when no project is named.
    """
    project = _project_arg(request)
    return {**show(sidecar.team.roster, project), "label": await label_of(sidecar, project)}


OPS = {
    "project_join": op_project_join,
    "project_confirm": op_project_confirm,
    "project_remove": op_project_remove,
    "project_show": op_project_show,
}
