"""Who may use the service: users with argon2 password hashes, the session secret, login rate limits, CSRF tokens.

Sessions live on the server: Starlette's signed cookie (itsdangerous, HttpOnly, SameSite=Strict) holds
a random token, the `sessions` table says whose it is, and logging out or a new password deletes the
rows, so a copied cookie stops working; the cookie also holds a CSRF token that every POST must echo.
Failed logins slow down the next try for the same (address, user name) pair, so a stranger elsewhere
cannot lock a user out; at most two argon2 checks run at once.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import stat
import threading
import time
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from mlx_edge.errors import ServeError
from mlx_edge.serve.db import Database

SECRET_NAME = "secret.key"
SESSION_HOURS = 12
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
    """A new password; the user's open sessions end."""
    check_password(password)
    if not db.set_password(name, hash_password(password), secrets.token_urlsafe(16)):
        raise ServeError(f"there is no user {name!r}", "add it with --add-user")
    db.end_sessions(user_id=db.user(name=name)["id"])


def authenticate(db: Database, name: str, password: str) -> dict | None:
    user = db.user(name=name)
    if user is None:
        verify_password(_DUMMY_HASH, password)  # the same work for an unknown name: no timing hint of who exists
        return None
    return user if verify_password(user["hash"], password) else None


_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


def start_session(db: Database, session: dict, user: dict) -> None:
    """A fresh session (and CSRF token) for a user who just logged in."""
    session.clear()
    token = secrets.token_urlsafe(32)
    db.add_session(token, user["id"], max_age_s=SESSION_HOURS * 3600)
    session.update(sid=token, key=user["session_key"])


def end_session(db: Database, session: dict) -> None:
    if isinstance(token := session.get("sid"), str):
        db.end_sessions(token=token)
    session.clear()


def session_user(db: Database, session: dict, max_age_s: float = SESSION_HOURS * 3600) -> dict | None:
    """The user a session belongs to, or None (no session, logged out, expired, a deleted user, a new password)."""
    token, key = session.get("sid"), session.get("key")
    if not isinstance(token, str) or not isinstance(key, str):
        return None
    row = db.session(token, max_age_s)
    user = db.user(id_=row["user_id"]) if row else None
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


class LoginGuard:
    """Failed logins slow down the next try for the same (client address, user name) pair.

    The first `free` failures cost nothing; each one after waits twice as long as the one before
    (1 s, 2 s, 4 s, ... up to `max_delay`), so guessing gets slow while a stranger elsewhere cannot lock
    a user out. A pair is forgotten `forget_after` seconds after its last failure. `reserve` and `done`
    bracket one check: a pair has one check in flight at a time (a burst of concurrent guesses is
    refused, not raced past the count).
    """

    def __init__(self, free: int = 3, max_delay: float = 60.0, forget_after: float = 900.0, max_pairs: int = 10_000):
        self.free, self.max_delay, self.forget_after, self.max_pairs = free, max_delay, forget_after, max_pairs
        self._failures: dict[tuple[str, str], tuple[int, float]] = {}  # pair -> (count, time of the last one)
        self._in_flight: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def _delay(self, count: int) -> float:
        return 0.0 if count < self.free else min(self.max_delay, 2.0 ** (count - self.free))

    def reserve(self, address: str, name: str) -> float:
        """0: go ahead (the pair is now in flight until `done`); else the seconds to wait."""
        pair, now = (address, name), time.monotonic()
        with self._lock:
            self._forget(now)
            if pair in self._in_flight:
                return 1.0
            count, last = self._failures.get(pair, (0, now))
            wait = last + self._delay(count) - now if count else 0.0
            if wait > 0:
                return wait
            self._in_flight.add(pair)
            return 0.0

    def done(self, address: str, name: str, ok: bool) -> None:
        pair, now = (address, name), time.monotonic()
        with self._lock:
            self._in_flight.discard(pair)
            if ok:
                self._failures.pop(pair, None)
            else:
                self._failures[pair] = (self._failures.get(pair, (0, now))[0] + 1, now)

    def _forget(self, now: float) -> None:
        stale = [p for p, (_, last) in self._failures.items() if now - last > self.forget_after]
        for pair in stale:
            del self._failures[pair]
        while len(self._failures) > self.max_pairs:  # a flood of names: drop the oldest pairs first
            del self._failures[min(self._failures, key=lambda p: self._failures[p][1])]
