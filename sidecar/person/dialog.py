"""Desktop dialogs: ask this machine's person Approve or Deny, or show them a notification.

One interface (:meth:`Backend.show` yields a :class:`Popup` whose :meth:`Popup.answer` is the
person's :class:`Answer`), three backends, picked by platform:

- Linux and other freedesktop desktops: a notification with ``approve`` / ``deny`` actions over
  the session D-Bus (jeepney). Only signals whose bus-stamped sender is the notification
  server's unique name count, so another program on the bus cannot forge a click.
- macOS: ``/usr/bin/osascript`` running a fixed JavaScript-for-Automation dialog.
- Windows: ``powershell.exe`` from the system directory running a fixed script.

Rules all three keep:

- Preflight within :data:`PREFLIGHT_TIMEOUT`: when nothing can show the dialog the caller gets
  :class:`NoDesktop` at once, never a hang (``notify-send --wait`` hangs forever without a bus).
- Only system programs at fixed absolute paths are run, never one named by configuration or
  the environment, so an agent cannot swap in a stand-in that answers "approve".
- Shown text travels in environment variables read by constant scripts: it is never spliced
  into script source or parsed as options.
- Shown text loses direction overrides, zero-width, tag and other format characters, so what
  the person reads is what gets signed.
- Every wait has an outer timeout.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import html
import os
import stat
import subprocess
import sys
import unicodedata
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import Process

from ..base.defang import strip_invisible
from ..base.errors import NoDesktop

if TYPE_CHECKING:
    from jeepney import Message
    from jeepney.io.asyncio import DBusConnection

PREFLIGHT_TIMEOUT = 2.0
# Past the pop-up's own timeout, how long before the wait gives up on the dialog program or
# notification server: some servers (GNOME Shell) ignore expiry times altogether.
OUTER_GRACE = 5.0
CLOSE_TIMEOUT = 1.0

# The environment variables that lead to a desktop. A client's never count (see find_desktop).
DESKTOP_VARIABLES = ("DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY")
MAX_VARIABLE = 1024
SYSTEM_RUNTIME = "/run/user/{uid}"  # systemd-logind's runtime directory of a user, whatever the environment says

APP_NAME = "hive"
APPROVE = "approve"
DENY = "deny"


class Answer(StrEnum):
    APPROVED = "approved"
    DENIED = "denied"
    DISMISSED = "dismissed"  # the person closed it without choosing
    EXPIRED = "expired"  # it timed out unanswered
    CLOSED = "closed"  # something else took it away: another program, the server or session ending


@dataclass(frozen=True)
class Prompt:
    """What to show. ``question`` adds Approve / Deny; without it this is a plain notification."""

    title: str
    body: str
    timeout: float = 3600.0  # seconds the pop-up stays up
    question: bool = True


class Popup(Protocol):
    async def answer(self) -> Answer:
        """Wait for the person (bounded by the prompt's timeout plus a grace)."""
        ...


class Backend(Protocol):
    name: str

    async def available(self, question: bool = True) -> None:
        """Raise NoDesktop (within PREFLIGHT_TIMEOUT) unless a prompt could be shown now."""
        ...

    def show(self, prompt: Prompt) -> contextlib.AbstractAsyncContextManager[Popup]:
        """Put the prompt on screen; entering raises NoDesktop within PREFLIGHT_TIMEOUT.

        Leaving takes an unanswered question off the screen: its buttons would do nothing.
        """
        ...


# ---- text ------------------------------------------------------------------------------


def clean(text: str) -> str:
    """Text as a person may be shown it: no invisible or reordering characters, no controls."""
    out = []
    for char in strip_invisible(text):
        category = unicodedata.category(char)
        if char in "\n\t":
            out.append(char)
        elif category in ("Zl", "Zp"):
            out.append("\n")
        elif category == "Cf":
            continue  # format characters (bidi marks such as U+061C, soft hyphens): invisible or reordering
        elif category in ("Cc", "Cs", "Co", "Cn"):
            out.append(" ")
        else:
            out.append(char)
    return "".join(out).strip()


CUT_MARK = " […]"


def clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, marked where it was cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - len(CUT_MARK), 0)].rstrip() + CUT_MARK


# ---- where the desktop is --------------------------------------------------------------


