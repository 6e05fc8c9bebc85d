"""The service's one SQLite file in the workdir: users, uploads, jobs, their runs and metrics.

The server and its worker process both write here (the worker: progress, stages and metrics; the
server: everything else), so the file is in WAL mode and every call opens its own short connection.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DB_NAME = "mlx-edge-serve.sqlite3"

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, hash TEXT NOT NULL,
    session_key TEXT NOT NULL, created REAL NOT NULL, admin INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS uploads (
    id TEXT PRIMARY KEY, user_id INTEGER NOT NULL, name TEXT NOT NULL, path TEXT NOT NULL,
    format TEXT NOT NULL, rows INTEGER NOT NULL, labels TEXT NOT NULL, bytes INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, kind TEXT NOT NULL, title TEXT NOT NULL,
    params TEXT NOT NULL, status TEXT NOT NULL, stage TEXT, stages TEXT NOT NULL DEFAULT '{}',
    progress REAL NOT NULL DEFAULT 0, detail TEXT, device TEXT, speed TEXT,
    peak_rss_mb REAL, peak_mlx_mb REAL, error TEXT, attempt INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL, started REAL, finished REAL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, pid INTEGER,
    started REAL NOT NULL, finished REAL, outcome TEXT);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL, attempt INTEGER NOT NULL,
    stage TEXT NOT NULL, name TEXT NOT NULL, step REAL NOT NULL, value REAL NOT NULL);
CREATE INDEX IF NOT EXISTS metrics_by_job ON metrics (job_id, id);
CREATE TABLE IF NOT EXISTS sessions (
    token TEXT PRIMARY KEY, user_id INTEGER NOT NULL, created REAL NOT NULL);
"""

# Columns a job update may set (names are put into SQL, so only these).
JOB_FIELDS = {
    "status",
    "stage",
    "stages",
    "progress",
    "detail",
    "device",
    "speed",
    "peak_rss_mb",
    "peak_mlx_mb",
    "error",
    "attempt",
    "started",
    "finished",
}
STATUSES = ("queued", "running", "done", "failed", "cancelled", "interrupted")
MAX_ID = 2**63 - 1  # SQLite's INTEGER: a larger id in a URL is no job, not an overflow
FINAL = ("done", "failed", "cancelled", "interrupted")


