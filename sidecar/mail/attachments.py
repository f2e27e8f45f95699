"""Files carried inside a message: reading them on the sender's side, saving them on the receiver's.

A message may carry up to :data:`MAX_FILES` UTF-8 text files, :data:`MAX_FILE` bytes each and
:data:`MAX_TOTAL` in all, inside the message itself (``files: [{name, content}]``), so they are
as authenticated as its text and go through the same outbox, acks and receipts.

The sender's sidecar reads them. An agent may attach only files in its own folder (the folder
its harness process runs in, as the kernel says, or the working folder its harness reported in a
hook's payload or from its plugin when that lies inside it: a report alone is a claim any client
on the socket can make; or the repository around it), none of that folder's
hidden files or folders, nothing under the state folder or ``~/.ssh``, ``~/.config`` and the
like, no credential files, and nothing at all when it works in the home folder or above it: an
agent can be talked into sending what its harness would not let it read. Each file is opened
once, without following a link, and what was opened is checked, not the path: a regular file,
one link only (a hard link in the repository to ``~/.aws/credentials`` is the same file), owned
by this user, and where the kernel says it is; the text is read from that descriptor. A person
at a terminal may attach any text file; the person's own command without a terminal (not an
agent's, by the same test as the rest of the sidecar: peer.agent_reason) attaches under the
agent's rules from the folder it runs in.

The receiver checks the same limits, reduces every name to a plain file name, and saves the
files in a new folder named by an id made there (``<state>/inbox/<ulid>/``, 0700; files 0600,
never executable). The agent sees their paths listed after the message's frame, where the
message's text cannot imitate them. Per-person quotas answer ``retry``: the sender keeps the
message in its outbox and tries again later.

Every refusal has its own error code (see :mod:`hive.sidecar.base.errors`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import stat
import time
import tomllib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from hive.integrations import registry

from ..base import procs
from ..base.defang import attr, defang
from ..base.errors import BadRequest, HiveError, NotFound, Refused, TooLarge
from ..base.peer import ancestor_pids, program_names
from ..base.ulid import new_ulid

if TYPE_CHECKING:
    from ..sessions.registry import Session
    from .host import MailHost
    from .render import Message

MAX_FILES = 10
MAX_FILE = 256 * 1024
MAX_TOTAL = 512 * 1024
MAX_NAME_CHARS = 100
MAX_NAME_BYTES = 200

# What one machine keeps of teammates' files, and takes from one person (config: [attachments]).
KEEP_TOTAL = 100 * 1024 * 1024
KEEP_PERSON = 25 * 1024 * 1024
PERSON_HOUR = 20 * 1024 * 1024
HOUR = 3600.0
KEEP_AFTER_READ = 24 * HOUR
KEEP_UNREAD = 7 * 24 * HOUR

# Folders under the home folder that hold keys and settings, never attachable by an agent.
PROTECTED = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config",
    ".kube",
    ".docker",
    ".local/share/keyrings",
    "Library",
    "AppData",
)
CREDENTIAL_NAMES = frozenset(
    {
        "id_rsa",
        "id_dsa",
        "id_ecdsa",
        "id_ed25519",
        "id_ecdsa_sk",
        "id_ed25519_sk",
        "credentials",
        "credentials.json",
        "credentials.db",
        "client_secret.json",
        "service-account.json",
        "secrets.json",
        "secrets.yaml",
        "secrets.yml",
        "htpasswd",
        "shadow",
        "master.key",
        "keystore",
    }
)
CREDENTIAL_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx", ".ppk", ".asc", ".gpg")
PRIVATE_KEY_MARK = "PRIVATE KEY-----"
_DEVICE_NAMES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$"}
    | {f"{p}{d}" for p in ("COM", "LPT") for d in "0123456789¹²³"}
)
# Unicode's control characters (category Cc: C0, DEL and C1) but tab and line ends.
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


# ---- refusals, each with its own stable code --------------------------------------------------


class AttachmentOutside(Refused):
    """Outside the session's repository or working folder, or in a folder of keys or settings."""

    code = "attachment_outside"