@dataclass(frozen=True)
class Desktop:
    """The desktop a dialog should appear on: session buses to try in order, and the displays."""

    buses: tuple[str, ...] = ()
    display: str = ""
    wayland: str = ""


def user_bus(environ: Mapping[str, str], uid: int) -> str | None:
    """The user's own session bus socket (systemd's ``$XDG_RUNTIME_DIR/bus``), if it exists."""
    runtime = environ.get("XDG_RUNTIME_DIR") or SYSTEM_RUNTIME.format(uid=uid)
    path = Path(runtime) / "bus"
    try:
        info = path.stat()
    except OSError:
        return None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != uid:
        return None
    return f"unix:path={path}"


# The sidecar's environment at start, kept only when its person started it (note_start).
_started_by_person: dict[str, Mapping[str, str]] = {}


def note_start(by_person: bool, environ: Mapping[str, str] | None = None) -> None:
    """Record at start whether this process's environment may lead to its person's desktop.

    A sidecar started from the person's desktop session (a terminal there) inherits that
    session's bus and display; one an agent started (a hook, an MCP server, an agent's shell,
    maybe after ``hive stop``) has whatever environment the agent chose, such as a private bus
    where a stand-in notification server clicks Approve, so only the system's answer counts.
    """
    _started_by_person.clear()
    if by_person:
        _started_by_person["environ"] = dict(os.environ if environ is None else environ)


def find_desktop(*, own: Mapping[str, str] | None = None, uid: int | None = None) -> Desktop:
    """The person's own desktop: where every pop-up and notification of this sidecar goes.

    Never a client's word: a client (any agent) can name any bus, including a private one where
    a stand-in "notification server" clicks Approve. The buses, in order: the runtime directory's
    and the session bus of the sidecar's start environment when its person started it
    (:func:`note_start`; ``own`` stands for that environment), then the user's systemd runtime
    directory (``/run/user/<uid>/bus``), which the system, not an environment, names.
    """
    uid = os.getuid() if uid is None else uid
    trusted = _started_by_person.get("environ", {}) if own is None else own

    def value(name: str) -> str:
        item = trusted.get(name)
        return item if isinstance(item, str) and 0 < len(item) <= MAX_VARIABLE and "\0" not in item else ""

    candidates = [user_bus(trusted, uid) if trusted else None, value("DBUS_SESSION_BUS_ADDRESS"), user_bus({}, uid)]
    buses = tuple(dict.fromkeys(b for b in candidates if b))
    return Desktop(buses=buses, display=value("DISPLAY"), wayland=value("WAYLAND_DISPLAY"))


def backend_for(desktop: Desktop, platform: str = sys.platform) -> Backend:
    if platform == "darwin":
        return MacDialog()
    if platform == "win32":
        return WindowsDialog(windows_system_dir())
    return FreedesktopDialog(desktop)


# ---- Linux: freedesktop notifications over D-Bus ---------------------------------------

NOTIFICATIONS = "org.freedesktop.Notifications"
NOTIFICATIONS_PATH = "/org/freedesktop/Notifications"
BUS_NAME = "org.freedesktop.DBus"
CLOSE_REASONS = {1: Answer.EXPIRED, 2: Answer.DISMISSED}


class _NotHere(Exception):
    """This bus cannot show the dialog; the message says why."""


def _bus_label(address: str) -> str:
    # The guid after the first comma is noise in a message to a person.
    return address.split(",", 1)[0]


class _Bus:
    """One D-Bus connection read by one task: replies matched by serial, signals kept in order.

    jeepney's router reads in a task of its own that ends silently when the bus goes away, so
    a wait on its queue could never learn of it; reading here turns that into EOFError.
    """

    def __init__(self, conn: DBusConnection) -> None:
        self.conn = conn
        self.signals: deque[Message] = deque(maxlen=256)

    async def call(self, message: Message) -> tuple[Any, ...]:
        from jeepney import HeaderFields, MessageType
        from jeepney.wrappers import unwrap_msg

        destination = message.header.fields.get(HeaderFields.destination)
        serial = next(self.conn.outgoing_serial)
        await self.conn.send(message, serial=serial)
        while True:
            reply = await self.conn.receive()
            fields = reply.header.fields
            if reply.header.message_type is MessageType.signal:
                self.signals.append(reply)
            elif fields.get(HeaderFields.reply_serial) == serial and fields.get(HeaderFields.sender) == destination:
                return tuple(unwrap_msg(reply))

    async def signal(self) -> Message:
        from jeepney import MessageType

        if self.signals:
            return self.signals.popleft()
        while True:
            message = await self.conn.receive()
            if message.header.message_type is MessageType.signal:
                return message


