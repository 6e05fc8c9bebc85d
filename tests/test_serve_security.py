"""The security model of `mlx-edge serve`, route by route: no session → redirect or 401; no CSRF token →
403; wrong passwords → 429 after five a minute; upload names that are paths refused and nothing written
outside the workdir; uploads typed by content with the CLI's own messages; loopback only by default;
no default password. In-process (Starlette's TestClient) except where the command line is the subject."""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.routing import Mount
from starlette.testclient import TestClient

from mlx_edge.cli import main
from mlx_edge.errors import ServeError
from mlx_edge.serve.app import check_bind, create_app
from mlx_edge.serve.auth import LoginGuard, add_user, reset_password
from mlx_edge.serve.db import DB_NAME, Database
from tests.helpers.browser import csrf_of, free_port
from tests.helpers.cli import assert_one_line_error
from tests.helpers.jobs import job_pages

PASSWORD = "a long enough password"
ROWS = b'{"text": "pay the bill", "label": "finance"}\n{"text": "see the dentist", "label": "health"}\n' * 10


@pytest.fixture
def app(tmp_path):
    app = create_app(tmp_path / "w", run_jobs=False, max_upload_mb=0.01)
    add_user(app.state.db, "admin", PASSWORD)
    return app


def logged_in(app) -> tuple[TestClient, str]:
    client = TestClient(app)
    token = csrf_of(client.get("/login").text)
    response = client.post(
        "/login", data={"csrf_token": token, "username": "admin", "password": PASSWORD}, follow_redirects=False
    )
    assert response.status_code == 303
    return client, csrf_of(client.get("/jobs/new").text)


def routes(app) -> list[tuple[str, str]]:
    """(method, path) of every route but the public two, path parameters filled in."""
    out = []
    for route in app.routes:
        if isinstance(route, Mount) or route.path == "/login":
            continue
        for method in sorted(route.methods - {"HEAD"}):
            out.append((method, re.sub(r"\{[^}]+\}", "1", route.path)))
    return out


def test_every_route_needs_a_session(app):
    client = TestClient(app)
    found = routes(app)
    assert ("GET", "/jobs/1/download") in found and ("GET", "/jobs/1/events") in found and ("POST", "/jobs") in found
    assert ("GET", "/jobs/1/download/1") in found  # one bundle of the ladder
    for method, path in found:
        response = client.request(method, path, follow_redirects=False)
        is_page = (
            method == "GET"
            and not path.startswith("/api/")
            and not path.endswith(("/events", "/download", "/log"))
            and "/download/" not in path
        )
        if is_page:
            assert (response.status_code, response.headers["location"]) == (303, "/login"), (method, path)
        else:
            assert response.status_code == 401, (method, path, response.status_code)
    # a cookie signed with another secret is no session either
    client.cookies.set("mlx_edge_session", "eyJ1aWQiOiAxfQ==.forged.signature")
    assert client.get("/api/jobs").status_code == 401


def test_every_post_needs_the_csrf_token(app):
    client, token = logged_in(app)
    posts = [path for method, path in routes(app) if method == "POST"]
    assert set(posts) >= {"/jobs", "/jobs/1/cancel", "/jobs/1/resume", "/logout"}
    for path in posts:
        for data in ({}, {"csrf_token": "not-the-token"}):
            response = client.post(path, data=data, follow_redirects=False)
            assert response.status_code == 403, (path, data, response.status_code)
    assert client.get("/api/jobs").status_code == 200  # still logged in: the refused logout did nothing
    # the login form has its token too
    fresh = TestClient(app)
    fresh.get("/login")
    refused = fresh.post("/login", data={"username": "admin", "password": PASSWORD}, follow_redirects=False)
    assert refused.status_code == 403


def test_session_cookie_flags_secret_and_hash(app, tmp_path):
    client = TestClient(app)
    cookie = client.get("/login").headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert stat.S_IMODE((tmp_path / "w" / "secret.key").stat().st_mode) == 0o600
    user = Database(tmp_path / "w" / DB_NAME).user(name="admin")
    assert user["hash"].startswith("$argon2id$") and PASSWORD not in user["hash"]
    headers = client.get("/login").headers
    assert headers["x-frame-options"] == "DENY" and "script-src 'self'" in headers["content-security-policy"]


