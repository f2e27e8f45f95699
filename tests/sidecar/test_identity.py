"""The machine key: the OS keyring when a real one answers, else a 0600 file; never a traceback."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import chainer, fail, null

from hive.sidecar.team.identity import KEY_FILE, WHERE_FILE, Identity, KeyUnavailable, load_identity, verify_bytes
from tests.conftest import Hive


class MemoryKeyring(KeyringBackend):
    """A working keyring backend that keeps secrets in a dict (the real backends need a desktop)."""

    priority = 5  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.secrets: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.secrets.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.secrets[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.secrets.pop((service, username), None)


class StuckKeyring(MemoryKeyring):
    """A Secret Service waiting on an unlock prompt nobody will answer."""

    def get_password(self, service: str, username: str) -> str | None:
        time.sleep(2)
        return None


class EmptyChainer(chainer.ChainerBackend):
    backends = ()  # type: ignore[assignment]


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Let each test choose the keyring backend, and put the original back afterwards."""
    monkeypatch.delenv("HIVE_KEYRING", raising=False)
    original = keyring.get_keyring()
    yield
    keyring.set_keyring(original)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("choice", [fail.Keyring, null.Keyring, EmptyChainer], ids=["fail", "null", "empty-chainer"])
def test_without_a_real_keyring_the_key_goes_to_a_0600_file_with_a_clean_reason(
    tmp_path: Path, backend: None, choice: type[KeyringBackend]
) -> None:
    keyring.set_keyring(choice())
    identity = load_identity(tmp_path)
    assert identity.store == "file"
    assert "no OS keyring" in identity.why and str(tmp_path / KEY_FILE) in identity.why
    assert mode(tmp_path / KEY_FILE) == 0o600
    assert not (tmp_path / WHERE_FILE).exists()
    again = load_identity(tmp_path)
    assert again.key_id == identity.key_id and again.store == "file"


def test_hive_keyring_off_keeps_the_key_in_the_file_even_with_a_keyring(
    tmp_path: Path, backend: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = MemoryKeyring()
    keyring.set_keyring(memory)
    monkeypatch.setenv("HIVE_KEYRING", "off")
    identity = load_identity(tmp_path)
    assert identity.store == "file" and "HIVE_KEYRING=off" in identity.why
    assert memory.secrets == {}


def test_a_real_keyring_holds_the_key_and_the_state_folder_only_notes_where(tmp_path: Path, backend: None) -> None:
    memory = MemoryKeyring()
    keyring.set_keyring(memory)
    identity = load_identity(tmp_path)
    assert identity.store == "keyring"
    assert not (tmp_path / KEY_FILE).exists()
    assert mode(tmp_path / WHERE_FILE) == 0o600
    seed = bytes(identity.signing_key).hex()
    assert seed not in (tmp_path / WHERE_FILE).read_text() and list(memory.secrets.values()) == [seed]
    assert load_identity(tmp_path).key_id == identity.key_id
    # Another state folder on the same host is another machine.
    assert load_identity(tmp_path / "second").key_id != identity.key_id


def test_a_key_kept_in_a_keyring_that_is_gone_fails_clearly_rather_than_becoming_a_new_machine(
    tmp_path: Path, backend: None
) -> None:
    keyring.set_keyring(MemoryKeyring())
    load_identity(tmp_path)
    keyring.set_keyring(fail.Keyring())
    with pytest.raises(KeyUnavailable) as caught:
        load_identity(tmp_path)
    assert "OS keyring" in caught.value.message and caught.value.code == "unreachable"
    assert not (tmp_path / KEY_FILE).exists()
    keyring.set_keyring(MemoryKeyring())  # a keyring that answers but lost the entry
    with pytest.raises(KeyUnavailable, match="not there"):
        load_identity(tmp_path)


def test_a_keyring_that_does_not_answer_counts_as_absent(tmp_path: Path, backend: None) -> None:
    keyring.set_keyring(StuckKeyring())
    identity = load_identity(tmp_path, timeout=0.2)
    assert identity.store == "file" and "did not answer" in identity.why
    assert mode(tmp_path / KEY_FILE) == 0o600


def test_a_key_file_others_can_read_is_refused(tmp_path: Path, backend: None) -> None:
    keyring.set_keyring(fail.Keyring())
    load_identity(tmp_path)
    os.chmod(tmp_path / KEY_FILE, 0o644)
    with pytest.raises(KeyUnavailable, match="chmod 600"):
        load_identity(tmp_path)
    os.chmod(tmp_path / KEY_FILE, 0o600)
    (tmp_path / KEY_FILE).write_text("not a key\n")
    with pytest.raises(KeyUnavailable, match="damaged"):
        load_identity(tmp_path)


def test_the_private_key_never_shows_in_repr_and_signatures_verify() -> None:
    identity = Identity.generate()
    assert bytes(identity.signing_key).hex() not in repr(identity)
    assert len(identity.key_id) == 64 and identity.public_key.hex() == identity.key_id
    signature = identity.sign_bytes(b"hello")
    assert verify_bytes(identity.key_id, b"hello", signature)
    assert not verify_bytes(identity.key_id, b"hellO", signature)
    assert not verify_bytes("zz", b"hello", signature)


def test_a_sidecar_with_no_keyring_backend_keeps_its_key_in_a_file_and_logs_why_without_the_key(
    make_hive: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HIVE_KEYRING", raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    hive: Hive = make_hive()  # type: ignore[operator]
    hive.start()
    result = hive.cli("init", "acme", "--as", "alice", check=True)
    assert "Traceback" not in result.stderr
    key_file = hive.home / KEY_FILE
    assert mode(key_file) == 0o600
    seed = key_file.read_text().strip()
    log = (hive.home / "sidecar.log").read_text()
    assert "no OS keyring is available" in log and seed not in log
    assert seed not in (hive.home / "sidecar.stderr").read_text()


def test_importing_identity_does_not_touch_the_keyring() -> None:
    # The hook client and the CLI import hive modules on every call; the keyring probe must be lazy.
    code = "import sys, hive.sidecar.team.identity; sys.exit('keyring.backends.SecretService' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
