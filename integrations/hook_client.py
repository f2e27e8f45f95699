"""The hook client: what every hooked harness runs on every hook event, so the hot path.

``hive_hook.py`` (the script the harness configs name) imports this module, which keeps its
bytecode cached: compiling this file at every run would cost more than the rest put together.
Run as ``<python> -I -S <dir>/hive_hook.py <harness> <NativeEvent> [<no-opinion reply>]``.

It imports only the standard library's C modules (``posix``, ``_socket``, ``_json``, ``_signal``,
all cheap at start-up; ``os`` alone costs about 1 ms), reads the harness's stdin, sends ONE
``hook`` request to the sidecar and prints the reply's ``stdout`` exactly. A hard deadline of
150 ms covers everything up to printing. On timeout, error, no sidecar or an empty answer it
prints the harness's no-opinion reply (argv[3], "" when absent) and exits 0: a failed hive call
must never become a control decision. The one exit 2 is Claude Code's Stop carrying mail: the
sidecar answers ``"exit": 2`` with the text in ``stderr``, and only a full write of it exits 2.
When no sidecar answers it starts one detached, without waiting for it. Mail in the reply is not
confirmed here: the harness has yet to pass it to the model. Once stdout is written the hook
tells the sidecar (``hook_written``), which then holds the mail for the harness process until
the session's next hook after a model call confirms it, or makes it visible again if that
process dies first; if writing fails the mail is released at once (``undelivered``), and if the
hook dies before either, closing its connection releases it.

``<harness> watch`` is the Claude Code push watcher (``asyncRewake``): a background process that
long-polls the sidecar for waking mail, writes it to stderr and exits 2, which wakes the session;
the mail is then held for the harness like a hook's reply. It exits 0 when its harness process
exits or the session ends, and never starts a sidecar (it waits for one). Not the hot path.

The state folder and socket rules mirror ``hive.sidecar.base.paths`` exactly (a test checks that both
agree); the sidecar cannot be imported here because ``-S`` leaves out site-packages.
"""

# No ``from __future__ import annotations``: importing __future__ costs more (0.1 ms) than
# evaluating these annotations, all valid at run time on the Python versions hive supports.
import posix
import sys
import time

DEADLINE = 0.150  # seconds from entry until stdout must be written
CONFIRM_DEADLINE = 1.0  # stdout is out; confirming may take a little longer
MAX_VERBATIM = 256 * 1024  # bigger stdin is reduced to its small top-level fields
MAX_FIELD = 4096
START_BACKOFF = 5.0  # one detached sidecar start per this many seconds, however many hooks fire
WATCH_POLL = 2.0  # the watcher checks its harness process this often
SOCKET_NAME = "hive.sock"
MAX_SOCKET_PATH = 100  # as hive.sidecar.base.paths

# Environment variables the descriptors name (session ids, caller evidence). The sidecar writes
# names added by third-party harnesses to ``<state>/hook-env``; a test keeps this list complete
# for the built-in ones.
ENV_NAMES = (
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_SESSION_ID",
    "CODEX_MANAGED_BY_NPM",
    "CODEX_MANAGED_PACKAGE_ROOT",
    "CURSOR_PROJECT_DIR",
    "GEMINI_SESSION_ID",
    "OPENCODE",
    "PI_CODING_AGENT",
)
ENV_FILE = "hook-env"

# Process names that sit between a harness and its hook (`sh -c "<command>"`).
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox", "tcsh", "csh"})

_FS = sys.getfilesystemencoding()

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    import _socket
    import io
    import socket


class _Deadline(BaseException):
    """Raised by SIGALRM: a BaseException so no handler on the way mistakes it for an error."""


class HookError(Exception):
    """The sidecar's answer is missing or not in the expected shape."""


class Refused(HookError):
    """The sidecar answered with an error: asking again will not help."""


# ---- paths: the rules of hive.sidecar.base.paths and platformdirs, without importing them ----------


def _fsdecode(value: bytes) -> str:
    return value.decode(_FS, "surrogateescape")


def _fsencode(value: str) -> bytes:
    return value.encode(_FS, "surrogateescape")


