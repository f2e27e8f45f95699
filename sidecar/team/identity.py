"""This machine's ed25519 key: who the machine is to its team.

The key is kept in the OS keyring when a real backend answers (Secret Service, macOS Keychain,
Windows Credential Locker), and otherwise in ``machine.key``, a 0600 file in the state folder.
Nothing here ever logs or prints the private key; :class:`Identity` hides it from ``repr``.

How the store is chosen, in order:

1. ``machine.key`` exists: it is the key (a file is never silently replaced by a keyring entry).
2. ``HIVE_KEYRING=off`` (tests, or several "machines" on one host): the file.
3. The keyring is usable: the fail and null backends, a chainer with nothing to chain and any
   backend below priority 1 (keyrings.alt's plaintext file) do not count, and a backend that
   does not answer within a few seconds (a locked Secret Service waiting on a prompt) counts as
   absent. The key is read from it, or made and written there; ``machine.key.where`` then records
   that the key lives in the keyring, so a later run without the keyring fails clearly instead
   of quietly becoming a different machine.
4. Otherwise the file, with a one-line reason in :attr:`Identity.why`.

The public key's stable id is its 32 bytes in lower-case hex (:func:`key_id`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from ..base.errors import Unreachable

KEY_FILE = "machine.key"
WHERE_FILE = "machine.key.where"
KEYRING_SERVICE = "hive"
PROBE_TIMEOUT = 5.0

_KEY_ID = re.compile(r"[0-9a-f]{64}")

log = logging.getLogger("hive.sidecar.team.identity")


class KeyUnavailable(Unreachable):
    """The machine key exists but its store cannot be read now."""


@dataclass(frozen=True)
class Identity:
    """This machine's signing key and where it is kept."""

    signing_key: SigningKey = field(repr=False)
    store: str  # "keyring" or "file"
    why: str = ""  # one line: why this store was chosen

    @property
    def key_id(self) -> str:
        return key_id(bytes(self.signing_key.verify_key))

    @property
    def public_key(self) -> bytes:
        return bytes(self.signing_key.verify_key)

    def public_hex(self) -> str:
        return self.key_id

    def seed(self) -> bytes:
        """The 32-byte private seed, for the QUIC certificate. Never log or send it."""
        return bytes(self.signing_key)

    def sign_bytes(self, data: bytes) -> bytes:
        """The 64-byte detached signature of ``data``."""
        return self.signing_key.sign(data).signature

    @classmethod
    def generate(cls, store: str = "memory") -> Identity:
        """A fresh key held only in memory (tests, simulations)."""
        return cls(SigningKey.generate(), store)


def key_id(public_key: bytes) -> str:
    if len(public_key) != 32:
        raise ValueError("an ed25519 public key is 32 bytes")
    return public_key.hex()


def is_key_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _KEY_ID.fullmatch(value) is not None


def public_key_of(key: str) -> bytes:
    """The 32 raw bytes of a key id. Raises ValueError for anything else."""
    if not is_key_id(key):
        raise ValueError(f"not a machine key id: {key[:80]!r}")
    return bytes.fromhex(key)


