"""The team as the mesh sees it: :class:`Member` records and :class:`TeamView` over the sidecar's team."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..team.local import TeamHost


@dataclass(frozen=True)
class Member:
    key: str  # hex of the machine's ed25519 public key
    person: str
    machine: str
    active: bool
    addresses: tuple[str, ...] = ()  # static ones from its roster entry
    role: str = "member"  # or "anchor": an always-on member that relays and holds mail (.relay)


class TeamView:
    """The roster and machine key as the mesh uses them: :class:`hive.sidecar.team.membership.Team`.

    Always read through ``sidecar.team`` (set when the sidecar starts), never cached, so the
    mesh follows whatever team object the sidecar holds.
    """

    def __init__(self, sidecar: TeamHost) -> None:
        self.sc = sidecar

    def _team(self) -> Any:
        return getattr(self.sc, "team", None)

    def identity_seed(self) -> bytes | None:
        team = self._team()
        return None if team is None else team.identity.signing_key.encode()

    @property
    def team_id(self) -> str | None:
        team = self._team()
        return None if team is None else team.team_id()

    def my_key(self) -> str:
        return str(self._team().identity.key_id)

    def member(self, key: str) -> Member | None:
        team = self._team()
        found = None if team is None else team.member(key)
        if found is None:
            return None
        return Member(
            key=key,
            person=found.person,
            machine=found.machine,
            active=found.active,
            addresses=tuple(found.addresses),
            role=found.role,
        )

    def members(self) -> list[Member]:
        team = self._team()
        if team is None:
            return []
        return [
            Member(
                key=m.key,
                person=m.person,
                machine=m.machine,
                active=m.active,
                addresses=tuple(m.addresses),
                role=m.role,
            )
            for m in team.members()
        ]

    def sign(self, kind: str, body: Any) -> Any:
        """``body`` signed by this machine as ``kind`` for the team (a ``Signed``)."""
        return self._team().sign(kind, body)

    def verify(self, kind: str, signed: Any) -> bool:
        team = self._team()
        return team is not None and bool(team.verify(kind, signed))

    def fingerprint(self) -> Any:
        team = self._team()
        return None if team is None else team.fingerprint()

    def state_for(self, key: str) -> dict[str, Any] | None:
        team = self._team()
        return None if team is None else team.state_for(key)

    async def merge(self, state: Any, key: str) -> bool:
        team = self._team()
        return False if team is None else bool(await team.merge(state, key))

    def mdns_tag(self) -> str:
        team_id = self.team_id or ""
        return hmac.new(team_id.encode(), b"hive-mdns-v1", hashlib.sha256).hexdigest()[:16]
