"""The database: numbered migrations that upgrade old files in place, private files, durable pragmas."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from hive.sidecar.base.store import MIGRATIONS, SCHEMA_VERSION, Store, migrate
from tests.conftest import Hive


def make_version_1(path: Path) -> None:
    conn = sqlite3.connect(path)
    assert migrate(conn, target=1) == 0
    conn.execute(
        "INSERT INTO sessions (key, name, agent, cwd, created_at, last_seen) VALUES ('k1', 'api-codex', 'codex', "
        "'/src/api', 1, 1)"
    )
    conn.execute(
        "INSERT INTO messages (id, sender, recipient, body, sent_at) VALUES "
        "('01JAAAAAAAAAAAAAAAAAAAAAAA', 'bob/web', 'alice/api-codex', 'from an old hive', 1)"
    )
    conn.commit()
    conn.close()


@pytest.mark.anyio
async def test_an_old_database_is_upgraded_in_place_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    make_version_1(path)
    store = await Store.open(path)
    try:
        assert (await store.fetchone("PRAGMA user_version"))[0] == SCHEMA_VERSION
        row = await store.fetchone("SELECT body, sender_kind, sender_key FROM messages")
        assert tuple(row) == ("from an old hive", "agent", None)
        assert (await store.fetchone("SELECT transcript FROM sessions"))[0] == ""
    finally:
        await store.close()


def test_a_sidecar_serves_mail_from_a_database_written_by_an_older_hive(make_hive: object) -> None:
    hive: Hive = make_hive()  # type: ignore[operator]
    hive.home.mkdir(exist_ok=True)
    make_version_1(hive.paths.database)
    hive.start()
    registered = hive.request(
        {"id": 1, "op": "register", "session": {"key": "k2", "agent": "codex", "cwd": "/src/api"}}
    )["result"]
    assert registered["name"] == "api-codex" and registered["unread"] == 1


@pytest.mark.anyio
async def test_a_database_from_a_newer_hive_is_refused_rather_than_damaged(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="newer"):
        await Store.open(path)


@pytest.mark.anyio
async def test_the_database_is_private_durable_and_erases_deleted_rows(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    store = await Store.open(path)
    try:
        await store.set_kv("team", "secret link")
        assert (await store.fetchone("PRAGMA journal_mode"))[0] == "wal"
        assert (await store.fetchone("PRAGMA secure_delete"))[0] == 1
        assert (await store.fetchone("PRAGMA synchronous"))[0] == 2  # FULL
        for candidate in (path, Path(f"{path}-wal")):
            assert stat.S_IMODE(os.stat(candidate).st_mode) == 0o600
    finally:
        await store.close()


def test_every_migration_applies_on_top_of_the_previous_ones(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "steps.db")
    for version in range(1, SCHEMA_VERSION + 1):
        migrate(conn, target=version)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == version
    conn.close()


@pytest.mark.anyio
async def test_recalls_index_is_rebuilt_stemmed_with_only_the_verified_lessons_of_an_older_database(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hive.db"
    conn = sqlite3.connect(path)
    stemmed = next(n for n, step in enumerate(MIGRATIONS) if "porter unicode61" in step)
    migrate(conn, target=stemmed)  # the last version with the unstemmed index of every lesson
    for n, (state, text) in enumerate(
        (
            ("verified", "Run each migration with a lock timeout."),
            ("proposed", "Migrations are unreviewed folklore here."),
        )
    ):
        lesson_id = f"{n:064x}"
        conn.execute(
            "INSERT INTO lessons (id, author, author_person, scope, kind, header, body_hash, created_at, "
            "received_at, asked_at, state, eff_scope) VALUES (?, 'k', 'alice', 'team', 'gotcha', ?, ?, 1, "
            "1, 1, ?, 'team')",
            (lesson_id, '{"tags": ["postgres"]}', f"h{n}", state),
        )
        conn.execute(
            "INSERT INTO lesson_blobs (hash, lesson, blob) VALUES (?, ?, ?)",
            (f"h{n}", lesson_id, f'{{"text": "{text}", "applicability": "deploys"}}'),
        )
        conn.execute(
            "INSERT INTO lesson_fts (rowid, id, text, applicability, tags) SELECT rowid, id, ?, '', '' "
            "FROM lessons WHERE id = ?",
            (text, lesson_id),
        )
    conn.commit()
    conn.close()
    store = await Store.open(path)
    try:
        rows = await store.fetchall("SELECT id, tags FROM lesson_fts WHERE lesson_fts MATCH 'migrating'")
        assert [tuple(r) for r in rows] == [(f"{0:064x}", "postgres")]
    finally:
        await store.close()


def test_evidence_files_carry_their_lessons_time_after_the_migration_and_for_lessons_stored_later(
    tmp_path: Path,
) -> None:
    conn = sqlite3.connect(tmp_path / "hive.db")
    migrate(conn, target=next(n for n, step in enumerate(MIGRATIONS) if "lesson_files_recent" in step))
    header = '{"evidence": [{"kind": "file", "ref": "README.md"}, {"kind": "file", "ref": "src/app.py"}]}'

    def store(n: int, created_at: int) -> None:
        conn.execute(
            "INSERT INTO lessons (id, author, author_person, scope, kind, header, body_hash, created_at, "
            "received_at, asked_at, state, eff_scope) VALUES (?, 'k', 'alice', 'team', 'gotcha', ?, ?, ?, "
            "1, 1, 'verified', 'team')",
            (f"{n:064x}", header, f"h{n}", created_at),
        )

    store(0, 111)
    migrate(conn)
    store(1, 222)
    rows = conn.execute("SELECT lesson, path, at FROM lesson_files ORDER BY at, path").fetchall()
    assert rows == [
        (f"{0:064x}", "README.md", 111),
        (f"{0:064x}", "src/app.py", 111),
        (f"{1:064x}", "README.md", 222),
        (f"{1:064x}", "src/app.py", 222),
    ]
    conn.close()