def verify_bytes(key: str, data: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``key``'s signature of ``data``; never raises for bad input."""
    try:
        VerifyKey(public_key_of(key)).verify(data, signature)
    except (ValueError, BadSignatureError, TypeError):
        return False
    return True


# ---- the keyring ----------------------------------------------------------------------------


def _account(home: Path) -> str:
    # One entry per state folder: several hives on one host are several machines.
    return f"machine-key:{home}"


def keyring_backend() -> tuple[Any | None, str]:
    """The keyring backend to use, or None and the reason there is none."""
    if os.environ.get("HIVE_KEYRING", "").strip().lower() in {"off", "0", "no", "false", "file"}:
        return None, "HIVE_KEYRING=off"
    try:
        import keyring
        from keyring.backends import chainer, fail, null

        backend = keyring.get_keyring()
        if isinstance(backend, fail.Keyring | null.Keyring):
            return None, "no OS keyring is available (no Secret Service, Keychain or Credential Locker)"
        if isinstance(backend, chainer.ChainerBackend):
            real = [b for b in backend.backends if _priority(b) >= 1]
            if not real:
                return None, "no OS keyring is available (the keyring chainer has nothing to chain)"
        elif _priority(backend) < 1:
            return None, f"the keyring backend {type(backend).__name__} is not a real OS keyring"
    except Exception as exc:  # a broken keyring install must not stop the sidecar
        return None, f"the keyring could not be loaded ({type(exc).__name__})"
    return backend, f"the OS keyring ({type(backend).__name__})"


def _priority(backend: Any) -> float:
    try:
        return float(backend.priority)
    except Exception:
        return 0.0


def _with_timeout(func: Any, timeout: float) -> Any:
    """Run a keyring call in a thread; Secret Service may block on an unlock prompt forever."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = func()
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="hive-keyring", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError(f"the keyring did not answer within {timeout:g} s (is it locked?)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _seed(text: str) -> bytes:
    value = text.strip()
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError("the stored machine key is damaged")
    return bytes.fromhex(value)


# ---- the file -------------------------------------------------------------------------------


def _read_key_file(path: Path) -> SigningKey:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
            raise KeyUnavailable(
                f"{path} must belong to you and be readable by you alone (chmod 600 {path}); "
                "hive refuses to use a machine key others can read"
            )
        with os.fdopen(fd, "r", encoding="ascii") as handle:
            fd = -1
            text = handle.read(200)
    finally:
        if fd >= 0:
            os.close(fd)
    try:
        return SigningKey(_seed(text))
    except ValueError as exc:
        raise KeyUnavailable(f"{path} is damaged; move it away to give this machine a new identity") from exc


def _write_private(path: Path, text: str) -> None:
    """Write atomically, created 0600, never following a planted symlink."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


# ---- loading --------------------------------------------------------------------------------


def load_identity(home: Path, *, timeout: float = PROBE_TIMEOUT) -> Identity:
    """This machine's identity, made on first use. Blocking: call it off the event loop.

    Raises:
        KeyUnavailable: the key is kept somewhere that cannot be read now (a keyring that is
            gone or locked, a file with loose permissions or damaged contents).
    """
    key_path = home / KEY_FILE
    where_path = home / WHERE_FILE
    if key_path.exists():
        return Identity(_read_key_file(key_path), "file", f"the key is kept in {key_path}")
    backend, reason = keyring_backend()
    in_keyring = where_path.exists()
    if backend is not None:
        account = _account(home)
        try:
            stored = _with_timeout(lambda: backend.get_password(KEYRING_SERVICE, account), timeout)
            if stored:
                return Identity(SigningKey(_seed(stored)), "keyring", reason)
            if in_keyring:
                raise KeyUnavailable(
                    f"this machine's key should be in {reason}, but it is not there; "
                    f"remove {where_path} to give this machine a new identity (it must then join its team again)"
                )
            key = SigningKey.generate()
            seed = bytes(key).hex()
            _with_timeout(lambda: backend.set_password(KEYRING_SERVICE, account, seed), timeout)
            if _with_timeout(lambda: backend.get_password(KEYRING_SERVICE, account), timeout) != seed:
                raise RuntimeError("the keyring did not keep the key")
            _write_private(where_path, f"keyring {KEYRING_SERVICE} {account}\n")
            log.info("machine key created in %s", reason)
            return Identity(key, "keyring", reason)
        except KeyUnavailable:
            raise
        except Exception as exc:  # KeyringError, dbus and secretstorage errors, timeouts
            reason = f"the OS keyring failed ({type(exc).__name__}: {str(exc)[:120]})"
            backend = None
    if in_keyring:
        raise KeyUnavailable(
            f"this machine's key is in the OS keyring, which cannot be used now: {reason}. Unlock the keyring "
            f"and try again, or remove {where_path} to give this machine a new identity (it must then join again)"
        )
    key = SigningKey.generate()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_private(key_path, bytes(key).hex() + "\n")
    why = f"{reason}; the key is kept in {key_path} (mode 0600)"
    log.info("machine key created: %s", why)
    return Identity(key, "file", why)