@dataclass
class _FreedesktopPopup:
    bus: _Bus
    owner: str  # the notification server's unique name: the only sender whose signals count
    id: int
    timeout: float
    answered: Answer | None = field(default=None)

    async def answer(self) -> Answer:
        with anyio.move_on_after(self.timeout + OUTER_GRACE):
            while self.answered is None:
                try:
                    message = await self.bus.signal()
                except (EOFError, OSError):
                    self.answered = Answer.CLOSED  # the session bus went away
                    break
                self.answered = self._outcome(message)
        return self.answered or Answer.EXPIRED

    def _outcome(self, message: Message) -> Answer | None:
        from jeepney import HeaderFields

        fields = message.header.fields
        sender = fields.get(HeaderFields.sender)
        member = fields.get(HeaderFields.member)
        body = message.body
        if sender == BUS_NAME and member == "NameOwnerChanged":
            name, _old, new = body
            return Answer.CLOSED if name == NOTIFICATIONS and new != self.owner else None
        # The bus stamps the sender; anyone may emit a signal that *claims* this interface.
        if (
            sender != self.owner
            or fields.get(HeaderFields.interface) != NOTIFICATIONS
            or fields.get(HeaderFields.path) != NOTIFICATIONS_PATH
            or not body
            or body[0] != self.id
        ):
            return None
        # The server's own signals may still be malformed: an answer of the wrong type is no answer.
        if member == "ActionInvoked" and len(body) == 2 and isinstance(body[1], str):
            return {APPROVE: Answer.APPROVED, DENY: Answer.DENIED}.get(body[1])
        if member == "NotificationClosed" and len(body) == 2 and isinstance(body[1], int):
            return CLOSE_REASONS.get(body[1], Answer.CLOSED)
        return None