def _getenv(environ: dict[bytes, bytes], name: str) -> str | None:
    value = environ.get(_fsencode(name))
    return None if value is None else _fsdecode(value)


def _pure(path: str) -> str:
    """``str(pathlib.PurePosixPath(path))``: drop empty and ``.`` parts, keep ``..`` and a ``//`` root."""
    if path.startswith("/"):
        root = "//" if path.startswith("//") and not path.startswith("///") else "/"
    else:
        root = ""
    parts = [p for p in path.split("/") if p and p != "."]
    if not root and not parts:
        return "."
    return root + "/".join(parts)


def _home_dir() -> str:
    import pwd  # built in: no file to load

    return pwd.getpwuid(posix.getuid()).pw_dir


def _expanduser(path: str, environ: dict[bytes, bytes]) -> str:
    """``os.path.expanduser`` on POSIX."""
    if not path.startswith("~"):
        return path
    cut = path.find("/", 1)
    if cut < 0:
        cut = len(path)
    if cut == 1:
        home = _getenv(environ, "HOME")
        if home is None:
            try:
                home = _home_dir()
            except KeyError:
                return path
    else:
        import pwd

        try:
            home = pwd.getpwnam(path[1:cut]).pw_dir
        except KeyError:
            return path
    home = home.rstrip("/")
    return (home + path[cut:]) or "/"


def state_home(environ: dict[bytes, bytes] | None = None) -> str:
    """The state folder: ``$HIVE_HOME``, else platformdirs' user data dir for "hive"."""
    environ = posix.environ if environ is None else environ
    override = _getenv(environ, "HIVE_HOME")
    if override:
        path = _pure(override)
        if path.startswith("~"):  # Path.expanduser acts on the first part only
            first, _, rest = path.partition("/")
            home = _expanduser(first, environ)
            if home.startswith("~"):
                raise RuntimeError("could not determine the home directory")
            path = _pure(home + "/" + rest if rest else home)
        if not path.startswith("/"):
            path = _pure(posix.getcwd() + "/" + path)
        return path
    xdg = _getenv(environ, "XDG_DATA_HOME") or ""
    if xdg.startswith("/"):
        base = xdg
    else:
        # platformdirs treats a relative HOME as unset and asks the password database.
        home = _getenv(environ, "HOME") or ""
        if not home.startswith("/"):
            home = _home_dir()
        tail = "/Library/Application Support" if sys.platform == "darwin" else "/.local/share"
        base = (home.rstrip("/") + tail) or "/"
    return _pure(base + "hive" if base.endswith("/") else base + "/hive")


def socket_path(home: str) -> str:
    """The sidecar's socket for state folder ``home`` (already normalized)."""
    preferred = home + SOCKET_NAME if home.endswith("/") else home + "/" + SOCKET_NAME
    if len(_fsencode(preferred)) <= MAX_SOCKET_PATH:
        return preferred
    # Rare (deep state folders): these imports cost a few ms, paid only here.
    import hashlib
    import tempfile

    digest = hashlib.sha256(_fsencode(home)).hexdigest()[:16]
    return _pure(tempfile.gettempdir()) + f"/hive-{posix.getuid()}-{digest}.sock"


# ---- JSON with the C modules only -------------------------------------------------------------


class _ScanContext:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float


def _loads(text: str) -> object:
    try:
        import _json
    except ImportError:  # another implementation: the pure-Python module is fine there
        import json

        return json.loads(text)
    # typeshed types the context as a make_scanner itself; CPython reads only the attributes (json.decoder passes
    # a JSONDecoder), which _ScanContext has.
    value, end = _json.make_scanner(_ScanContext())(text, 0)  # type: ignore[arg-type]
    if text[end:].strip():
        raise HookError("trailing data after the JSON value")
    return value


def _quote(text: str) -> str:
    try:
        import _json
    except ImportError:
        import json

        return json.dumps(text)
    return _json.encode_basestring_ascii(text)


