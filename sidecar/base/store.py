"""The sidecar's SQLite database: schema migrations, pragmas and group commit.

One aiosqlite connection, owned by the sidecar. Writes that a client relies on are committed
before the client is answered; concurrent writers share one commit (group commit), so
durability costs one fsync per batch rather than one per message.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite
import anyio

T = TypeVar("T")

# Each entry upgrades the schema from version i to i + 1. Never edit a released entry: add one.
MIGRATIONS: list[str] = [
    # 1: sessions, mail and a key/value table
    """
    CREATE TABLE sessions (
        key TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        agent TEXT NOT NULL,
        cwd TEXT NOT NULL DEFAULT '',
        repo TEXT NOT NULL DEFAULT '',
        branch TEXT NOT NULL DEFAULT '',
        doing TEXT NOT NULL DEFAULT '',
        tier TEXT NOT NULL DEFAULT 'pull',
        pid INTEGER,
        created_at REAL NOT NULL,
        last_seen REAL NOT NULL,
        ended_at REAL
    );
    CREATE INDEX sessions_name ON sessions(name);
    CREATE TABLE messages (
        id TEXT PRIMARY KEY,
        sender TEXT NOT NULL,
        sender_agent TEXT NOT NULL DEFAULT '',
        sender_repo TEXT NOT NULL DEFAULT '',
        recipient TEXT NOT NULL,
        reply_to TEXT,
        body TEXT NOT NULL,
        wake INTEGER NOT NULL DEFAULT 1,
        sent_at REAL NOT NULL,
        read_at REAL
    );
    CREATE INDEX messages_unread ON messages(recipient, read_at);
    CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    # 2: who typed a message (a person at a terminal or an agent), the session that sent it
    # (so its sender can read receipts) and the transcript a session writes.
    """
    ALTER TABLE messages ADD COLUMN sender_kind TEXT NOT NULL DEFAULT 'agent';
    ALTER TABLE messages ADD COLUMN sender_key TEXT;
    CREATE INDEX messages_sender_key ON messages(sender_key);
    ALTER TABLE sessions ADD COLUMN transcript TEXT NOT NULL DEFAULT '';
    """,
    # 3: mail between machines. The sender's outbox keeps every remote message with the state
    # its recipient reported (pending until acknowledged, then receipts); inbound records what
    # teammates' machines sent here (duplicates, held mail, receipts owed); threads and
    # thread_runs counted consecutive agent messages in a reply chain (replaced by pair_runs).
    """
    CREATE TABLE outbox (
        id TEXT PRIMARY KEY,
        peer TEXT NOT NULL,
        recipient TEXT NOT NULL,
        sender TEXT NOT NULL,
        sender_key TEXT,
        frame TEXT NOT NULL,
        created_at REAL NOT NULL,
        pending INTEGER NOT NULL DEFAULT 1,
        state TEXT NOT NULL DEFAULT 'queued',
        note TEXT NOT NULL DEFAULT '',
        updated_at REAL NOT NULL,
        read_at REAL
    );
    CREATE INDEX outbox_pending ON outbox(peer, id) WHERE pending = 1;
    CREATE INDEX outbox_sender ON outbox(sender_key, sender);
    CREATE TABLE inbound (
        id TEXT PRIMARY KEY,
        peer TEXT NOT NULL,
        sender TEXT NOT NULL,
        recipient TEXT NOT NULL,
        state TEXT NOT NULL,
        note TEXT NOT NULL DEFAULT '',
        frame TEXT,
        received_at REAL NOT NULL,
        due TEXT NOT NULL DEFAULT '',
        reported TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX inbound_unread ON inbound(peer) WHERE state = 'accepted' AND reported != 'read';
    CREATE INDEX inbound_held ON inbound(received_at) WHERE state = 'held';
    CREATE TABLE threads (id TEXT PRIMARY KEY, root TEXT NOT NULL, at REAL NOT NULL);
    CREATE TABLE thread_runs (root TEXT PRIMARY KEY, agents INTEGER NOT NULL, at REAL NOT NULL);
    """,
    # 4: an approval that came with a message (JSON: the record, who signed it, verified), so the
    # agent sees it framed as <hive-approval>, which no message body can produce.
    """
    ALTER TABLE messages ADD COLUMN approval TEXT;
    """,
    # 5: the team this machine is in (one at most): its signed roster as JSON (hive.sidecar.team.roster).
    """
    CREATE TABLE team (
        slot INTEGER PRIMARY KEY CHECK (slot = 1),
        team_id TEXT NOT NULL,
        state TEXT NOT NULL,
        updated_at REAL NOT NULL
    );
    """,
    # 6: the gate (hive.sidecar.gate.engine): every proactive item offered with its current state, the
    # ledger of every decision (the item, the rule that decided, the time), the records urgency
    # is computed from (test and CI state, deadlines, who is blocked, security findings), and the
    # signals the measures count (acted on, asked about, escalated).
    """
    CREATE TABLE gate_items (
        id TEXT PRIMARY KEY,
        fingerprint TEXT NOT NULL,
        source TEXT NOT NULL,
        proposer TEXT NOT NULL DEFAULT '',
        person TEXT NOT NULL,
        session TEXT NOT NULL DEFAULT '',
        title TEXT NOT NULL,
        body TEXT NOT NULL DEFAULT '',
        evidence TEXT NOT NULL DEFAULT '[]',
        data TEXT NOT NULL DEFAULT '{}',
        urgency TEXT NOT NULL,
        state TEXT NOT NULL,
        would TEXT NOT NULL DEFAULT '',
        due REAL,
        channel TEXT NOT NULL DEFAULT '',
        spent TEXT NOT NULL DEFAULT '',
        offered_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX gate_items_open ON gate_items(due) WHERE state IN ('pending', 'held');
    CREATE INDEX gate_items_fingerprint ON gate_items(fingerprint, offered_at);
    CREATE INDEX gate_items_person ON gate_items(person, offered_at);
    CREATE TABLE gate_ledger (
        seq INTEGER PRIMARY KEY,
        item TEXT NOT NULL,
        person TEXT NOT NULL,
        source TEXT NOT NULL,
        at REAL NOT NULL,
        outcome TEXT NOT NULL,
        rule TEXT NOT NULL,
        reason TEXT NOT NULL,
        channel TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX gate_ledger_at ON gate_ledger(at);
    CREATE INDEX gate_ledger_item ON gate_ledger(item);
    CREATE INDEX gate_ledger_person ON gate_ledger(person, at);
    CREATE TABLE gate_facts (
        kind TEXT NOT NULL,
        ref TEXT NOT NULL,
        state TEXT NOT NULL,
        since REAL NOT NULL,
        at REAL NOT NULL,
        runs INTEGER NOT NULL DEFAULT 1,
        due REAL,
        detail TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (kind, ref)
    );
    CREATE TABLE gate_signals (
        item TEXT NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '',
        at REAL NOT NULL
    );
    CREATE INDEX gate_signals_item ON gate_signals(item);
    """,
    # 7: normalized events (hive.sidecar.presence.observe), append-only, secrets redacted before insert;
    # the unique index is the call-id dedupe (one tool call reported twice is stored once).
    """
    CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        session TEXT NOT NULL,
        harness TEXT NOT NULL DEFAULT '',
        action TEXT NOT NULL,
        tool TEXT NOT NULL DEFAULT '',
        call_id TEXT NOT NULL DEFAULT '',
        path TEXT NOT NULL DEFAULT '',
        command TEXT NOT NULL DEFAULT '',
        exit_code INTEGER,
        cwd TEXT NOT NULL DEFAULT '',
        method TEXT NOT NULL DEFAULT 'hook',
        fidelity TEXT NOT NULL DEFAULT 'observed',
        detail TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX events_session ON events(session, id);
    CREATE UNIQUE INDEX events_call ON events(session, action, call_id, path) WHERE call_id != '';
    """,
    # lessons (hive.sidecar.lessons.store): one gap-free signed log per (machine, log scope); the
    # headers, reviews and tombstones read from it; deletable text blobs by hash; local drafts;
    # FTS5 over text, applicability and tags for recall; local citation counters.
    """
    CREATE TABLE lesson_log (
        author TEXT NOT NULL,
        scope TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        lesson TEXT NOT NULL,
        entry TEXT NOT NULL,
        void TEXT NOT NULL DEFAULT '',
        received_at REAL NOT NULL,
        PRIMARY KEY (author, scope, seq)
    ) WITHOUT ROWID;
    CREATE TABLE lessons (
        id TEXT PRIMARY KEY,
        author TEXT NOT NULL,
        author_person TEXT NOT NULL,
        scope TEXT NOT NULL,
        project TEXT NOT NULL DEFAULT '',
        kind TEXT NOT NULL,
        header TEXT NOT NULL,
        body_hash TEXT NOT NULL,
        supersedes TEXT NOT NULL DEFAULT '',
        created_at INTEGER NOT NULL,
        received_at REAL NOT NULL,
        asked_at REAL NOT NULL,
        state TEXT NOT NULL DEFAULT 'proposed',
        eff_scope TEXT NOT NULL,
        eff_project TEXT NOT NULL DEFAULT '',
        reviewer TEXT NOT NULL DEFAULT '',
        text_hash TEXT NOT NULL DEFAULT '',
        citations INTEGER NOT NULL DEFAULT 0,
        successes INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX lessons_state ON lessons(state, asked_at);
    CREATE INDEX lessons_supersedes ON lessons(supersedes) WHERE supersedes != '';
    CREATE TABLE lesson_reviews (
        lesson TEXT NOT NULL,
        author TEXT NOT NULL,
        sig TEXT NOT NULL,
        reviewer TEXT NOT NULL,
        verdict TEXT NOT NULL,
        scope TEXT NOT NULL,
        project TEXT NOT NULL DEFAULT '',
        text_hash TEXT NOT NULL DEFAULT '',
        note TEXT NOT NULL DEFAULT '',
        at INTEGER NOT NULL,
        PRIMARY KEY (lesson, sig)
    );
    CREATE TABLE lesson_tombstones (
        lesson TEXT PRIMARY KEY,
        person TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        at INTEGER NOT NULL
    );
    CREATE TABLE lesson_blobs (
        hash TEXT PRIMARY KEY,
        lesson TEXT NOT NULL,
        blob TEXT NOT NULL
    );
    CREATE INDEX lesson_blobs_lesson ON lesson_blobs(lesson);
    CREATE TABLE lesson_drafts (
        id TEXT PRIMARY KEY,
        body TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE VIRTUAL TABLE lesson_fts USING fts5(id UNINDEXED, text, applicability, tags);
    """,
    # attachments (hive.sidecar.mail.attachments): where a message's files were saved on this machine,
    # and what each person's saved files weigh, for the quotas and for deleting them with their message.
    """
    ALTER TABLE messages ADD COLUMN files TEXT;
    CREATE TABLE attachments (
        id TEXT PRIMARY KEY,
        person TEXT NOT NULL,
        folder TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        at REAL NOT NULL
    );
    CREATE INDEX attachments_person ON attachments(person, at);
    """,
    # lesson evidence files (hive.sidecar.lessons.recall): the repository paths a lesson's evidence names, kept
    # by triggers on the lessons table, so turn-tier recall finds a session's lessons by file name
    # without reading every header.
    """
    CREATE TABLE lesson_files (
        lesson TEXT NOT NULL,
        path TEXT NOT NULL,
        name TEXT NOT NULL,
        PRIMARY KEY (lesson, path)
    ) WITHOUT ROWID;
    CREATE INDEX lesson_files_name ON lesson_files(name);
    CREATE TRIGGER lesson_files_add AFTER INSERT ON lessons BEGIN
        INSERT OR IGNORE INTO lesson_files (lesson, path, name)
        SELECT NEW.id, p, replace(p, rtrim(p, replace(p, '/', '')), '') FROM (
            SELECT trim(json_extract(e.value, '$.ref')) AS p FROM json_each(NEW.header, '$.evidence') AS e
            WHERE json_extract(e.value, '$.kind') = 'file') WHERE p != '';
    END;
    CREATE TRIGGER lesson_files_drop AFTER DELETE ON lessons BEGIN
        DELETE FROM lesson_files WHERE lesson = OLD.id;
    END;
    INSERT OR IGNORE INTO lesson_files (lesson, path, name)
        SELECT id, p, replace(p, rtrim(p, replace(p, '/', '')), '') FROM (
            SELECT l.id AS id, trim(json_extract(e.value, '$.ref')) AS p
            FROM lessons AS l, json_each(l.header, '$.evidence') AS e
            WHERE json_extract(e.value, '$.kind') = 'file') WHERE p != '';
    """,
    # lesson evidence files by whole path (hive.sidecar.lessons.recall): a file name such as README.md is
    # named by thousands of lessons, a repository path by a few.
    """
    CREATE INDEX lesson_files_path ON lesson_files(path);
    """,
    # how many lessons hold each word (hive.sidecar.lessons.recall drops the commonest words from a search)
    """
    CREATE VIRTUAL TABLE lesson_vocab USING fts5vocab(lesson_fts, row);
    """,
    # when a session's process started (hive.sidecar.base.procs): with its pid it names that process, so
    # the session ends when it exits and a reused pid is not taken for it
    """
    ALTER TABLE sessions ADD COLUMN pid_started REAL;
    """,
    # a message to a person's mailbox sent to several of their machines: the ids of its other
    # copies, so reading one marks the rest read (hive.sidecar.mail.mailboxes)
    """
    CREATE TABLE mail_copies (id TEXT NOT NULL, sibling TEXT NOT NULL, PRIMARY KEY (id, sibling));
    """,
    # the loop guard counts agent messages per pair of sessions, either direction, since the last
    # human input to either (hive.sidecar.mail.guards); reply chains no longer matter
    """
    CREATE TABLE pair_runs (a TEXT NOT NULL, b TEXT NOT NULL, agents INTEGER NOT NULL, at REAL NOT NULL,
                            PRIMARY KEY (a, b));
    CREATE INDEX pair_runs_b ON pair_runs(b);
    DROP TABLE threads;
    DROP TABLE thread_runs;
    """,
    # recall's index holds what recall may show, stemmed (hive.sidecar.lessons.recall): verified lessons only,
    # through the porter stemmer over unicode61, so "migrating" finds "migration" and "retries" "retry";
    # lesson_vocab goes with the old index (recall counts a word's lessons with a bounded MATCH)
    """
    DROP TABLE lesson_vocab;
    DROP TABLE lesson_fts;
    CREATE VIRTUAL TABLE lesson_fts USING fts5(id UNINDEXED, text, applicability, tags,
                                               tokenize = 'porter unicode61');
    INSERT INTO lesson_fts (rowid, id, text, applicability, tags)
        SELECT l.rowid, l.id, coalesce(json_extract(e.blob, '$.text'), json_extract(b.blob, '$.text'), ''),
               coalesce(json_extract(b.blob, '$.applicability'), ''),
               coalesce((SELECT group_concat(t.value, ' ') FROM json_each(l.header, '$.tags') AS t), '')
        FROM lessons l JOIN lesson_blobs b ON b.hash = l.body_hash
        LEFT JOIN lesson_blobs e ON e.hash = l.text_hash AND l.text_hash != ''
        WHERE l.state = 'verified';
    """,
    # lesson evidence files newest first (hive.sidecar.lessons.recall): each row carries its lesson's time, so
    # the newest lessons naming a file are read from the index alone, however many name it
    """
    ALTER TABLE lesson_files ADD COLUMN at INTEGER NOT NULL DEFAULT 0;
    UPDATE lesson_files SET at = (SELECT l.created_at FROM lessons l WHERE l.id = lesson_files.lesson);
    DROP INDEX lesson_files_path;
    CREATE INDEX lesson_files_recent ON lesson_files(path, at);
    DROP TRIGGER lesson_files_add;
    CREATE TRIGGER lesson_files_add AFTER INSERT ON lessons BEGIN
        INSERT OR IGNORE INTO lesson_files (lesson, path, name, at)
        SELECT NEW.id, p, replace(p, rtrim(p, replace(p, '/', '')), ''), NEW.created_at FROM (
            SELECT trim(json_extract(e.value, '$.ref')) AS p FROM json_each(NEW.header, '$.evidence') AS e
            WHERE json_extract(e.value, '$.kind') = 'file') WHERE p != '';
    END;
    """,
    # what an anchor holds for a member's machine that is offline (hive.sidecar.mesh.relay): each
    # frame sealed by the machine that wrote it, kept until it is delivered (a message: until its
    # recipient's answer passes back through the anchor)
    """
    CREATE TABLE custody (
        seq INTEGER PRIMARY KEY,
        peer TEXT NOT NULL,
        origin TEXT NOT NULL,
        kind TEXT NOT NULL,
        frame_id TEXT NOT NULL DEFAULT '',
        sealed TEXT NOT NULL,
        size INTEGER NOT NULL,
        at REAL NOT NULL
    );
    CREATE INDEX custody_peer ON custody(peer, seq);
    CREATE INDEX custody_origin ON custody(origin);
    CREATE UNIQUE INDEX custody_msg ON custody(peer, frame_id) WHERE kind = 'msg';
    """,
    # team history (hive.sidecar.history): what this machine's person archives, waiting for an anchor to
    # take it (history_queue); on an anchor, the entries members archived, one per (owner, message), with
    # an index of their words through the porter stemmer (so "migrating" finds "migration") that keeps no
    # second copy of the text (external content, kept in step by the two triggers)
    """
    CREATE TABLE history_queue (id TEXT PRIMARY KEY, entry TEXT NOT NULL, at REAL NOT NULL);
    CREATE TABLE history (
        seq INTEGER PRIMARY KEY,
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        sender TEXT NOT NULL,
        recipient TEXT NOT NULL,
        sender_person TEXT NOT NULL,
        recipient_person TEXT NOT NULL,
        kind TEXT NOT NULL,
        at REAL NOT NULL,
        reply_to TEXT,
        body TEXT NOT NULL,
        cut INTEGER NOT NULL DEFAULT 0,
        machine TEXT NOT NULL,
        stored_at REAL NOT NULL,
        UNIQUE (owner, id)
    );
    CREATE INDEX history_owner ON history(owner, at);
    CREATE INDEX history_sender ON history(sender_person, at);
    CREATE INDEX history_recipient ON history(recipient_person, at);
    CREATE VIRTUAL TABLE history_fts USING fts5(body, sender, recipient, content = 'history', content_rowid = 'seq',
                                                tokenize = 'porter unicode61');
    CREATE TRIGGER history_fts_add AFTER INSERT ON history BEGIN
        INSERT INTO history_fts (rowid, body, sender, recipient) VALUES (NEW.seq, NEW.body, NEW.sender, NEW.recipient);
    END;
    CREATE TRIGGER history_fts_drop AFTER DELETE ON history BEGIN
        INSERT INTO history_fts (history_fts, rowid, body, sender, recipient)
            VALUES ('delete', OLD.seq, OLD.body, OLD.sender, OLD.recipient);
    END;
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)


def _execute_all(conn: sqlite3.Connection, statements: list[tuple[str, Sequence[Any]]]) -> None:
    for sql, params in statements:
        conn.execute(sql, params)


def _chmod_database_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        candidate = Path(f"{path}{suffix}")
        if candidate.exists():
            os.chmod(candidate, 0o600)


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Bring a database to schema ``target``; returns the version it was at."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise RuntimeError(
            f"the database is at schema {version}, newer than this hive ({SCHEMA_VERSION}); upgrade hive"
        )
    for index in range(version, target):
        conn.executescript(f"BEGIN;\n{MIGRATIONS[index]}\nPRAGMA user_version = {index + 1};\nCOMMIT;")
    return version


async def _on_db_thread(db: aiosqlite.Connection, func: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``func`` with the plain connection on aiosqlite's own thread, in its queue: its private
    ``_execute``, the one way to do several statements in one hop (aiosqlite types it loosely)."""
    execute = cast(Callable[..., Awaitable[T]], db._execute)
    return await execute(func, db._conn)