class FreedesktopDialog:
    """Notifications with actions, per the Desktop Notifications spec 1.2."""

    name = "freedesktop"

    def __init__(self, desktop: Desktop) -> None:
        self.desktop = desktop

    async def _open(self, require_actions: bool) -> tuple[_Bus, str, frozenset[str]]:
        """Connect to the first bus with a notification server that can show the dialog."""
        try:
            from jeepney.io.asyncio import open_dbus_connection
        except ImportError as exc:
            raise NoDesktop("jeepney, the D-Bus client hive uses for pop-ups, is not installed") from exc
        problems: list[str] = []
        deadline = anyio.current_time() + PREFLIGHT_TIMEOUT
        for index, address in enumerate(self.desktop.buses):
            share = (deadline - anyio.current_time()) / (len(self.desktop.buses) - index)
            conn: DBusConnection | None = None
            try:
                with anyio.fail_after(max(share, 0.0)):
                    conn = await open_dbus_connection(address)
                    bus = _Bus(conn)
                    owner, capabilities = await self._server(bus, require_actions)
                return bus, owner, capabilities
            except TimeoutError:
                problems.append(f"{_bus_label(address)}: no answer within {max(share, 0):.1f} s")
            except _NotHere as exc:
                problems.append(f"{_bus_label(address)}: {exc}")
            except Exception as exc:  # connection refused, bad address, auth failure, D-Bus error reply
                problems.append(f"{_bus_label(address)}: {type(exc).__name__}: {exc}")
            if conn is not None:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await conn.close()
        if not self.desktop.buses:
            shown = self.desktop.display or self.desktop.wayland
            problems.append(
                "no session bus address" + (f" (the display is {shown}, but no bus was given)" if shown else "")
            )
        raise NoDesktop("no desktop notification server with Approve/Deny buttons is reachable: " + "; ".join(problems))

    async def available(self, question: bool = True) -> None:
        bus, _, _ = await self._open(require_actions=question)
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await bus.conn.close()

    async def _server(self, bus: _Bus, require_actions: bool) -> tuple[str, frozenset[str]]:
        from jeepney import DBusAddress, MatchRule, new_method_call
        from jeepney.bus_messages import message_bus

        # NameHasOwner does not start a D-Bus-activatable server; activating one with no display
        # is exactly what hangs notify-send.
        (owned,) = await bus.call(message_bus.NameHasOwner(NOTIFICATIONS))
        if not owned:
            raise _NotHere("no notification server is running")
        (owner,) = await bus.call(message_bus.GetNameOwner(NOTIFICATIONS))
        server = DBusAddress(NOTIFICATIONS_PATH, bus_name=owner, interface=NOTIFICATIONS)
        (capabilities,) = await bus.call(new_method_call(server, "GetCapabilities"))
        if require_actions and "actions" not in capabilities:
            raise _NotHere("the notification server cannot show buttons")
        # Subscribe before Notify, or a fast click could come before the subscription.
        for member in ("ActionInvoked", "NotificationClosed"):
            rule = MatchRule(
                type="signal", sender=owner, interface=NOTIFICATIONS, member=member, path=NOTIFICATIONS_PATH
            )
            await bus.call(message_bus.AddMatch(rule))
        gone = MatchRule(type="signal", sender=BUS_NAME, interface=BUS_NAME, member="NameOwnerChanged")
        gone.add_arg_condition(0, NOTIFICATIONS)
        await bus.call(message_bus.AddMatch(gone))
        return owner, frozenset(capabilities)

    @contextlib.asynccontextmanager
    async def show(self, prompt: Prompt) -> AsyncIterator[Popup]:
        from jeepney import DBusAddress, new_method_call

        bus, owner, capabilities = await self._open(require_actions=prompt.question)
        server = DBusAddress(NOTIFICATIONS_PATH, bus_name=owner, interface=NOTIFICATIONS)
        popup: _FreedesktopPopup | None = None
        try:
            body = clean(prompt.body)
            if capabilities & {"body-markup", "body-hyperlinks"}:
                body = html.escape(body, quote=False)  # such servers read the body as markup
            actions = [APPROVE, "Approve", DENY, "Deny"] if prompt.question else []
            hints = {"urgency": ("y", 2 if prompt.question else 1)}
            timeout_ms = min(int(prompt.timeout * 1000), 2**31 - 1)
            with anyio.fail_after(PREFLIGHT_TIMEOUT):
                (notification_id,) = await bus.call(
                    new_method_call(
                        server,
                        "Notify",
                        "susssasa{sv}i",
                        (
                            APP_NAME,
                            0,
                            "dialog-question" if prompt.question else "dialog-information",
                            clean(prompt.title),
                            body,
                            actions,
                            hints,
                            timeout_ms,
                        ),
                    )
                )
            popup = _FreedesktopPopup(bus, owner, notification_id, prompt.timeout)
            yield popup
        except TimeoutError as exc:
            raise NoDesktop(f"the notification server did not show the pop-up within {PREFLIGHT_TIMEOUT:g} s") from exc
        finally:
            with anyio.CancelScope(shield=True):
                if popup is not None and prompt.question and popup.answered in (None, Answer.APPROVED, Answer.DENIED):
                    # Unanswered: take it down. Answered: some servers keep it up after a click.
                    with anyio.move_on_after(CLOSE_TIMEOUT), contextlib.suppress(Exception):
                        await bus.call(new_method_call(server, "CloseNotification", "u", (popup.id,)))
                with contextlib.suppress(Exception):
                    await bus.conn.close()


# ---- macOS and Windows: a system dialog program ----------------------------------------

OSASCRIPT = "/usr/bin/osascript"
LAUNCHCTL = "/bin/launchctl"
ENV_TITLE = "HIVE_DIALOG_TITLE"
ENV_BODY = "HIVE_DIALOG_BODY"
ENV_SECONDS = "HIVE_DIALOG_SECONDS"
ENV_KIND = "HIVE_DIALOG_KIND"

