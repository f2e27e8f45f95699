"""The gate's settings and each person's preferences, read from and written to ``config.toml``.

```toml
[gate]                        # this machine's gate, and defaults for every person it decides for
window = 86400                # seconds within which the same fingerprint is a duplicate
hold_attention = 900          # the longest an attention item waits for a breakpoint (seconds)
hold_alarm = 120              # ... an alarm when its person turned alarms off
relay_retry = 60              # how often an item for a person on an unreachable machine is tried again
idle_after = 60               # a session idle this long is at a breakpoint (new items go at once)
budget = 12                   # any preference below may also be set here, as everyone's default

[gate.people.alice]           # alice's own preferences; only alice changes them
budget = 8                    # attention items per day (local day in `timezone`)
quiet = "22:00-08:00"         # quiet hours, local time; "" for none
timezone = "Europe/Berlin"    # an IANA zone, or "local" for this machine's
alarms = true                 # alarms interrupt at once, quiet hours included
channel = "session"           # session | popup | digest (digest only: nothing interrupts but floors)
alarm_channel = "popup"       # session | popup: where floors and alarms go
proposer_share = 0.5          # the most of a source's share one proposing session may spend
mute = ["lesson"]             # sources silenced
live = ["overlap", "review"]  # sources out of shadow (the rest only record what they would do)

[gate.people.alice.shares]    # the fraction of the daily budget each source may spend
review = 0.4
```

Reading is lenient: a value that does not parse keeps its default and is listed in
``problems`` (``hive gate prefs`` shows them), so a typo never stops the sidecar. Writing is
strict (:func:`parse_change`) and format-preserving: :func:`write_changes` edits the file with
tomlkit, so comments, order and blank lines stay as the person left them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import math
import os
import re
import time
import tomllib
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
from tomlkit.items import Table

from ..base.config import write_atomically
from ..base.errors import BadRequest

CHANNELS = ("session", "popup", "digest")
ALARM_CHANNELS = ("session", "popup")
# Overlap notices may start live, and so may notify pop-ups, which a sender asks for explicitly (at
# most one a minute per sending person). So may hive's own lesson sources, whose items hive checked
# before proposing them: a recalled lesson is a verified one (a person approved it) about files the
# session touched, and a review request goes to the reviewer hive chose (CODEOWNERS, then touches);
# in shadow, no proposal would ever be put to its reviewer. Every other source starts in shadow.
DEFAULT_LIVE = frozenset({"overlap", "notify", "lesson", "review"})
# Fractions of the daily budget; a source not listed gets DEFAULT_SHARE. They may sum past 1:
# the daily budget caps the total, the shares only stop one source from spending all of it.
DEFAULT_SHARES: Mapping[str, float] = {"overlap": 0.25, "lesson": 0.25, "review": 0.4, "notify": 0.25, "mail": 0.25}
DEFAULT_SHARE = 0.25
MAX_BUDGET = 1000
RELOAD_EVERY = 1.0  # seconds between looks at the file's mtime

_SOURCE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


def valid_source(name: Any) -> bool:
    return isinstance(name, str) and bool(_SOURCE.match(name))


@dataclass(frozen=True)
class GateSettings:
    """Machine-wide: the same for everyone this gate decides for."""

    window: float = 24 * 3600.0
    hold_attention: float = 900.0
    hold_alarm: float = 120.0
    relay_retry: float = 60.0  # an item for a person whose machine did not take it is tried again this often
    idle_after: float = 60.0  # a session idle this long is at a breakpoint: what would wait for one goes now


@dataclass(frozen=True)
class Prefs:
    """One person's preferences, defaults filled in."""

    person: str
    budget: int = 12
    quiet: tuple[int, int] | None = None  # minutes after local midnight: start, end (may wrap)
    timezone: str = "local"
    alarms: bool = True
    channel: str = "session"
    alarm_channel: str = "popup"
    proposer_share: float = 0.5
    shares: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_SHARES))
    mute: frozenset[str] = frozenset()
    live: frozenset[str] = DEFAULT_LIVE
    problems: tuple[str, ...] = ()

    # ---- time ----------------------------------------------------------------------------

    @functools.cached_property
    def zone(self) -> dt.tzinfo:
        return local_zone() if self.timezone == "local" else zoneinfo.ZoneInfo(self.timezone)

    def local(self, now: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(now, self.zone)

    def day(self, now: float) -> str:
        """The person's local date: budgets are per local day."""
        return self.local(now).date().isoformat()

    def quiet_until(self, now: float) -> float | None:
        """When the quiet hours around ``now`` end, or None when ``now`` is not in them."""
        if self.quiet is None:
            return None
        start, end = self.quiet
        local = self.local(now)
        minute = local.hour * 60 + local.minute
        inside = start <= minute < end if start < end else (minute >= start or minute < end)
        if not inside:
            return None
        ends = local.replace(hour=end // 60, minute=end % 60, second=0, microsecond=0)
        if ends <= local:
            ends += dt.timedelta(days=1)
        # Wall-clock arithmetic in the zone, then back to an instant (a DST change moves the end
        # with the clock, as a person would expect).
        return ends.replace(tzinfo=None).replace(tzinfo=local.tzinfo).timestamp()

    # ---- budget --------------------------------------------------------------------------

    def share(self, source: str) -> float:
        return self.shares.get(source, DEFAULT_SHARE)

    def cap(self, source: str) -> int:
        """Attention items ``source`` may spend per day: its share of the budget, at least one."""
        if self.budget <= 0:
            return 0
        return max(1, math.floor(self.budget * self.share(source) + 1e-9))

    def proposer_cap(self, source: str) -> int:
        return max(1, math.floor(self.cap(source) * self.proposer_share + 1e-9))

    def is_live(self, source: str) -> bool:
        return source in self.live

    def public(self) -> dict[str, Any]:
        return {
            "person": self.person,
            "budget": self.budget,
            "quiet": format_quiet(self.quiet),
            "timezone": self.timezone,
            "alarms": self.alarms,
            "channel": self.channel,
            "alarm_channel": self.alarm_channel,
            "proposer_share": self.proposer_share,
            "shares": dict(sorted(self.shares.items())),
            "default_share": DEFAULT_SHARE,
            "caps": {s: self.cap(s) for s in sorted(self.shares)},
            "mute": sorted(self.mute),
            "live": sorted(self.live),
            "problems": list(self.problems),
        }


@functools.cache
def local_zone() -> dt.tzinfo:
    """This machine's zone, with its daylight-saving rules where the system names them."""
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        with contextlib.suppress(zoneinfo.ZoneInfoNotFoundError, ValueError):
            return zoneinfo.ZoneInfo(name)
    with contextlib.suppress(OSError, ValueError), open("/etc/localtime", "rb") as tzfile:
        return zoneinfo.ZoneInfo.from_file(tzfile)
    return dt.datetime.now().astimezone().tzinfo or dt.UTC  # a fixed offset: better than UTC


def format_quiet(quiet: tuple[int, int] | None) -> str:
    if quiet is None:
        return ""
    start, end = quiet
    return f"{start // 60:02d}:{start % 60:02d}-{end // 60:02d}:{end % 60:02d}"


def parse_quiet(text: str) -> tuple[int, int] | None:
    """``"22:00-08:00"`` -> minutes (start, end); ``""`` or ``"off"`` -> None."""
    text = text.strip()
    if text in ("", "off", "none"):
        return None
    parts = [p.strip() for p in text.split("-")]
    matches = [_CLOCK.match(p) for p in parts]
    if len(parts) != 2 or not all(matches):
        raise BadRequest(f"quiet hours are HH:MM-HH:MM in local time (such as 22:00-08:00), not {text!r}")
    start, end = (int(m.group(1)) * 60 + int(m.group(2)) for m in matches if m)
    if start == end:
        raise BadRequest("quiet hours must start and end at different times")
    return start, end


def _zone_name(text: str) -> str:
    if text == "local":
        return text
    try:
        zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise BadRequest(f"{text!r} is not a time zone: use an IANA name such as Europe/Berlin, or local") from exc
    return text


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("on", "true", "yes", "1"):
        return True
    if isinstance(value, str) and value.lower() in ("off", "false", "no", "0"):
        return False
    raise BadRequest(f"{name} is on or off")


def _fraction(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"{name} is a fraction between 0 and 1") from exc
    if isinstance(value, bool) or not 0.0 <= number <= 1.0:
        raise BadRequest(f"{name} is a fraction between 0 and 1")
    return number


def _budget(value: Any) -> int:
    text = value.strip() if isinstance(value, str) else value
    # isdecimal, not isdigit: int() refuses digits such as "²" that isdigit accepts.
    if isinstance(text, str) and text.isdecimal():
        text = int(text)
    if not isinstance(text, int) or isinstance(text, bool) or not 0 <= text <= MAX_BUDGET:
        raise BadRequest(f"budget is a whole number of attention items per day, 0 to {MAX_BUDGET}")
    return int(text)


def _choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise BadRequest(f"{name} is one of {', '.join(choices)}")
    return str(value)


def _source(name: str, key: str) -> str:
    if not valid_source(name):
        raise BadRequest(f"{key}: a source name is a-z, 0-9 and -, at most 32 characters")
    return name


@dataclass(frozen=True)
class Change:
    """One validated preference change: ``key`` is a preference, or ``share``/``mute``/``live`` with a source."""

    key: str
    source: str | None
    value: Any  # the value to write; None removes the person's own setting (back to the default)

    def describe(self) -> str:
        name = f"{self.key}.{self.source}" if self.source else self.key
        if self.value is None:
            return f"{name} back to the default"
        if isinstance(self.value, bool):
            return f"{name} {'on' if self.value else 'off'}"
        return f"{name} = {self.value}"


SCALARS = ("budget", "quiet", "timezone", "alarms", "channel", "alarm_channel", "proposer_share")
PER_SOURCE = ("share", "mute", "live")


def parse_change(key: str, value: Any) -> Change:
    """Validate one ``key = value`` from the CLI (strings) or an op (JSON values).

    Raises:
        BadRequest: an unknown key or a value that does not fit it.
    """
    name, _, source = key.partition(".")
    if name in SCALARS and not source:
        if value is None or value == "default":
            return Change(name, None, None)
        parsers = {
            "budget": _budget,
            "quiet": lambda v: format_quiet(parse_quiet(str(v))),
            "timezone": lambda v: _zone_name(str(v)),
            "alarms": lambda v: _bool(v, "alarms"),
            "channel": lambda v: _choice(v, "channel", CHANNELS),
            "alarm_channel": lambda v: _choice(v, "alarm_channel", ALARM_CHANNELS),
            "proposer_share": lambda v: _fraction(v, "proposer_share"),
        }
        return Change(name, None, parsers[name](value))
    if name in PER_SOURCE and source:
        _source(source, key)
        if name == "share":
            return Change(name, source, None if value in (None, "default") else _fraction(value, key))
        return Change(name, source, _bool(value, key))
    known = ", ".join([*SCALARS, *(f"{n}.<source>" for n in PER_SOURCE)])
    raise BadRequest(f"unknown preference {key!r}; the preferences are {known}")


# ---- reading -------------------------------------------------------------------------------


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
        return {}  # the sidecar's own settings loader reports a broken file


def _apply(prefs: Prefs, table: Mapping[str, Any], where: str) -> Prefs:
    """``prefs`` with the preferences set in ``table`` (lenient: bad values become problems)."""
    problems = list(prefs.problems)
    values: dict[str, Any] = {}
    for key in SCALARS:
        if key not in table:
            continue
        try:
            change = parse_change(key, table[key])
        except BadRequest as exc:
            problems.append(f"{where}.{key}: {exc.message}")
            continue
        values[key] = parse_quiet(change.value) if key == "quiet" else change.value
    shares = dict(prefs.shares)
    raw_shares = table.get("shares", {})
    if isinstance(raw_shares, Mapping):
        for source, value in raw_shares.items():
            try:
                shares[_source(str(source), f"shares.{source}")] = _fraction(value, f"shares.{source}")
            except BadRequest as exc:
                problems.append(f"{where}.shares: {exc.message}")
    for name in ("mute", "live"):
        raw = table.get(name)
        if raw is None:
            continue
        if isinstance(raw, list) and all(valid_source(s) for s in raw):
            values[name] = frozenset(raw)
        else:
            problems.append(f"{where}.{name}: a list of source names")
    return replace(prefs, **values, shares=shares, problems=tuple(problems))


@dataclass(frozen=True)
class GateConfig:
    """Everything ``[gate]`` says: machine-wide settings, defaults, and each person's own table."""

    settings: GateSettings = GateSettings()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    people: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @classmethod
    def from_toml(cls, data: Mapping[str, Any]) -> GateConfig:
        gate = data.get("gate")
        if not isinstance(gate, Mapping):
            return cls()
        problems: list[str] = []
        base = GateSettings()
        numbers: dict[str, float] = {}
        for key in ("window", "hold_attention", "hold_alarm", "relay_retry", "idle_after"):
            if key in gate:
                value = gate[key]
                if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                    numbers[key] = float(value)
                else:
                    problems.append(f"gate.{key}: a number of seconds")
        people = gate.get("people")
        return cls(
            settings=replace(base, **numbers),
            defaults=gate,
            people={str(k): v for k, v in people.items() if isinstance(v, Mapping)}
            if isinstance(people, Mapping)
            else {},
            problems=tuple(problems),
        )

    def prefs(self, person: str) -> Prefs:
        prefs = _apply(Prefs(person=person, problems=self.problems), self.defaults, "gate")
        own = self.people.get(person)
        return _apply(prefs, own, f"gate.people.{person}") if own is not None else prefs


class PrefsFile:
    """``config.toml`` as the gate reads it: re-read when it changes, looked at most once a second."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._looked = -math.inf
        self._config = GateConfig()
        self._prefs: dict[str, Prefs] = {}
        self.reload(force=True)

    def reload(self, force: bool = False) -> None:
        try:
            info = self.path.stat()
            stamp: tuple[int, int, int] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
        except OSError:
            stamp = None
        self._looked = time.monotonic()
        if stamp == self._stamp and not force:
            return
        self._stamp = stamp
        self._config = GateConfig.from_toml(_read(self.path))
        self._prefs = {}

    @property
    def settings(self) -> GateSettings:
        return self._config.settings

    def prefs(self, person: str) -> Prefs:
        if time.monotonic() - self._looked >= RELOAD_EVERY:
            self.reload()  # a person may have edited the file by hand
        found = self._prefs.get(person)
        if found is None:
            found = self._prefs[person] = self._config.prefs(person)
        return found


# ---- writing -------------------------------------------------------------------------------


def _table(parent: Any, name: str, super_table: bool = False) -> Any:
    found = parent.get(name)
    if found is None:
        found = tomlkit.table(is_super_table=super_table)
        parent.append(name, found)
    elif not isinstance(found, Table | dict):
        raise BadRequest(f"config.toml has {name} as a value where the gate expects a table; fix it by hand")
    return found


def write_changes(path: Path, person: str, changes: list[Change], current: Prefs) -> None:
    """Write ``changes`` into ``[gate.people.<person>]``, keeping the rest of the file as it was.

    ``current`` is the person's effective preferences: a mute or live change writes the whole
    resulting list, so a person can also undo a default set for everyone.
    """
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise BadRequest(f"{path} is not valid TOML ({exc}); fix it by hand first") from exc
    gate = _table(doc, "gate", super_table=True)
    own = _table(_table(gate, "people", super_table=True), person)
    sets = {"mute": set(current.mute), "live": set(current.live)}
    for change in changes:
        if change.key in ("mute", "live"):
            assert change.source is not None
            (sets[change.key].add if change.value else sets[change.key].discard)(change.source)
            own[change.key] = sorted(sets[change.key])
        elif change.key == "share":
            assert change.source is not None
            shares = _table(own, "shares")
            if change.value is None:
                shares.pop(change.source, None)
            else:
                shares[change.source] = change.value
        elif change.value is None:
            own.pop(change.key, None)
        else:
            own[change.key] = change.value
    write_atomically(path, tomlkit.dumps(doc))