def test_failed_logins_slow_the_pair_down_not_the_user(app):
    client = TestClient(app)
    token = csrf_of(client.get("/login").text)
    for _ in range(3):
        wrong = client.post("/login", data={"csrf_token": token, "username": "admin", "password": "guess"})
        assert wrong.status_code == 401 and "wrong user name or password" in wrong.text
    blocked = client.post("/login", data={"csrf_token": token, "username": "admin", "password": PASSWORD})
    assert blocked.status_code == 429 and "too many failed logins: wait 1 s" in blocked.text  # even the right one
    # the user at another address logs in at once: a stranger's guesses cannot lock a user out
    other = TestClient(app, client=("10.0.0.9", 5000))
    token_other = csrf_of(other.get("/login").text)
    response = other.post(
        "/login", data={"csrf_token": token_other, "username": "admin", "password": PASSWORD}, follow_redirects=False
    )
    assert response.status_code == 303
    time.sleep(1.05)  # the delay has passed: the pair may try again
    response = client.post(
        "/login", data={"csrf_token": token, "username": "admin", "password": PASSWORD}, follow_redirects=False
    )
    assert response.status_code == 303


def test_five_guesses_from_elsewhere_leave_the_admin_in(app):
    stranger = TestClient(app, client=("10.0.0.66", 4000))
    token = csrf_of(stranger.get("/login").text)
    codes = [
        stranger.post("/login", data={"csrf_token": token, "username": "admin", "password": f"guess {i}"}).status_code
        for i in range(5)
    ]
    assert codes == [401, 401, 401, 429, 429]
    logged_in(app)  # the admin's own address: 303 at once


def test_the_login_guard_grows_its_delay_and_takes_one_check_at_a_time():
    guard = LoginGuard(free=2, max_delay=8.0, forget_after=900.0)
    delays = []
    for _ in range(7):
        assert guard.reserve("a", "n") == 0.0
        guard.done("a", "n", ok=False)
        count, last = guard._failures[("a", "n")]
        guard._failures[("a", "n")] = (count, last - 1000.0 + 900.0)  # step past the delay, not past forgetting
        delays.append(guard._delay(count))
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    guard._failures[("a", "n")] = (5, time.monotonic())
    assert 7.5 < guard.reserve("a", "n") <= 8.0 and guard.reserve("b", "n") == 0.0
    # a burst of concurrent checks for one pair: one goes ahead, the rest wait
    results = []
    threads = [threading.Thread(target=lambda: results.append(guard.reserve("c", "n"))) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results)[0] == 0.0 and all(r > 0 for r in sorted(results)[1:])
    guard.done("c", "n", ok=True)
    assert guard.reserve("c", "n") == 0.0
    # a pair is forgotten a while after its last failure
    guard._failures[("d", "n")] = (9, time.monotonic() - 901.0)
    assert guard.reserve("d", "n") == 0.0 and ("d", "n") not in guard._failures


def test_logout_ends_the_session_on_the_server(app):
    client, token = logged_in(app)
    copied = TestClient(app)
    copied.cookies.set("mlx_edge_session", client.cookies.get("mlx_edge_session"))
    assert copied.get("/api/jobs").status_code == 200
    assert client.post("/logout", data={"csrf_token": token}, follow_redirects=False).status_code == 303
    assert copied.get("/api/jobs").status_code == 401  # the copy of the cookie died with the logout


def test_posts_over_their_limit_are_refused_before_reading(app):
    client = TestClient(app)
    token = csrf_of(client.get("/login").text)
    big = {"csrf_token": token, "username": "admin", "password": "x" * 200_000}
    assert client.post("/login", data=big).status_code == 413
    chunked = client.post("/login", content=(b"a" * 10 for _ in range(3)), headers={"content-type": "text/plain"})
    assert chunked.status_code == 411
    client, token = logged_in(app)  # nothing of the above counted as a failed login
    upload = client.post("/jobs", data={"csrf_token": token, "kind": "distill", "pad": "x" * 1_100_000})
    assert upload.status_code == 413 and "the upload is over 0.01 MB per file" in upload.text


def test_secure_cookies_behind_tls(tmp_path):
    app = create_app(tmp_path / "w", run_jobs=False, secure_cookies=True)
    response = TestClient(app, base_url="https://127.0.0.1").get("/login")
    assert "secure" in response.headers["set-cookie"].lower()
    plain = TestClient(create_app(tmp_path / "v", run_jobs=False)).get("/login")
    assert "secure" not in plain.headers["set-cookie"].lower()