class Database:
    def __init__(self, path: Path):
        self.path = Path(path)

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)  # autocommit; BEGIN where needed
        conn.row_factory = sqlite3.Row
        try:
            yield conn
        finally:
            conn.close()

    def create(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")  # the worker writes progress while pages read
            conn.executescript(SCHEMA)
            columns = {row["name"] for row in conn.execute("PRAGMA table_info(users)")}
            if "admin" not in columns:  # a workdir from before roles: its first user is the admin serve made
                conn.execute("ALTER TABLE users ADD COLUMN admin INTEGER NOT NULL DEFAULT 0")
                conn.execute("UPDATE users SET admin = 1 WHERE id = (SELECT MIN(id) FROM users)")

    # users
    def user_count(self) -> int:
        with self.connect() as conn:
            return conn.execute("SELECT COUNT(*) FROM users").fetchone()[0]

    def add_user(self, name: str, hash_: str, session_key: str, admin: bool = False) -> int:
        with self.connect() as conn:
            cur = conn.execute(
                "INSERT INTO users (name, hash, session_key, created, admin) VALUES (?, ?, ?, ?, ?)",
                (name, hash_, session_key, time.time(), int(admin)),
            )
            return cur.lastrowid

    def user(self, *, name: str | None = None, id_: int | None = None) -> dict | None:
        column, value = ("name", name) if name is not None else ("id", id_)
        with self.connect() as conn:
            row = conn.execute(f"SELECT * FROM users WHERE {column} = ?", (value,)).fetchone()
        return dict(row) if row else None

    def set_password(self, name: str, hash_: str, session_key: str) -> bool:
        with self.connect() as conn:
            cur = conn.execute("UPDATE users SET hash = ?, session_key = ? WHERE name = ?", (hash_, session_key, name))
            return cur.rowcount == 1

    # sessions: the cookie carries only a token; logging out or a new password deletes the rows
    def add_session(self, token: str, user_id: int, max_age_s: float) -> None:
        """A new session; expired ones are cleared here, at login, not on every request."""
        now = time.time()
        with self.connect() as conn:
            conn.execute("DELETE FROM sessions WHERE created < ?", (now - max_age_s,))
            conn.execute("INSERT INTO sessions (token, user_id, created) VALUES (?, ?, ?)", (token, user_id, now))

    def session(self, token: str, max_age_s: float) -> dict | None:
        with self.connect() as conn:
            row = conn.execute(
                "SELECT * FROM sessions WHERE token = ? AND created >= ?", (token, time.time() - max_age_s)
            ).fetchone()
        return dict(row) if row else None

    def end_sessions(self, *, token: str | None = None, user_id: int | None = None) -> None:
        with self.connect() as conn:
            if token is not None:
                conn.execute("DELETE FROM sessions WHERE token = ?", (token,))
            if user_id is not None:
                conn.execute("DELETE FROM sessions WHERE user_id = ?", (user_id,))

    # uploads
    def add_upload(self, **row: Any) -> None:
        row = {**row, "labels": json.dumps(row["labels"]), "created": time.time()}
        with self.connect() as conn:
            conn.execute(
                f"INSERT INTO uploads ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values())
            )

    def upload_bytes(self, user_id: int) -> int:
        with self.connect() as conn:
            return conn.execute("SELECT COALESCE(SUM(bytes), 0) FROM uploads WHERE user_id = ?", (user_id,)).fetchone()[
                0
            ]

    def drop_uploads_except(self, names: set[str]) -> None:
        """Delete the rows of uploads whose file name (<uuid>.<format>) is not in `names`."""
        with self.connect() as conn:
            gone = [
                (r["id"],) for r in conn.execute("SELECT id, path FROM uploads") if Path(r["path"]).name not in names
            ]
            conn.executemany("DELETE FROM uploads WHERE id = ?", gone)

    def upload(self, upload_id: str) -> dict | None:
        with self.connect() as conn:
            row = conn.execute("SELECT * FROM uploads WHERE id = ?", (upload_id,)).fetchone()
        return None if row is None else {**dict(row), "labels": json.loads(row["labels"])}

    # jobs
    def add_job(self, *, user_id: int, kind: str, title: str, params: dict) -> int:
        with self.connect() as conn:
            cur = conn.execute(
                "INSERT INTO jobs (user_id, kind, title, params, status, created) VALUES (?, ?, ?, ?, 'queued', ?)",
                (user_id, kind, title, json.dumps(params), time.time()),
            )
            return cur.lastrowid

    def job(self, job_id: int) -> dict | None:
        if not 0 < job_id <= MAX_ID:
            return None
        with self.connect() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else _job(row)

    def jobs(self, *statuses: str, user_id: int | None = None) -> list[dict]:
        """Every job (the worker, an admin), or only `user_id`'s; with statuses, oldest first."""
        where, args = [], []
        if statuses:
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            args += statuses
        if user_id is not None:
            where.append("user_id = ?")
            args.append(user_id)
        sql = "SELECT * FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "")
        sql += " ORDER BY id" if statuses else " ORDER BY id DESC"
        with self.connect() as conn:
            return [_job(r) for r in conn.execute(sql, args).fetchall()]

    def update_job(self, job_id: int, *, only_if: tuple[str, ...] = (), **fields: Any) -> bool:
        """Set `fields`; with `only_if`, only while the job's status is one of those (a compare-and-set)."""
        unknown = set(fields) - JOB_FIELDS
        if unknown:
            raise ValueError(f"not job fields: {sorted(unknown)}")
        if "stages" in fields:
            fields["stages"] = json.dumps(fields["stages"])
        sql = f"UPDATE jobs SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?"
        args: tuple = (*fields.values(), job_id)
        if only_if:
            sql += f" AND status IN ({', '.join('?' * len(only_if))})"
            args += only_if
        with self.connect() as conn:
            return conn.execute(sql, args).rowcount == 1

    # runs: one row per worker process a job had (a resumed job has several)
    def start_run(self, job_id: int, attempt: int, pid: int) -> int:
        with self.connect() as conn:
            cur = conn.execute(
                "INSERT INTO runs (job_id, attempt, pid, started) VALUES (?, ?, ?, ?)",
                (job_id, attempt, pid, time.time()),
            )
            return cur.lastrowid

    def finish_run(self, run_id: int, outcome: str) -> None:
        with self.connect() as conn:
            conn.execute("UPDATE runs SET finished = ?, outcome = ? WHERE id = ?", (time.time(), outcome, run_id))

    def end_open_runs(self, outcome: str) -> None:
        with self.connect() as conn:
            conn.execute("UPDATE runs SET finished = ?, outcome = ? WHERE finished IS NULL", (time.time(), outcome))

    def runs(self, job_id: int | None = None) -> list[dict]:
        with self.connect() as conn:
            if job_id is None:
                rows = conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
            else:
                rows = conn.execute("SELECT * FROM runs WHERE job_id = ? ORDER BY id", (job_id,)).fetchall()
        return [dict(r) for r in rows]

    # metrics
    def add_metrics(self, job_id: int, attempt: int, rows: list[tuple[str, str, float, float]]) -> None:
        """rows: (stage, name, step, value)."""
        with self.connect() as conn:
            conn.executemany(
                "INSERT INTO metrics (job_id, attempt, stage, name, step, value) VALUES (?, ?, ?, ?, ?, ?)",
                [(job_id, attempt, *row) for row in rows],
            )

    def metrics(self, job_id: int, after: int = 0) -> list[dict]:
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT id, attempt, stage, name, step, value FROM metrics WHERE job_id = ? AND id > ? ORDER BY id",
                (job_id, after),
            ).fetchall()
        return [dict(r) for r in rows]


def _job(row: sqlite3.Row) -> dict:
    job = dict(row)
    job["params"], job["stages"] = json.loads(job["params"]), json.loads(job["stages"] or "{}")
    return job