class AttachmentHome(Refused):
    """The session works in the home folder or above it (or nowhere known): it attaches nothing."""

    code = "attachment_home"


class AttachmentHidden(Refused):
    """A hidden file, or a file inside a hidden folder."""

    code = "attachment_hidden"


class AttachmentCredential(Refused):
    """A key or credentials file, by its name or a private key inside it."""

    code = "attachment_credential"


class AttachmentHardLink(Refused):
    """A file with more than one name (a hard link): where its other names are cannot be known."""

    code = "attachment_hard_link"


class AttachmentNotOwned(Refused):
    """A file another user owns."""

    code = "attachment_not_owned"


class AttachmentMissing(NotFound):
    """No such file, or not a regular file."""

    code = "attachment_missing"


class AttachmentNotText(BadRequest):
    """Not UTF-8, or holding control characters other than tab and line ends."""

    code = "attachment_not_text"


class AttachmentTooLarge(TooLarge):
    """One file over 256 KB, or all of them over 512 KB."""

    code = "attachment_too_large"


class AttachmentTooMany(TooLarge):
    """More than ten files."""

    code = "attachment_too_many"


@dataclass(frozen=True)
class File:
    name: str
    content: str

    @property
    def size(self) -> int:
        return len(self.content.encode("utf-8"))


# ---- names and text ------------------------------------------------------------------------


def clean_name(raw: object) -> str:
    """A plain file name: no folders or ``..``, no leading dot or dash, nothing invisible,
    no device names, at most 100 characters and 200 bytes, defanged like message text."""
    name = str(raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if unicodedata.category(c)[0] not in ("C", "Z") or c == " ")
    name = defang(" ".join(name.split())).replace("/", "_")
    name = name.lstrip(".- ").rstrip(". ")
    stem = name.split(".", 1)[0].upper()
    if stem in _DEVICE_NAMES:
        name = f"file-{name}"
    name = name[:MAX_NAME_CHARS]
    while len(name.encode("utf-8")) > MAX_NAME_BYTES:
        name = name[:-1]
    return name or "file"


def distinct(names: Sequence[str]) -> list[str]:
    """Names made distinct as a case-folding file system sees them: a repeat gets ``-2``, ``-3``…"""
    taken: set[str] = set()
    out = []
    for name in names:
        stem, dot, ext = name.partition(".")
        candidate, n = name, 2
        while candidate.casefold() in taken:
            candidate = f"{stem[: MAX_NAME_CHARS - 8]}-{n}{dot}{ext}"
            n += 1
        taken.add(candidate.casefold())
        out.append(candidate)
    return out