def test_a_new_password_ends_open_sessions(app):
    client, _ = logged_in(app)
    assert client.get("/api/jobs").status_code == 200
    reset_password(app.state.db, "admin", "another long password")
    assert client.get("/api/jobs").status_code == 401


def upload(client, token, name: str, content: bytes):
    form = {"csrf_token": token, "kind": "distill", "data": "upload", "teacher": "multilingual-e5-small"}
    return client.post("/jobs", data=form, files={"train_file": (name, content)}, follow_redirects=False)


def test_upload_names_that_are_paths_are_refused(app, tmp_path):
    client, token = logged_in(app)
    before = sorted(p for p in tmp_path.rglob("*"))
    for name in ("../../x.jsonl", "..\\..\\x.jsonl", "a/b.jsonl", "..", "/etc/passwd"):
        response = upload(client, token, name, ROWS)
        assert response.status_code == 400, name
        assert "is not a plain file name" in response.text, name
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written anywhere
    assert app.state.db.jobs() == []


def test_uploads_are_typed_by_content_and_get_the_cli_messages(app, tmp_path):
    client, token = logged_in(app)
    ok = upload(client, token, "rows.csv", ROWS)  # JSON lines under a .csv name: read as what they are
    assert ok.status_code == 303, ok.text
    (job,) = app.state.db.jobs()
    (stored,) = job["params"]["uploads"].values()
    assert re.fullmatch(r"[0-9a-f]{32}\.jsonl", stored.rsplit("/", 1)[1]) and stored.startswith(str(tmp_path / "w"))

    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"text,label\npay the bill,finance\nsee, the dentist,health\n")
    cli = CliRunner().invoke(main, ["data", str(bad)])
    assert cli.exit_code == 3
    cli_line = cli.output.strip().splitlines()[-1].removeprefix("Error: ").replace(str(bad), "bad.csv")
    page = upload(client, token, "bad.csv", bad.read_bytes())
    assert page.status_code == 400
    shown = re.search(r'id="form-error">([^<]+)<', page.text).group(1)
    assert shown.replace("&#34;", '"').replace("&#39;", "'") == cli_line

    too_big = upload(client, token, "big.jsonl", ROWS * 100)  # the app's limit here is 0.01 MB
    assert too_big.status_code == 400 and "over the upload limit of 0.01 MB" in too_big.text
    binary = upload(client, token, "rows.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    assert binary.status_code == 400 and "not a text file" in binary.text
    assert len(app.state.db.jobs()) == 1 and len(list((tmp_path / "w" / "uploads").iterdir())) == 1


def test_loopback_by_default_and_remote_only_when_told(tmp_path):
    for host in ("0.0.0.0", "192.168.1.20", "::", "example.com"):
        with pytest.raises(ServeError, match="--allow-remote"):
            check_bind(host, 0, allow_remote=False)
    for host in ("127.0.0.1", "localhost", "::1"):
        check_bind(host, 0, allow_remote=False)
    check_bind("0.0.0.0", 0, allow_remote=True)
    serve_command = next(c for c in main.commands.values() if c.name == "serve")
    assert next(p for p in serve_command.params if p.name == "host").default == "127.0.0.1"
    result = CliRunner().invoke(main, ["serve", "--workdir", str(tmp_path / "w"), "--host", "0.0.0.0"])
    assert_one_line_error(result, "--allow-remote")
    assert result.exit_code == ServeError.exit_code
    assert Database(tmp_path / "w" / DB_NAME).user_count() == 0  # refused before any user was made
    # a host name a browser on another machine would send is refused too (DNS rebinding)
    app = create_app(tmp_path / "h", run_jobs=False, allowed_hosts=["127.0.0.1", "localhost"])
    assert TestClient(app, base_url="http://evil.example").get("/login").status_code == 400


def test_no_default_password(tmp_path, monkeypatch):
    monkeypatch.delenv("MLX_EDGE_ADMIN_PASSWORD", raising=False)
    result = CliRunner().invoke(main, ["serve", "--workdir", str(tmp_path / "w"), "--port", str(free_port())])
    assert_one_line_error(result, "no password for the first admin")
    assert result.exit_code == ServeError.exit_code
    short = tmp_path / "pw"
    short.write_text("short\n")
    result = CliRunner().invoke(
        main, ["serve", "--workdir", str(tmp_path / "w"), "--add-user", "bob", "--password-file", str(short)]
    )
    assert_one_line_error(result, "use at least 8")
    assert Database(tmp_path / "w" / DB_NAME).user_count() == 0


def test_users_from_the_shell(tmp_path):
    from mlx_edge.serve.auth import authenticate

    workdir, secret = tmp_path / "w", tmp_path / "pw"
    secret.write_text("bobs long password\n")
    umask = os.umask(0o022)
    try:
        added = CliRunner().invoke(
            main, ["serve", "--workdir", str(workdir), "--add-user", "bob", "--password-file", str(secret)]
        )
    finally:
        os.umask(umask)  # serve sets the process's umask to 077: give pytest its own back
    assert added.exit_code == 0 and "user bob added" in added.output
    # password hashes and sessions: this user's alone, whatever the shell's umask was
    assert stat.S_IMODE(workdir.stat().st_mode) == 0o700
    assert stat.S_IMODE((workdir / DB_NAME).stat().st_mode) == 0o600
    db = Database(workdir / DB_NAME)
    assert authenticate(db, "bob", "bobs long password") and not authenticate(db, "bob", "bobs long passwor")
    again = CliRunner().invoke(
        main, ["serve", "--workdir", str(workdir), "--add-user", "bob", "--password-file", str(secret)]
    )
    assert_one_line_error(again, "exists already")
    secret.write_text("a brand new password\n")
    args = ["serve", "--workdir", str(workdir), "--reset-password", "bob", "--password-file", str(secret)]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert authenticate(db, "bob", "a brand new password") and not authenticate(db, "bob", "bobs long password")
    args[4] = "nobody"
    assert_one_line_error(CliRunner().invoke(main, args), "there is no user 'nobody'")


def login(app, name: str, password: str = PASSWORD) -> tuple[TestClient, str]:
    client = TestClient(app)
    token = csrf_of(client.get("/login").text)
    response = client.post(
        "/login", data={"csrf_token": token, "username": name, "password": password}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    return client, csrf_of(client.get("/jobs/new").text)


@pytest.fixture
def two_users(tmp_path):
    """An admin (made as `serve`'s first start makes it), a user `alice` and a user `bob`, each with a job."""
    app = create_app(tmp_path / "w", run_jobs=False, max_upload_mb=0.01)
    ids = {
        "root": add_user(app.state.db, "root", PASSWORD, admin=True),
        "alice": add_user(app.state.db, "alice", PASSWORD),
        "bob": add_user(app.state.db, "bob", PASSWORD),
    }
    upload_path = str(tmp_path / "w" / "uploads" / "secret.jsonl")
    jobs = {
        name: app.state.db.add_job(
            user_id=uid,
            kind="distill",
            title=f"job of {name}",
            params={"data": "upload", "uploads": {"train": upload_path}},
        )
        for name, uid in ids.items()
    }
    app.state.db.update_job(jobs["alice"], status="failed", error="boom")  # resumable
    return app, jobs


def test_a_user_cannot_see_or_touch_another_users_job(two_users):
    app, jobs = two_users
    bob, token = login(app, "bob")
    job = jobs["alice"]
    for path in [*job_pages(job), f"/jobs/{job}/events"]:
        response = bob.get(path)
        assert response.status_code == 404, (path, response.status_code)
        assert "job of alice" not in response.text, path
    for action in ("cancel", "resume"):
        response = bob.post(f"/jobs/{job}/{action}", data={"csrf_token": token}, follow_redirects=False)
        assert response.status_code == 404, action
    assert app.state.db.job(job)["status"] == "failed"  # bob's resume did nothing
    listed = bob.get("/api/jobs").json()
    assert [j["title"] for j in listed] == ["job of bob"]
    page = bob.get("/").text
    assert "job of bob" in page and "job of alice" not in page and "job of root" not in page
    assert "alice" not in bob.get("/runs").text
    # the owner can: the same resume moves her job back to the queue
    alice, alice_token = login(app, "alice")
    assert alice.get(f"/api/jobs/{job}").status_code == 200
    response = alice.post(f"/jobs/{job}/resume", data={"csrf_token": alice_token}, follow_redirects=False)
    assert response.status_code == 303 and app.state.db.job(job)["status"] == "queued"


def test_the_admin_sees_every_job(two_users):
    app, jobs = two_users
    root, _ = login(app, "root")
    assert sorted(j["title"] for j in root.get("/api/jobs").json()) == ["job of alice", "job of bob", "job of root"]
    assert root.get(f"/jobs/{jobs['bob']}").status_code == 200


def test_the_first_user_of_an_old_workdir_becomes_its_admin(tmp_path):
    """A workdir from before roles: its first user was the admin `serve` made on its first start."""
    import sqlite3

    path = tmp_path / DB_NAME
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, hash TEXT NOT NULL,"
            " session_key TEXT NOT NULL, created REAL NOT NULL);"
            "INSERT INTO users VALUES (1, 'admin', 'h', 'k', 0), (2, 'alice', 'h', 'k', 0);"
        )
    db = Database(path)
    db.create()
    assert db.user(name="admin")["admin"] == 1 and db.user(name="alice")["admin"] == 0


def test_ids_and_cursors_are_parsed_strictly(two_users):
    app, jobs = two_users
    alice, _ = login(app, "alice")
    huge = "99999999999999999999999"  # past SQLite's INTEGER: once an OverflowError and a 500
    for path in (
        f"/jobs/{huge}",
        f"/api/jobs/{huge}",
        f"/jobs/{huge}/log",
        f"/jobs/{huge}/download",
        f"/jobs/{huge}/download/fp16",
    ):
        assert alice.get(path).status_code == 404, path
    job = jobs["alice"]
    for after in ("²", "-1", "1e3", "9" * 40):  # '²'.isdigit() is True, int('²') raises
        assert alice.get(f"/api/jobs/{job}", params={"after": after}).status_code == 400, after
    assert alice.get(f"/jobs/{job}/events", headers={"last-event-id": "²".encode()}).status_code == 400
    assert alice.get(f"/api/jobs/{job}", params={"after": "0"}).status_code == 200


def test_the_api_shows_no_server_paths(two_users, tmp_path):
    app, jobs = two_users
    alice, _ = login(app, "alice")
    body = alice.get(f"/api/jobs/{jobs['alice']}").text
    assert "uploads" not in body and str(tmp_path) not in body


def test_the_admin_password_variable_is_read_once(monkeypatch):
    """Job workers inherit the server's environment: the password must not be in it."""
    from mlx_edge.cli.serve import PASSWORD_ENV, _password

    monkeypatch.setenv(PASSWORD_ENV, "from the environment")
    assert _password(None, who="admin", env=PASSWORD_ENV) == "from the environment"
    assert PASSWORD_ENV not in os.environ


def test_an_unlabeled_upload_is_read_as_text_and_kept_with_the_shipped_data(app, tmp_path):
    client, token = logged_in(app)
    form = {"csrf_token": token, "kind": "distill", "data": "todo", "teacher": "multilingual-e5-small"}
    notes = "Call the bank, then pay rent\n复习线性代数\nBook a table for two, Friday\n".encode()

    def post(content: bytes):
        files = {"unlabeled_file": ("notes.csv", content)}
        return client.post("/jobs", data=form, files=files, follow_redirects=False)

    ok = post(notes)  # commas and a .csv name, but no text header: one text per line
    assert ok.status_code == 303, ok.text
    (job,) = app.state.db.jobs()
    stored = Path(job["params"]["uploads"]["unlabeled"])
    assert stored.suffix == ".txt" and stored.read_bytes() == notes
    assert job["params"]["files"] == {"unlabeled": "notes.csv"}
    from mlx_edge.transfer import read_unlabeled

    assert read_unlabeled(stored) == ["Call the bank, then pay rent", "复习线性代数", "Book a table for two, Friday"]
    empty = post(b"\n  \n")
    assert empty.status_code == 400 and "one text per line" in empty.text
    column = post(b'{"body": "pay rent"}\n')  # JSON lines with no text field: the CLI's message
    assert column.status_code == 400 and "has no text field" in column.text
    assert len(app.state.db.jobs()) == 1 and len(list((tmp_path / "w" / "uploads").iterdir())) == 1