def _encode(value: object) -> str | None:
    """JSON for the scalars and short string lists kept from a reduced payload; None to drop."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, str):
        return _quote(value) if len(value) <= MAX_FIELD else None
    if isinstance(value, list) and len(value) <= 64 and all(isinstance(v, str) and len(v) <= MAX_FIELD for v in value):
        return "[" + ",".join(_quote(v) for v in value) + "]"
    return None


def _reduced(raw: bytes) -> str:
    """A payload too large to pass on whole (a tool's output): only its small top-level fields."""
    try:
        payload = _loads(raw.decode("utf-8", "replace"))
    except Exception:
        return "{}"
    if not isinstance(payload, dict):
        return "{}"
    fields = []
    for key, value in payload.items():
        encoded = _encode(value)
        if encoded is not None:
            fields.append(_quote(key) + ":" + encoded)
    return "{" + ",".join(fields) + "}"


# ---- I/O ---------------------------------------------------------------------------------------


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = posix.read(fd, 1 << 16)
        except OSError:  # a closed or missing stdin reads as empty
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _read_some(fd: int, seconds: float) -> bytes:
    """Stdin up to EOF, or what came within ``seconds`` (a harness that never closes it)."""
    import select

    chunks = []
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            if not select.select([fd], [], [], remaining)[0]:
                break
            chunk = posix.read(fd, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = posix.write(fd, view)
        view = view[written:]


def _read_line(sock: "_socket.socket") -> bytes:
    buffer = b""
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise HookError("the sidecar closed the connection before answering")
        buffer += chunk
        end = buffer.find(b"\n")
        if end >= 0:
            return buffer[:end]


def _env_names(home: str) -> list[str]:
    names = list(ENV_NAMES)
    try:
        fd = posix.open(home + "/" + ENV_FILE, posix.O_RDONLY)
    except OSError:
        return names
    try:
        extra = posix.read(fd, 1 << 14).decode("utf-8", "replace").split()
    finally:
        posix.close(fd)
    return names + [n for n in extra if n not in names]


def _describe_caller(harness: str, event: str, home: str, environ: dict[bytes, bytes], stdin: bytes) -> str:
    """The fields of a hook or watch request after ``op``: who calls, from where, with what stdin."""
    env = []
    for name in _env_names(home):
        value = _getenv(environ, name)
        if value is not None:
            env.append(_quote(name) + ":" + _quote(value))
    try:
        cwd = posix.getcwd()
    except OSError:
        cwd = ""
    if len(stdin) <= MAX_VERBATIM:
        body = ',"stdin":' + _quote(stdin.decode("utf-8", "replace"))
    else:
        body = ',"payload":' + _reduced(stdin)
    return (
        f',"harness":{_quote(harness)},"event":{_quote(event)},"ppid":{posix.getppid()}'
        f',"cwd":{_quote(cwd)},"env":{{{",".join(env)}}}{body}'
    )


def _connect(home: str, environ: dict[bytes, bytes]) -> "_socket.socket":
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(socket_path(home))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        start_sidecar(home, environ)
        raise
    except BaseException:
        sock.close()
        raise
    return sock


def _result(line: bytes) -> dict[str, object]:
    reply = _loads(line.decode("utf-8", "replace"))
    if not isinstance(reply, dict):
        raise HookError("the sidecar's reply is not an object")
    if not reply.get("ok"):
        error = reply.get("error")
        raise Refused(str(error.get("message") if isinstance(error, dict) else error))
    result = reply.get("result")
    if not isinstance(result, dict):
        raise HookError("the sidecar's reply has no result")
    return result


def _mkdirs(path: str) -> None:
    missing = []
    while path and path != "/":
        try:
            posix.stat(path)
            break
        except FileNotFoundError:
            missing.append(path)
            path = path.rpartition("/")[0]
    for folder in reversed(missing):
        try:
            posix.mkdir(folder, 0o700)
        except FileExistsError:
            pass


def start_sidecar(home: str, environ: dict[bytes, bytes] | None = None) -> bool:
    """Start a sidecar for ``home`` in its own session, detached, and return without waiting.

    Several hooks may find no sidecar at once; a marker file lets one start through per
    ``START_BACKOFF`` seconds (the sidecar's lock would stop the others anyway, but each costs
    a Python start-up). The state folder is made if missing, but not its parent. Returns whether
    a start was attempted.
    """
    environ = posix.environ if environ is None else environ
    try:
        posix.stat(home.rstrip("/").rpartition("/")[0] or "/")
    except OSError:
        # The folder the state folder lives in is gone (a deleted home, a test's removed root): a
        # harness process that outlived it must not build it again and leave a sidecar there.
        return False
    marker = home + "/sidecar.starting"
    try:
        if time.time() - posix.stat(marker).st_mtime < START_BACKOFF:
            return False
    except OSError:
        pass
    _mkdirs(home)
    posix.close(posix.open(marker, posix.O_WRONLY | posix.O_CREAT, 0o600))
    posix.utime(marker)
    env = dict(environ)
    env[b"HIVE_HOME"] = _fsencode(home)
    # The hook runs with -I -S; the sidecar needs site-packages (hive's dependencies), so it
    # runs without them. --detach forks again, so it never stays our child.
    argv = [sys.executable, "-m", "hive.sidecar", "--detach"]
    pid = posix.fork()
    if pid == 0:
        try:
            posix.setsid()
            posix.chdir("/")
            null = posix.open("/dev/null", posix.O_RDWR)
            posix.dup2(null, 0)
            posix.dup2(null, 1)  # never hold the harness's stdout pipe open
            err = posix.open(home + "/sidecar.stderr", posix.O_WRONLY | posix.O_CREAT | posix.O_APPEND, 0o600)
            posix.dup2(err, 2)
            posix.execve(sys.executable, argv, env)
        finally:
            posix._exit(127)
    return True


# ---- the hook ----------------------------------------------------------------------------------


def _alarm(signum: int, frame: object) -> None:
    raise _Deadline()


def _deadline(environ: dict) -> float:
    """``HIVE_HOOK_DEADLINE_MS`` gives a slow machine (or a test on a loaded one) more time."""
    raw = environ.get(b"HIVE_HOOK_DEADLINE_MS")
    if raw and raw.isdigit():
        return min(max(int(raw), 50), 10_000) / 1000
    return DEADLINE


def _arm(seconds: float) -> None:
    if TYPE_CHECKING:  # typeshed has no stubs for _signal; signal re-exports these same functions
        import signal as _signal
    else:
        import _signal

    _signal.signal(_signal.SIGALRM, _alarm)
    _signal.setitimer(_signal.ITIMER_REAL, seconds)


def _disarm() -> None:
    if TYPE_CHECKING:
        import signal as _signal
    else:
        import _signal

    _signal.setitimer(_signal.ITIMER_REAL, 0)


def run(argv: list[str]) -> int:
    """Answer one hook: ``argv`` is ``[program, harness, event, no_opinion?]``. Returns 0, or 2
    when the sidecar's answer is a ``stderr_block`` (its text written to stderr in full)."""
    harness = argv[1] if len(argv) > 1 else ""
    event = argv[2] if len(argv) > 2 else ""
    no_opinion = argv[3] if len(argv) > 3 else ""
    if event == "watch":
        try:
            return watch(harness)
        except BaseException:
            return 0
    out = no_opinion
    block = ""  # text for stderr with exit 2 (a ``stderr_block`` point), only as the sidecar said
    ids: list[str] = []
    session = ""
    sock: _socket.socket | None = None
    environ = posix.environ
    try:
        _arm(_deadline(environ))
        try:
            home = state_home(environ)
            stdin = _read_all(0)
            sock = _connect(home, environ)
            request = '{"id":1,"op":"hook"' + _describe_caller(harness, event, home, environ, stdin) + "}\n"
            sock.sendall(request.encode())
            result = _result(_read_line(sock))
            stdout = result.get("stdout")
            stderr = result.get("stderr")
            if result.get("exit") == 2 and isinstance(stderr, str) and stderr:
                block = stderr  # Claude Code's blocking exit: only the sidecar's explicit answer
            if (isinstance(stdout, str) and stdout) or block:
                out = stdout if isinstance(stdout, str) else no_opinion
                shown = result.get("ids")
                if isinstance(shown, list):
                    ids = [i for i in shown if isinstance(i, str)]
                session = str(result.get("session") or "")
        finally:
            _disarm()
    except BaseException:
        ids = []
        out, block = no_opinion, ""
    written = False
    try:
        _write_all(1, out.encode("utf-8", "replace"))
        if block:
            _write_all(2, block.encode("utf-8", "replace"))
        written = True
    except BaseException:
        pass
    if ids and sock is not None:
        op = "hook_written" if written else "undelivered"
        try:
            _arm(CONFIRM_DEADLINE)
            try:
                line = '{"id":2,"op":' + _quote(op) + ',"session":' + _quote(session) + ',"ids":['
                line += ",".join(_quote(i) for i in ids) + "]}\n"
                sock.sendall(line.encode())
                _read_line(sock)  # the sidecar drops a request whose connection closes first
            finally:
                _disarm()
        except BaseException:
            pass
    if sock is not None:
        try:
            sock.close()
        except BaseException:
            pass
    # Exit 2 blocks the harness (Claude Code's Stop: "go on, with this on stderr"): only when the
    # sidecar answered so and all of its text is out; every failure above left ``block`` empty.
    return 2 if block and written else 0


# ---- process ancestry (also used by the sidecar) ------------------------------------------------


def process_info(pid: int) -> tuple[str, int] | None:
    """``(name, parent pid)`` of a process, or None if it is gone."""
    try:
        fd = posix.open(f"/proc/{pid}/stat", posix.O_RDONLY)
    except FileNotFoundError:
        if sys.platform.startswith("linux"):
            return None
        return _ps_info(pid)
    except OSError:
        return _ps_info(pid)
    try:
        stat = posix.read(fd, 4096).decode("utf-8", "replace")
    finally:
        posix.close(fd)
    # The name may hold spaces and parentheses: it ends at the last ')'.
    name = stat[stat.find("(") + 1 : stat.rfind(")")]
    fields = stat[stat.rfind(")") + 1 :].split()
    return name, int(fields[1])


def _ps_info(pid: int) -> tuple[str, int] | None:
    import subprocess

    try:
        out = subprocess.run(
            ["ps", "-o", "ppid=,comm=", "-p", str(pid)], capture_output=True, text=True, timeout=2, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if not out:
        return None
    ppid, _, command = out.partition(" ")
    name = command.strip().rpartition("/")[2].lstrip("-")
    return name, int(ppid)


def harness_pid(parent: int) -> int:
    """The harness behind a hook whose parent is ``parent``: the parent, or the process above
    the shells the harness ran the hook command through."""
    pid = parent
    for _ in range(4):
        info = process_info(pid)
        if info is None or info[0] not in SHELLS or info[1] <= 1:
            return pid
        pid = info[1]
    return pid


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the name (state first); None if unreadable."""
    try:
        fd = posix.open(f"/proc/{pid}/stat", posix.O_RDONLY)
    except OSError:
        return None
    try:
        stat = posix.read(fd, 4096).decode("utf-8", "replace")
    finally:
        posix.close(fd)
    return stat[stat.rfind(")") + 1 :].split()


def start_time(pid: int) -> str:
    """The process's start time where the system tells it ("" elsewhere), to tell a reused pid apart."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else ""


def process_alive(pid: int, started: str) -> bool:
    """Whether ``pid`` still runs and is the process that started at ``started`` ("" to skip that)."""
    try:
        posix.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat_fields(pid)
    if fields is None:
        return not sys.platform.startswith("linux")  # no /proc: kill(0) is all there is
    if fields and fields[0] in ("Z", "X"):
        return False  # exited; only its parent has not collected it yet
    return not started or (len(fields) > 19 and fields[19] == started)


# ---- the Claude Code push watcher ---------------------------------------------------------------


class _Link:
    """The watcher's one connection to the sidecar, reopened as needed.

    It never starts a sidecar: the session's own hooks do that, and a watcher that did would
    undo ``hive stop`` for as long as its session stays open.
    """

    def __init__(self, home: str) -> None:
        self.home = home
        self.conn: tuple[socket.socket, io.BufferedReader] | None = None
        self.ids = 0

    def call(self, body: str, timeout: float) -> dict[str, object]:
        """Send ``{"id", <body>}`` and return the result; ``body`` is the rest of the JSON object."""
        import socket

        if self.conn is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(socket_path(self.home))
            except BaseException:
                sock.close()
                raise
            self.conn = sock, sock.makefile("rb")
        sock, reader = self.conn
        self.ids += 1
        try:
            sock.settimeout(timeout)
            sock.sendall(f'{{"id":{self.ids},{body}}}\n'.encode())
            line = reader.readline()
            if not line:
                raise HookError("the sidecar closed the connection")
        except BaseException:
            self.close()
            raise
        return _result(line.rstrip(b"\n"))

    def confirm(self, op: str, session: str, ids: list[str]) -> None:
        self.call(f'"op":{_quote(op)},"session":{_quote(session)},"ids":[{",".join(_quote(i) for i in ids)}]', 5)

    def close(self) -> None:
        if self.conn is not None:
            sock, reader = self.conn
            reader.close()
            sock.close()
        self.conn = None


def watch(harness: str) -> int:
    """Wait for waking mail for this hook's session; on mail write it to stderr and return 2.

    Returns 0 when another watcher already serves the session, when the session ends, when the
    harness process is gone (checked every ``WATCH_POLL`` seconds) and at once in a headless
    Claude Code run. Stderr stays silent then.
    """
    environ = posix.environ
    if (_getenv(environ, "CLAUDE_CODE_ENTRYPOINT") or "").startswith("sdk"):
        # Headless (`claude -p`, the SDK): a pending background hook keeps the process from
        # exiting (push.md §1a), and a run that ends with its turn has no idle time to wake.
        return 0
    home = state_home(environ)
    stdin = _read_some(0, 5.0)
    caller = '"op":"watch"' + _describe_caller(harness, "watch", home, environ, stdin)
    target = harness_pid(posix.getppid())
    started = start_time(target)
    link = _Link(home)
    lock_fd: int | None = None
    try:
        while True:
            if not process_alive(target, started):
                return 0
            try:
                if lock_fd is None:  # first learn the session's key (registering it if new)
                    result = link.call(caller + ',"wait":0,"peek":true', 10)
                else:
                    result = link.call(caller + f',"wait":{WATCH_POLL}', WATCH_POLL + 10)
            except Refused:
                return 0  # no session id, an unknown harness: nothing to watch
            except (OSError, HookError):
                time.sleep(1.0)  # no sidecar (the session's hooks start one), or it restarted
                continue
            if result.get("ended"):
                return 0
            session = str(result.get("session") or "")
            if lock_fd is None:
                lock_fd = _take_lock(home, session) if session else None
                if lock_fd is None:
                    return 0  # no session to serve, or another watcher serves it
                continue
            ids = result.get("ids")
            text = result.get("text")
            if not ids or not isinstance(ids, list) or not isinstance(text, str):
                continue
            ids = [i for i in ids if isinstance(i, str)]
            try:
                _write_all(2, text.encode("utf-8", "replace"))
            except OSError:
                link.confirm("undelivered", session, ids)
                return 0
            try:
                # Written, not yet seen: the woken turn's next hook confirms it (see run()).
                link.confirm("hook_written", session, ids)
            except (OSError, HookError):
                pass  # the sidecar releases it when this connection closes: shown again, never lost
            return 2
    finally:
        link.close()
        if lock_fd is not None:
            posix.close(lock_fd)


def _take_lock(home: str, key: str) -> int | None:
    """The per-session watcher lock: a pid file held with flock for the watcher's lifetime."""
    import fcntl
    import hashlib

    folder = home + "/watchers"
    _mkdirs(folder)
    path = f"{folder}/{hashlib.sha256(key.encode()).hexdigest()[:24]}.pid"
    fd = posix.open(path, posix.O_RDWR | posix.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        posix.close(fd)
        return None
    posix.ftruncate(fd, 0)
    posix.write(fd, f"{posix.getpid()}\n".encode())
    return fd