class Store:
    """The open database. Use :meth:`open`; all writes go through :meth:`write`."""

    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self.db = db
        self.path = path
        self._write_seq = 0
        self._committed_seq = 0
        self._commit_lock = anyio.Lock()

    @classmethod
    async def open(cls, path: Path) -> Store:
        old_umask = os.umask(0o077)
        try:
            db = await aiosqlite.connect(path)
            try:
                await db.execute("PRAGMA journal_mode=WAL")
                await db.execute("PRAGMA synchronous=FULL")
                await db.execute("PRAGMA secure_delete=ON")
                await db.execute("PRAGMA foreign_keys=ON")
                await db.execute("PRAGMA busy_timeout=5000")
                db.row_factory = aiosqlite.Row
                await _on_db_thread(db, migrate)
            except BaseException:
                await db.close()  # its worker thread would otherwise keep the process alive
                raise
        finally:
            os.umask(old_umask)
        _chmod_database_files(path)
        return cls(db, path)

    async def close(self) -> None:
        try:
            await self.db.commit()  # what was staged and not yet committed
        finally:
            await self.db.close()

    # One hop to the database thread per read: aiosqlite's cursor takes three (execute, fetch,
    # close), each waiting for this event loop to turn, which a message's path paid several times.
    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[aiosqlite.Row]:
        return await self.run(lambda conn: conn.execute(sql, params).fetchall())

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> aiosqlite.Row | None:
        return await self.run(lambda conn: conn.execute(sql, params).fetchone())

    async def write(self, statements: Iterable[tuple[str, Sequence[Any]]]) -> None:
        """Run statements and return once they are committed to disk."""
        await self.stage(statements)
        self._write_seq += 1
        await self._commit(self._write_seq)

    async def stage(self, statements: Iterable[tuple[str, Sequence[Any]]]) -> None:
        """Run statements now, in one hop to the database thread, and leave them to the next
        commit (:meth:`write`, ``write([])`` for none). Later statements and reads on this
        connection see them at once; a crash before that commit loses them."""
        batch = list(statements)
        if batch:
            await self.run(lambda conn: _execute_all(conn, batch))

    async def _commit(self, seq: int) -> None:
        async with self._commit_lock:
            if self._committed_seq >= seq:
                return  # a commit that started after our statements already covered them
            target = self._write_seq
            await self.db.commit()
            self._committed_seq = target

    async def run(self, func: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``func`` with the plain connection on the database's own thread: many statements
        in one hop instead of one round trip each. Commit afterwards with ``write([])``."""
        return await _on_db_thread(self.db, func)

    async def get_kv(self, key: str) -> str | None:
        row = await self.fetchone("SELECT value FROM kv WHERE key = ?", (key,))
        return None if row is None else row[0]

    async def set_kv(self, key: str, value: str) -> None:
        await self.write([("INSERT OR REPLACE INTO kv(key, value) VALUES (?, ?)", (key, value))])
