"""Inbound policy: what this machine does with a teammate's mail, per sending person.

``accept`` (the default) delivers it, ``hold`` keeps it for the person to approve (``hive held``),
``refuse`` turns it away with a receipt saying so. Kept in config.toml::

    [inbound]
    default = "accept"
    [inbound.people]
    bob = "hold"

``hive policy [PERSON] accept|hold|refuse`` writes it (format kept: tomlkit), and the sidecar
takes a change, by that command or by hand, at once: the file is looked at again when its
size, inode or modification time changed, at most once a second.
"""

from __future__ import annotations

import contextlib
import math
import time
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomlkit
import tomlkit.exceptions

from ..base.config import slug, write_atomically
from ..base.errors import BadRequest
from ..base.host import PerSidecar
from ..person.confirm import asks_person, confirm_by_person

if TYPE_CHECKING:
    from ..base.host import Connection
    from .host import MailHost

POLICIES = ("accept", "hold", "refuse")
DEFAULT = "accept"
LOOK_EVERY = 1.0  # seconds between looks at the file


def check(person: str | None, value: str) -> None:
    if value not in POLICIES and not (person and value == "default"):
        choices = ", ".join(POLICIES) + (", default (drop their own)" if person else "")
        raise BadRequest(f"a policy is one of {choices}, not {value!r}")


INBOUND: PerSidecar[InboundPolicy] = PerSidecar(lambda sidecar: InboundPolicy(sidecar.paths.config))
"""Each sidecar's inbound policy, read from its config.toml."""


class InboundPolicy:
    """config.toml's ``[inbound]``, as the mesh reads it for every message from a teammate."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._looked = -math.inf
        self.default = DEFAULT
        self.people: dict[str, str] = {}
        self._reload(force=True)

    def _reload(self, force: bool = False) -> None:
        self._looked = time.monotonic()
        try:
            info = self.path.stat()
            stamp: tuple[int, int, int] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
        except OSError:
            stamp = None
        if stamp == self._stamp and not force:
            return
        self._stamp = stamp
        data: dict[str, Any] = {}
        with contextlib.suppress(OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            data = tomllib.loads(self.path.read_text(encoding="utf-8"))
        inbound = data.get("inbound") if isinstance(data.get("inbound"), dict) else {}
        assert isinstance(inbound, dict)
        default = str(inbound.get("default", DEFAULT))
        self.default = default if default in POLICIES else DEFAULT
        people = inbound.get("people") if isinstance(inbound.get("people"), dict) else {}
        assert isinstance(people, dict)
        self.people = {slug(str(k)): str(v) for k, v in people.items() if str(v) in POLICIES}

    def of(self, person: str) -> str:
        if time.monotonic() - self._looked >= LOOK_EVERY:
            self._reload()
        return self.people.get(person, self.default)

    def listing(self) -> dict[str, Any]:
        self._reload()
        return {"default": self.default, "people": dict(sorted(self.people.items()))}

    def set(self, person: str | None, value: str) -> None:
        """Set ``person``'s policy (everyone's default with None); ``value`` "default" drops a person's own."""
        check(person, value)
        text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        try:
            doc = tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as exc:
            raise BadRequest(f"{self.path} is not valid TOML ({exc}); fix it by hand first") from exc
        inbound = doc.get("inbound")
        if inbound is None:
            inbound = tomlkit.table(is_super_table=person is not None)
            doc.append("inbound", inbound)
        if person is None:
            inbound["default"] = value
        else:
            people = inbound.get("people")
            if people is None:
                people = tomlkit.table()
                inbound.append("people", people)
            if value == "default":
                people.pop(person, None)
            else:
                people[person] = value
        write_atomically(self.path, tomlkit.dumps(doc))
        self._reload(force=True)


@asks_person
async def op_policy(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Read or set the inbound policy for teammates' mail: accept, hold (for ``approve``) or refuse.

    Request: ``value`` (str, optional): accept, hold or refuse, or default (drop a person's own);
    without it nothing changes. ``person`` (str, optional): whose messages; without it everyone's
    default. Returns ``{"default", "people": {person: policy}}``. Raises ``bad_request``,
    ``needs_person``/``confirm_on_terminal`` when an agent asks to change it unconfirmed.
    """
    inbound = INBOUND.of(sidecar)
    value, person = request.get("value"), request.get("person")
    if value is None:
        return inbound.listing()
    if not isinstance(value, str) or (person is not None and not isinstance(person, str)):
        raise BadRequest("policy takes 'value' (accept, hold or refuse) and an optional 'person'")
    who = slug(person) if person else None
    if person and not who:
        raise BadRequest(f"{person!r} is not a person's name (a-z, 0-9 and -)")
    check(who, value)
    # What reaches the person's sessions is the person's call: an agent must not open the door.
    whose = f"{who}'s messages" if who else "messages from everyone without a policy of their own"
    await confirm_by_person(
        conn,
        request,
        f"Set hive's inbound policy for {whose} to {value}?",
        title="hive · inbound policy",
        outcome="not changed",
        hint="Ask your person to run `hive policy` in a terminal.",
        agents_only=True,
    )
    inbound.set(who, value)
    return inbound.listing()


OPS = {"policy": op_policy}