def check_text(name: str, data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AttachmentNotText(
            f"{name} is not UTF-8 text (byte {exc.start}); only text files can be attached"
        ) from exc
    bad = _CONTROLS.search(text)
    if bad is not None:
        raise AttachmentNotText(
            f"{name} holds the control character U+{ord(bad.group()):04X}; only text files can be attached"
        )
    return text


def check_limits(files: Sequence[File]) -> None:
    if len(files) > MAX_FILES:
        raise AttachmentTooMany(f"a message carries at most {MAX_FILES} files, not {len(files)}")
    total = 0
    for f in files:
        if f.size > MAX_FILE:
            raise AttachmentTooLarge(f"{f.name} is {f.size} bytes; one file is at most {MAX_FILE}")
        total += f.size
    if total > MAX_TOTAL:
        raise AttachmentTooLarge(f"the files total {total} bytes; a message carries at most {MAX_TOTAL}")


# ---- the sender's side -----------------------------------------------------------------------


def repo_root(folder: Path) -> Path | None:
    """The repository around ``folder`` (the nearest ancestor holding ``.git``), if any."""
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _roots(cwd: Path, home: Path) -> list[Path]:
    roots = [r for r in dict.fromkeys([cwd, repo_root(cwd)]) if r is not None]
    roots = [r for r in roots if not _within(home, r)]  # the home folder or above: never a root
    if not roots:
        raise AttachmentHome(
            f"this session works in {cwd}, the home folder or above it: an agent attaches files "
            "only from a project folder"
        )
    return roots


def _check_place(real: Path, shown: str, roots: Sequence[Path], state_home: Path, home: Path) -> Path:
    """The root ``real`` is in, if an agent may send a file there; else the refusal, by code."""
    root = next((r for r in roots if _within(real, r)), None)
    if root is None:
        raise AttachmentOutside(
            f"{shown} is outside this session's folder ({', '.join(map(str, roots))}); an agent "
            "attaches only files of its own repository or working folder"
        )
    protected = [state_home.resolve(), *(home / p for p in PROTECTED)]
    if any(_within(real, p) for p in protected):
        raise AttachmentOutside(f"{shown} is in a folder of keys or settings; it cannot be attached")
    if any(part.startswith(".") for part in real.relative_to(root).parts):
        raise AttachmentHidden(f"{shown} is or is inside a hidden file or folder; those are never attached")
    return root


def confine(path: Path, cwd: Path, state_home: Path, home: Path | None = None) -> Path:
    """Where an agent's attachment really is, if it may send it; else the refusal, by code."""
    home = (home or Path.home()).resolve()
    roots = _roots(cwd, home)
    given = path if path.is_absolute() else cwd / path
    try:
        real = given.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise AttachmentMissing(f"no file {path}") from exc
    _check_place(real, str(path), roots, state_home, home)
    relative = _relative(Path(os.path.normpath(given)), roots)
    if relative is not None and any(part.startswith(".") for part in relative.parts):
        raise AttachmentHidden(f"{path} is or is inside a hidden file or folder; those are never attached")
    return real


def _relative(path: Path, roots: Sequence[Path]) -> Path | None:
    for root in roots:
        with contextlib.suppress(ValueError):
            return path.relative_to(root)
    return None


def _credential(path: Path, text: str) -> bool:
    name = path.name.lower()
    return name in CREDENTIAL_NAMES or name.endswith(CREDENTIAL_SUFFIXES) or PRIVATE_KEY_MARK in text


def _opened_path(fd: int, info: os.stat_result, expected: Path, shown: str) -> Path:
    """Where the file open as ``fd`` is: the kernel's answer where it gives one, else ``expected``
    once it is known to be that very file."""
    with contextlib.suppress(OSError):
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    try:
        now = os.stat(expected, follow_symlinks=False)
    except OSError as exc:
        raise AttachmentMissing(f"{shown} changed while it was read") from exc
    if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
        raise AttachmentMissing(f"{shown} changed while it was read")
    return expected


def _read_open(fd: int, info: os.stat_result, shown: str) -> bytes:
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > MAX_FILE:
            raise AttachmentTooLarge(f"{shown} is {info.st_size} bytes; one file is at most {MAX_FILE}")
        data = handle.read(MAX_FILE + 1)
    if len(data) > MAX_FILE:
        raise AttachmentTooLarge(f"{shown} is over {MAX_FILE} bytes; one file is at most {MAX_FILE}")
    return data


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def _open_file(path: Path, shown: str) -> tuple[int, os.stat_result]:
    """``path`` opened once, without following a link, and known to be a regular file."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError as exc:
        raise AttachmentMissing(f"no file {shown}") from exc
    except OSError as exc:
        raise AttachmentMissing(f"cannot open {shown}: {exc.strerror}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise AttachmentMissing(f"{shown} is not a regular file")
    return fd, info


def _read_confined(path: Path, shown: str, cwd: Path, state_home: Path, home: Path | None) -> tuple[Path, str]:
    """An agent's file: the path checked, then the file opened checked by what it is and where."""
    real = confine(path, cwd, state_home, home)
    fd, info = _open_file(real, shown)
    try:
        if info.st_nlink != 1:
            raise AttachmentHardLink(
                f"{shown} has {info.st_nlink} names (a hard link); an agent attaches only files "
                "with one name, whose other names cannot be somewhere else"
            )
        if info.st_uid != os.getuid():
            raise AttachmentNotOwned(f"{shown} belongs to another user; an agent attaches only its user's files")
        home_real = (home or Path.home()).resolve()
        opened = _opened_path(fd, info, real, shown)
        _check_place(opened, shown, _roots(cwd, home_real), state_home, home_real)
    except BaseException:
        os.close(fd)
        raise
    text = check_text(shown, _read_open(fd, info, shown))
    if _credential(opened, text):
        raise AttachmentCredential(f"{shown} looks like a key or credentials file; it cannot be attached")
    return opened, text


def read_files(paths: Any, cwd: str, *, confined: bool, state_home: Path, home: Path | None = None) -> list[File]:
    """Read the files a sender names (relative paths from ``cwd``); blocking, run it off the loop.

    ``confined`` is for agents: only their own folder (``cwd``, as their harness reported it), no
    hidden paths or credentials, no hard links, only their user's files.
    """
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise BadRequest("files is a list of file paths")
    if len(paths) > MAX_FILES:
        raise AttachmentTooMany(f"a message carries at most {MAX_FILES} files, not {len(paths)}")
    base = Path(cwd) if cwd else None
    files: list[File] = []
    for shown in paths:
        if confined:
            if base is None or not base.is_absolute():
                raise AttachmentHome(
                    "hive knows no running harness process for this session (its hooks or plugin "
                    "register it), so it has no folder to attach files from"
                )
            real, text = _read_confined(Path(shown), shown, base.resolve(), state_home, home)
        else:
            path = Path(shown).expanduser()
            if not path.is_absolute():
                if base is None:
                    raise BadRequest(f"{shown} is a relative path; give an absolute one")
                path = base / path
            real = path.resolve()  # a person's link is followed: it is their own choice of file
            fd, info = _open_file(real, shown)
            text = check_text(shown, _read_open(fd, info, shown))
        files.append(File(name=real.name, content=text))
    names = distinct([clean_name(f.name) for f in files])
    files = [File(name=n, content=f.content) for n, f in zip(names, files, strict=True)]
    check_limits(files)
    return files


def note_plugin_folder(session: Session, info: dict[str, Any], pid: int | None, binaries: frozenset[str]) -> None:
    """A plugin registers from inside its harness process: its folder is the harness's report.

    Only when the connecting process is the session's own harness process (the kernel's pid of
    the client, not one it states) and runs as a harness: any other client's ``cwd`` is a claim."""
    cwd = info.get("cwd")
    if isinstance(cwd, str) and cwd and pid is not None and info.get("pid") == pid and program_names(pid) & binaries:
        session.harness_cwd = cwd


async def caller_session(sidecar: MailHost, pid: int | None) -> Session | None:
    """The live session whose harness process is the caller or its nearest ancestor (an agent's shell)."""
    if pid is None:
        return None
    chain = [pid, *await anyio.to_thread.run_sync(ancestor_pids, pid)]
    now = time.time()
    live = {
        s.pid: s
        for s in sidecar.sessions.by_key.values()
        if s.pid and sidecar.sessions.is_live(s, now) and s.harness_cwd
    }
    return next((live[p] for p in chain if p in live), None)


def agent_folder(session: Session, binaries: frozenset[str]) -> str:
    """The folder an agent's files are confined to: where its harness process runs, as the kernel
    says, or the working folder its harness reported when that lies inside it (or inside the
    repository around it); "" when the session's harness process is not running.

    A hook's or plugin's report alone names no folder: any client on the socket can send a hook
    request with a payload of its choice, but not move the harness process."""
    if not (session.pid and procs.alive(session.pid, session.pid_started) and program_names(session.pid) & binaries):
        return ""
    running = procs.folder(session.pid)
    if not running:
        return ""
    where = Path(running).resolve()
    reported = Path(session.harness_cwd).resolve() if session.harness_cwd else None
    if reported is not None and any(_within(reported, r) for r in (where, repo_root(where)) if r is not None):
        return str(reported)
    return str(where)


async def for_send(
    sidecar: MailHost,
    request: dict[str, Any],
    session: Session | None,
    *,
    by_agent: bool,
    at_terminal: bool,
    caller_pid: int | None = None,
) -> tuple[File, ...]:
    """The files a ``send`` request names (``files``: paths), read under the sender's rules.

    An agent's paths (a session's, or those of a client an agent harness started, see
    peer.agent_reason) are relative to the folder its harness reported and confined to it: a
    client with no session gets the folder of the session whose harness it runs under, or none.
    The person's own command is not an agent's: at a terminal it may attach any text file (a
    ``cwd`` in the request places its relative paths); without one (a script, a cron job) it is
    confined the same way to the folder it runs in, as the kernel says, never a folder it names.
    """
    paths = request.get("files")
    if paths is None or paths == []:
        return ()
    confined = session is not None or by_agent or not at_terminal
    if session is not None or by_agent:
        if session is None:
            session = await caller_session(sidecar, caller_pid)
        cwd = await anyio.to_thread.run_sync(agent_folder, session, registry.binaries()) if session else ""
    elif confined:
        cwd = await anyio.to_thread.run_sync(procs.folder, caller_pid)
        if not cwd:
            raise AttachmentHome("the folder this command runs in cannot be read, so it cannot attach files")
    else:
        given = request.get("cwd")
        cwd = given if isinstance(given, str) else ""
    read = functools.partial(read_files, paths, cwd, confined=confined, state_home=sidecar.paths.home)
    return tuple(await anyio.to_thread.run_sync(read))


def inline(message: Message, limit: int) -> Message | None:
    """The message with its files written into its text as fenced blocks, for a machine whose hive
    takes no files; None when that would pass ``limit`` bytes."""
    blocks = []
    for f in message.carried:
        fence = "```"
        while fence in f.content:
            fence += "`"
        blocks.append(f"\n\n{f.name}:\n{fence}\n{f.content.rstrip(chr(10))}\n{fence}")
    body = message.body + "".join(blocks)
    if len(body.encode("utf-8")) > limit:
        return None
    return dataclasses.replace(message, body=body, carried=())


def to_wire(files: Sequence[File]) -> list[dict[str, str]]:
    return [{"name": f.name, "content": f.content} for f in files]


# ---- the receiver's side ---------------------------------------------------------------------


def from_wire(raw: Any) -> tuple[File, ...]:
    """The files a peer's message carries, held to the same limits, with plain names. Raises HiveError."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(f, dict) for f in raw):
        raise BadRequest("files is a list of {name, content}")
    if len(raw) > MAX_FILES:
        raise AttachmentTooMany(f"a message carries at most {MAX_FILES} files, not {len(raw)}")
    files = []
    for item in raw:
        content = item.get("content")
        if not isinstance(content, str):
            raise BadRequest("each file has a text content")
        check_text(clean_name(item.get("name")), content.encode("utf-8", errors="surrogatepass"))
        files.append(File(name=clean_name(item.get("name")), content=content))
    names = distinct([f.name for f in files])
    files = [File(name=n, content=f.content) for n, f in zip(names, files, strict=True)]
    check_limits(files)
    return tuple(files)


@dataclass(frozen=True)
class Quota:
    keep_total: int = KEEP_TOTAL
    keep_person: int = KEEP_PERSON
    person_hour: int = PERSON_HOUR


def load_quota(config: Path) -> Quota:
    data: dict[str, Any] = {}
    with contextlib.suppress(OSError, tomllib.TOMLDecodeError):
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    section = data.get("attachments") if isinstance(data.get("attachments"), dict) else {}
    assert isinstance(section, dict)
    base = Quota()

    def number(key: str, default: int) -> int:
        value = section.get(key, default)
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default

    return Quota(
        keep_total=number("keep_total", base.keep_total),
        keep_person=number("keep_person", base.keep_person),
        person_hour=number("person_hour", base.person_hour),
    )


def inbox_root(state_home: Path) -> Path:
    return state_home / "inbox"


def save(state_home: Path, files: Sequence[File]) -> list[Path]:
    """Write files in a new 0700 folder named here; files 0600, created, never replaced. Blocking."""
    root = inbox_root(state_home)
    root.mkdir(mode=0o700, exist_ok=True)
    os.chmod(root, 0o700)
    folder = root / new_ulid()
    folder.mkdir(mode=0o700)
    saved = []
    for f in files:
        path = folder / f.name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(f.content.encode("utf-8"))
        saved.append(path)
    return saved


async def quota_wait(sidecar: MailHost, person: str, files: Sequence[File]) -> float:
    """0 when ``person``'s files may be saved now, else seconds to wait (the sender retries)."""
    if not files:
        return 0.0
    await purge(sidecar)
    quota = load_quota(sidecar.paths.config)
    size = sum(f.size for f in files)
    now = time.time()
    store = sidecar.store
    # A sum without GROUP BY always has its one row; fetchall()[0] says so where fetchone() would be Optional.
    total = (await store.fetchall("SELECT COALESCE(SUM(bytes), 0) FROM attachments"))[0][0]
    mine = (await store.fetchall("SELECT COALESCE(SUM(bytes), 0) FROM attachments WHERE person = ?", (person,)))[0][0]
    rows = await store.fetchall(
        "SELECT at, bytes FROM attachments WHERE person = ? AND at > ? ORDER BY at", (person, now - HOUR)
    )
    if total + size > quota.keep_total or mine + size > quota.keep_person:
        return HOUR / 4  # space comes back as teammates' messages are read and their files go
    hour = sum(r[1] for r in rows)
    if hour + size > quota.person_hour:
        freed = 0
        for at, count in rows:  # wait until enough of the last hour's bytes age out
            freed += count
            if hour - freed + size <= quota.person_hour:
                return max(at + HOUR - now, 1.0)
        return HOUR
    return 0.0


async def keep(sidecar: MailHost, message: Message) -> Message:
    """Save the files a message carries and return it with their paths (``files``), ready to deposit."""
    if not message.carried:
        return message
    paths = await anyio.to_thread.run_sync(save, sidecar.paths.home, message.carried)
    size = sum(f.size for f in message.carried)
    person = message.sender.split("/", 1)[0]
    await sidecar.store.write(
        [
            (
                "INSERT OR REPLACE INTO attachments (id, person, folder, bytes, at) VALUES (?, ?, ?, ?, ?)",
                (message.id, person, str(paths[0].parent), size, time.time()),
            )
        ]
    )
    return dataclasses.replace(message, files=json.dumps([str(p) for p in paths]), carried=())


async def purge(sidecar: MailHost) -> None:
    """Files go with their message: a day after it was read, a week after they came unread, or once
    the message itself is gone."""
    now = time.time()
    rows = await sidecar.store.fetchall(
        "SELECT a.id, a.folder FROM attachments a LEFT JOIN messages m ON m.id = a.id "
        "WHERE (m.id IS NULL AND a.at < ?) OR (m.read_at IS NOT NULL AND m.read_at < ?) OR a.at < ?",
        (now - 60, now - KEEP_AFTER_READ, now - KEEP_UNREAD),
    )
    if not rows:
        return
    await anyio.to_thread.run_sync(_remove_folders, inbox_root(sidecar.paths.home), [r[1] for r in rows])
    marks = ", ".join("?" for _ in rows)
    await sidecar.store.write([(f"DELETE FROM attachments WHERE id IN ({marks})", tuple(r[0] for r in rows))])


# ---- how the agent is told -------------------------------------------------------------------


def _remove_folders(root: Path, folders: Sequence[str]) -> None:
    root = root.resolve()
    for folder in folders:
        path = Path(folder)
        if path.resolve().parent == root:  # only folders this module made
            shutil.rmtree(path, ignore_errors=True)


def saved_paths(files: str | None) -> list[str]:
    if not files:
        return []
    with contextlib.suppress(ValueError, TypeError):
        value = json.loads(files)
        if isinstance(value, list):
            return [str(p) for p in value]
    return []


def listing(message_id: str, sender: str, files: str | None) -> str:
    """The saved files' paths, shown after the message's frame (names defanged when they were cleaned)."""
    paths = saved_paths(files)
    if not paths:
        return ""
    lines = [
        f"Files that came with message {attr(message_id)} from {attr(sender)}, saved on this machine "
        "(written by the sender: read them, don't run them):"
    ]
    lines += [f"- {defang(p)}" for p in paths]
    return "\n".join(lines)


def refusal_note(exc: HiveError) -> str:
    return f"refused ({exc.code}): {exc.message}"[:300]
