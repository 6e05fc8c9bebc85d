"""Who may use the service: users with argon2 password hashes, the session secret, login rate limits, CSRF tokens.

Sessions are Starlette's signed cookies (itsdangerous, HttpOnly, SameSite=Strict) holding the user id,
the user's session key (a new password issues a new key, which ends every older session) and a CSRF
token that every POST must echo.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import stat
import threading
import time
from collections import deque
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from mlx_edge.errors import ServeError
from mlx_edge.serve.db import Database

SECRET_NAME = "secret.key"
MIN_PASSWORD = 8
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_hasher = PasswordHasher()  # argon2id with the library's current defaults (its own parameters live in each hash)


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(hash_: str, password: str) -> bool:
    try:
        return _hasher.verify(hash_, password)
    except (VerificationError, InvalidHashError):
        return False


def check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD:
        raise ServeError(f"the password is {len(password)} characters long", f"use at least {MIN_PASSWORD}")


def check_name(name: str) -> None:
    if not NAME_PATTERN.fullmatch(name):
        raise ServeError(f"user name {name!r} is not allowed", "use 1-64 letters, digits, '_', '.', '@' or '-'")


def add_user(db: Database, name: str, password: str, admin: bool = False) -> int:
    """A new user (an admin sees and manages every user's jobs); refuses a taken name or a short password."""
    check_name(name)
    check_password(password)
    if db.user(name=name) is not None:
        raise ServeError(f"user {name!r} exists already", "use --reset-password to give it a new password")
    return db.add_user(name, hash_password(password), secrets.token_urlsafe(16), admin=admin)


def reset_password(db: Database, name: str, password: str) -> None:
    """A new password (and session key: the user's open sessions end)."""
    check_password(password)
    if not db.set_password(name, hash_password(password), secrets.token_urlsafe(16)):
        raise ServeError(f"there is no user {name!r}", "add it with --add-user")


def authenticate(db: Database, name: str, password: str) -> dict | None:
    user = db.user(name=name)
    if user is None:
        verify_password(_DUMMY_HASH, password)  # the same work for an unknown name: no timing hint of who exists
        return None
    return user if verify_password(user["hash"], password) else None


_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


def session_user(db: Database, session: dict) -> dict | None:
    """The user a session belongs to, or None (no session, a deleted user, a password changed since)."""
    uid, key = session.get("uid"), session.get("key")
    if not isinstance(uid, int) or not isinstance(key, str):
        return None
    user = db.user(id_=uid)
    if user is None or not hmac.compare_digest(user["session_key"], key):
        return None
    return user


def csrf_token(session: dict) -> str:
    """The session's CSRF token, made on first use (the login form has one before anyone logs in)."""
    if not isinstance(session.get("csrf"), str):
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def csrf_ok(session: dict, given: str | None) -> bool:
    expected = session.get("csrf")
    return isinstance(expected, str) and isinstance(given, str) and hmac.compare_digest(expected, given)


def secret_key(workdir: Path) -> str:
    """The cookie-signing secret, made once in the workdir (mode 0600); a looser mode is tightened."""
    path = Path(workdir) / SECRET_NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            os.chmod(path, 0o600)
        value = path.read_text(encoding="ascii").strip()
        if len(value) < 32:
            raise ServeError(f"{path} holds no usable secret", "delete it: a new one is made (sessions end)") from None
        return value
    value = secrets.token_urlsafe(48)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(value + "\n")
    return value


class RateLimiter:
    """At most `limit` failures per `window` seconds for each key (a client address, a user name)."""

    def __init__(self, limit: int = 5, window: float = 60.0):
        self.limit, self.window = limit, window
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def blocked(self, *keys: str) -> float:
        """Seconds to wait before any of `keys` may try again (0: go ahead)."""
        now = time.monotonic()
        wait = 0.0
        with self._lock:
            for key in keys:
                times = self._failures.get(key)
                while times and now - times[0] > self.window:
                    times.popleft()
                if times and len(times) >= self.limit:
                    wait = max(wait, self.window - (now - times[0]))
        return wait

    def failed(self, *keys: str) -> None:
        now = time.monotonic()
        with self._lock:
            for key in keys:
                self._failures.setdefault(key, deque()).append(now)