# JavaScript for Automation. The text comes from the environment through Foundation, which keeps
# it Unicode (AppleScript's `system attribute` does not) and out of the script's source.
JXA_DIALOG = """\
ObjC.import('Foundation');
function run() {
  const env = $.NSProcessInfo.processInfo.environment;
  const read = (name) => { const v = env.objectForKey(name); return v.isNil() ? '' : ObjC.unwrap(v); };
  const app = Application.currentApplication();
  app.includeStandardAdditions = true;
  if (read('HIVE_DIALOG_KIND') === 'notification') {
    app.displayNotification(read('HIVE_DIALOG_BODY'), {withTitle: read('HIVE_DIALOG_TITLE')});
    return 'expired';
  }
  try {
    const reply = app.displayDialog(read('HIVE_DIALOG_BODY'), {
      withTitle: read('HIVE_DIALOG_TITLE'), buttons: ['Deny', 'Approve'], defaultButton: 'Deny',
      givingUpAfter: parseInt(read('HIVE_DIALOG_SECONDS'), 10), withIcon: 'caution'});
    if (reply.gaveUp) { return 'expired'; }
    return reply.buttonReturned === 'Approve' ? 'approve' : 'deny';
  } catch (error) {
    if (error.errorNumber === -128) { return 'dismissed'; }
    throw error;
  }
}
"""

# WScript.Shell's Popup has a timeout (MessageBox has none). Yes approves, No denies; 4096 keeps
# it above other windows. -1 is its "timed out" answer.
POWERSHELL_DIALOG = """\
$ErrorActionPreference = 'Stop'
if ($env:HIVE_DIALOG_KIND -eq 'notification') {
    Add-Type -AssemblyName System.Windows.Forms
    Add-Type -AssemblyName System.Drawing
    $icon = New-Object System.Windows.Forms.NotifyIcon
    $icon.Icon = [System.Drawing.SystemIcons]::Information
    $icon.Visible = $true
    $icon.ShowBalloonTip([int]$env:HIVE_DIALOG_SECONDS * 1000, $env:HIVE_DIALOG_TITLE, $env:HIVE_DIALOG_BODY, 'Info')
    Start-Sleep -Seconds ([int]$env:HIVE_DIALOG_SECONDS)
    $icon.Dispose()
    'expired'
    exit 0
}
$shell = New-Object -ComObject WScript.Shell
$choice = $shell.Popup($env:HIVE_DIALOG_BODY, [int]$env:HIVE_DIALOG_SECONDS, $env:HIVE_DIALOG_TITLE, 4 + 32 + 4096)
switch ($choice) { 6 { 'approve' } 7 { 'deny' } -1 { 'expired' } default { 'dismissed' } }
"""

WINDOWS_BUTTONS = "Yes approves, No denies."


def _dialog_env(prompt: Prompt, body: str) -> dict[str, str]:
    return {
        ENV_TITLE: clean(prompt.title),
        ENV_BODY: body,
        ENV_SECONDS: str(max(1, int(prompt.timeout))),
        ENV_KIND: "question" if prompt.question else "notification",
    }


def osascript_command(prompt: Prompt) -> tuple[list[str], dict[str, str]]:
    """The exact argv (constant) and the environment entries (the text) for the macOS dialog."""
    return [OSASCRIPT, "-l", "JavaScript", "-e", JXA_DIALOG], _dialog_env(prompt, clean(prompt.body))


def windows_system_dir() -> str:
    """The Windows system directory as the OS reports it (not ``%SystemRoot%``, which anyone can set)."""
    if sys.platform != "win32":
        return "C:\\Windows\\System32"
    import ctypes

    buffer = ctypes.create_unicode_buffer(260)
    length = ctypes.windll.kernel32.GetSystemDirectoryW(buffer, len(buffer))  # type: ignore[attr-defined]
    return buffer.value if 0 < length < len(buffer) else "C:\\Windows\\System32"


def powershell_path(system_dir: str) -> str:
    return system_dir.rstrip("\\") + "\\WindowsPowerShell\\v1.0\\powershell.exe"


def powershell_command(prompt: Prompt, system_dir: str) -> tuple[list[str], dict[str, str]]:
    """The exact argv (constant for a given system) and environment entries for the Windows dialog."""
    encoded = base64.b64encode(POWERSHELL_DIALOG.encode("utf-16-le")).decode("ascii")
    argv = [
        powershell_path(system_dir),
        "-NoLogo",
        "-NoProfile",
        "-NonInteractive",
        "-ExecutionPolicy",
        "Bypass",
        "-EncodedCommand",
        encoded,
    ]
    body = clean(prompt.body)
    if prompt.question:
        body = f"{body}\n\n{WINDOWS_BUTTONS}"
    return argv, _dialog_env(prompt, body)


def child_env(entries: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The dialog program's environment: the sidecar's own, minus any inherited dialog text."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("HIVE_DIALOG_")}
    env.update(entries)
    return env


_OUTCOMES = {
    "approve": Answer.APPROVED,
    "deny": Answer.DENIED,
    "expired": Answer.EXPIRED,
    "dismissed": Answer.DISMISSED,
}


def parse_outcome(stdout: bytes) -> Answer:
    lines = stdout.decode("utf-8", "replace").strip().splitlines()
    return _OUTCOMES.get(lines[-1].strip() if lines else "", Answer.CLOSED)


@dataclass
class _ProcessPopup:
    process: Process
    timeout: float
    answered: Answer | None = None

    async def answer(self) -> Answer:
        output = b""
        assert self.process.stdout is not None
        with anyio.move_on_after(self.timeout + OUTER_GRACE):
            async for chunk in self.process.stdout:
                output += chunk[: 4096 - len(output)]
            await self.process.wait()
            self.answered = parse_outcome(output)
        return self.answered or Answer.EXPIRED


class _ProgramDialog(abc.ABC):
    """Runs a fixed system program; subclasses say which, and how to tell a desktop is there."""

    name = "program"

    @abc.abstractmethod
    def command(self, prompt: Prompt) -> tuple[list[str], dict[str, str]]:
        """The program's argv and the environment that carries the text (never the argv)."""

    @abc.abstractmethod
    async def preflight(self) -> None:
        """Raise NoDesktop unless this program can show a dialog here."""

    async def available(self, question: bool = True) -> None:
        program = self.command(Prompt("", "", question=question))[0][0]
        with anyio.fail_after(PREFLIGHT_TIMEOUT):
            await self.preflight()
            if not await anyio.Path(program).is_file():
                raise NoDesktop(f"{program} is missing, so hive cannot show a dialog")

    @contextlib.asynccontextmanager
    async def show(self, prompt: Prompt) -> AsyncIterator[Popup]:
        argv, entries = self.command(prompt)
        with anyio.fail_after(PREFLIGHT_TIMEOUT):
            await self.preflight()
        try:
            process = await anyio.open_process(
                argv, env=child_env(entries), stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        except OSError as exc:  # missing on this system, or not runnable
            raise NoDesktop(f"{argv[0]} could not start: {exc}") from exc
        popup = _ProcessPopup(process, prompt.timeout)
        try:
            yield popup
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    with anyio.move_on_after(CLOSE_TIMEOUT):
                        await process.wait()
                await process.aclose()


class MacDialog(_ProgramDialog):
    name = "macos"

    def command(self, prompt: Prompt) -> tuple[list[str], dict[str, str]]:
        return osascript_command(prompt)

    async def preflight(self) -> None:
        # "Aqua" means a logged-in GUI session; over ssh or from a LaunchDaemon it is not.
        try:
            result = await anyio.run_process([LAUNCHCTL, "managername"], check=False)
        except OSError as exc:
            raise NoDesktop(f"cannot tell whether a desktop session is there: {exc}") from exc
        manager = result.stdout.decode(errors="replace").strip()
        if manager != "Aqua":
            raise NoDesktop(f"no desktop session here (launchd manager {manager or 'unknown'}, not Aqua)")


class WindowsDialog(_ProgramDialog):
    name = "windows"

    def __init__(self, system_dir: str) -> None:
        self.system_dir = system_dir

    def command(self, prompt: Prompt) -> tuple[list[str], dict[str, str]]:
        return powershell_command(prompt, self.system_dir)

    async def preflight(self) -> None:
        # Session 0 is where services run; it has no desktop a person can see.
        if sys.platform == "win32":
            import ctypes

            session = ctypes.c_ulong()
            kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
            if kernel32.ProcessIdToSessionId(os.getpid(), ctypes.byref(session)) and session.value == 0:
                raise NoDesktop("this sidecar runs as a service (session 0), where no one sees a dialog")
