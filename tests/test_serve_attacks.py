"""The attacks of the security review, run against a real `python -m mlx_edge serve` on loopback:
two users and a stranger, forged and copied cookies, guesses from other addresses, behind a forged
X-Forwarded-For and all at once, a 20 MB login body, ids and cursors that once gave 500s, model
fields that named server files, uploads that were kept when their job was refused.

Nothing is mocked. The admin's finished and interrupted jobs are seeded through the server's own
storage layer (`Database`), as a worker would leave them, so no test here starts a training run;
users are added with the CLI. Other loopback addresses (127.0.0.2 and up) stand for other machines.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from mlx_edge.serve.db import DB_NAME, Database
from mlx_edge.serve.jobs import LOG_NAME, job_dir
from tests.helpers.browser import PASSWORD, ROOT, Server, csrf_of, login
from tests.helpers.jobs import job_pages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="127.0.0.2+ are loopback on Linux")

ROWS = b'{"text": "pay the bill", "label": "finance"}\n{"text": "see the dentist", "label": "health"}\n' * 10
OTHER = "another long password"


def cli(workdir: Path, *args: str, password: str = OTHER) -> None:
    pw = workdir.parent / "pw.txt"
    pw.write_text(password + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "mlx_edge", "serve", "--workdir", str(workdir), *args, "--password-file", str(pw)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def seed(workdir: Path) -> dict:
    """admin (made by the server's first start) owns job 1 (done: a bundle, a log, an upload) and job 2
    (interrupted); bob owns job 3, whose kept upload is near his quota; an orphan upload lies around."""
    old = os.umask(0o077)  # as serve's own umask: the mode test below is about what the server writes
    try:
        cli(workdir, "--add-user", "bob")
        cli(workdir, "--add-user", "carol")
        db = Database(workdir / DB_NAME)
        uploads = workdir / "uploads"
        uploads.mkdir()
        kept, bobs, orphan = uploads / "a1.jsonl", uploads / "b1.jsonl", uploads / "c1.jsonl"
        for path in (kept, bobs, orphan):
            path.write_bytes(ROWS)
        admin = 1  # the server makes the admin first; bob and carol come after
        params = {"data": "upload", "uploads": {"train": str(kept)}, "files": {"train": "mine.jsonl"}}
        done = db.add_job(user_id=admin, kind="adapt", title="admin's secret job", params=params)
        db.update_job(done, status="done")
        directory = job_dir(workdir, done)
        directory.mkdir(parents=True)
        (directory / "bundle.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
        (directory / LOG_NAME).write_text("admin's log line\n")
        result = {"kind": "adapt", "download": "bundle.zip", "downloads": {"fp16": "bundle.zip"}}
        (directory / "result.json").write_text(json.dumps(result))
        interrupted = db.add_job(user_id=admin, kind="adapt", title="admin's paused job", params={})
        db.update_job(interrupted, status="interrupted", error="the server stopped")
        bob = db.user(name="bob")["id"]
        job = db.add_job(user_id=bob, kind="adapt", title="bob's job", params={"uploads": {"data": str(bobs)}})
        db.update_job(job, status="done")
        db.add_upload(
            id="b1", user_id=bob, name="b.jsonl", path=str(bobs), format="jsonl", rows=20, labels={}, bytes=4_500
        )
    finally:
        os.umask(old)
    return {"done": done, "interrupted": interrupted, "orphan": orphan, "kept": kept, "bobs": bobs}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("attacks")
    workdir = root / "work"
    first = Server(workdir).start()  # the first start makes the admin (user 1)
    first.stop()
    jobs = seed(workdir)
    (root / "models").mkdir()
    server = Server(workdir, args=("--quota-mb", "0.005", "--models", str(root / "models"))).start()
    yield server, jobs
    server.stop()


def client_from(url: str, address: str) -> httpx.Client:
    """A client whose connections come from `address` (another loopback address: another machine)."""
    return httpx.Client(base_url=url, timeout=60, transport=httpx.HTTPTransport(local_address=address))


def try_login(client: httpx.Client, user: str, password: str, headers: dict | None = None) -> int:
    token = csrf_of(client.get("/login").text)
    data = {"csrf_token": token, "username": user, "password": password}
    return client.post("/login", data=data, headers=headers or {}).status_code


def test_a_second_user_cannot_see_or_touch_the_admins_jobs(served):
    server, jobs = served
    bob, token = login(server.url, "bob", OTHER)
    admin, _ = login(server.url)
    for job in (jobs["done"], jobs["interrupted"]):
        for path in job_pages(job):
            assert bob.get(path).status_code == 404, path
        assert bob.get(f"/jobs/{job}/events", headers={"accept": "text/event-stream"}).status_code == 404
        for action in ("cancel", "resume"):
            assert bob.post(f"/jobs/{job}/{action}", data={"csrf_token": token}).status_code == 404, action
    assert "admin's" not in bob.get("/").text and "admin's" not in bob.get("/runs").text
    assert [j["title"] for j in bob.get("/api/jobs").json()] == ["bob's job"]
    # the admin's jobs are untouched, and the admin sees them (and bob's)
    assert admin.get(f"/api/jobs/{jobs['interrupted']}").json()["status"] == "interrupted"
    assert admin.get(f"/jobs/{jobs['done']}/log").text == "admin's log line\n"
    assert admin.get(f"/jobs/{jobs['done']}/download").status_code == 200
    assert admin.get(f"/jobs/{jobs['done']}/download/fp16").status_code == 200
    assert admin.get(f"/jobs/{jobs['done']}/download/int8").status_code == 404  # a kind the job did not make
    assert {j["title"] for j in admin.get("/api/jobs").json()} >= {"admin's secret job", "bob's job"}


def test_a_stranger_and_a_forged_cookie_get_nothing(served):
    server, jobs = served
    for cookies in ({}, {"mlx_edge_session": "eyJ1c2VyIjogMX0=.forged.sig"}):
        stranger = httpx.Client(base_url=server.url, timeout=30, cookies=cookies)
        assert stranger.get(f"/api/jobs/{jobs['done']}").status_code == 401
        assert stranger.get(f"/jobs/{jobs['done']}/download").status_code == 401
        assert stranger.get(f"/jobs/{jobs['done']}/download/fp16").status_code == 401
        assert stranger.get("/").status_code == 303


def test_wrong_passwords_from_elsewhere_do_not_lock_the_admin_out(served):
    server, _ = served
    elsewhere = client_from(server.url, "127.0.0.2")
    codes = [try_login(elsewhere, "admin", f"guess {i}") for i in range(5)]
    assert set(codes) <= {401, 429} and codes[:3] == [401] * 3
    assert try_login(httpx.Client(base_url=server.url, timeout=60), "admin", PASSWORD) == 303


def test_a_forged_forwarded_for_header_does_not_reset_the_count(served):
    server, _ = served
    guesser = httpx.Client(base_url=server.url, timeout=60)  # from 127.0.0.1, the address uvicorn trusted
    forged = [{"x-forwarded-for": f"10.9.{i}.{i}"} for i in range(6)]
    codes = [try_login(guesser, "mallory", f"guess {i}", headers=forged[i]) for i in range(6)]
    assert codes[:3] == [401] * 3 and 429 in codes[3:], codes


def test_concurrent_guesses_are_refused_not_raced_past_the_count(served):
    server, _ = served
    codes: list[int] = []
    clients = [client_from(server.url, "127.0.0.4") for _ in range(10)]
    tokens = [csrf_of(c.get("/login").text) for c in clients]
    barrier = threading.Barrier(10)

    def guess(client, token, i):
        barrier.wait()
        data = {"csrf_token": token, "username": "bob", "password": f"guess {i}"}
        codes.append(client.post("/login", data=data).status_code)

    threads = [threading.Thread(target=guess, args=(c, t, i)) for i, (c, t) in enumerate(zip(clients, tokens))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(codes)) == [401, 429] and codes.count(401) <= 3, codes


def test_logout_and_a_new_password_end_copied_sessions(served):
    server, _ = served
    bob, token = login(server.url, "bob", OTHER)
    copy = httpx.Client(base_url=server.url, timeout=30, cookies=dict(bob.cookies))
    assert copy.get("/api/jobs").status_code == 200
    assert bob.post("/logout", data={"csrf_token": token}).status_code == 303
    assert copy.get("/api/jobs").status_code == 401  # the copied cookie died with the logout
    carol, _ = login(server.url, "carol", OTHER)
    assert carol.get("/api/jobs").status_code == 200
    cli(server.workdir, "--reset-password", "carol", password="carol's brand new password")
    assert carol.get("/api/jobs").status_code == 401


def test_a_20_mb_login_body_is_refused_before_it_is_read(served):
    server, _ = served

    def first_line(head: bytes, body: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(head + body)  # 64 kB of the 20 MB: an old server waited for the rest
            return sock.recv(4096).split(b"\r\n", 1)[0]

    host = f"Host: 127.0.0.1:{server.port}\r\n".encode()
    form = b"Content-Type: application/x-www-form-urlencoded\r\n"
    big = b"POST /login HTTP/1.1\r\n" + host + form + b"Content-Length: 20000000\r\n\r\n"
    assert b" 413 " in first_line(big, b"a" * 65536)
    chunked = b"POST /login HTTP/1.1\r\n" + host + form + b"Transfer-Encoding: chunked\r\n\r\n"
    assert b" 411 " in first_line(chunked, b"10000\r\n" + b"a" * 65536)


def test_odd_ids_and_cursors_are_404_and_400_not_500(served):
    server, jobs = served
    admin, _ = login(server.url)
    assert admin.get("/jobs/99999999999999999999999").status_code == 404
    assert admin.get("/api/jobs/99999999999999999999999").status_code == 404
    assert admin.get(f"/api/jobs/{jobs['done']}", params={"after": "²"}).status_code == 400
    events = admin.get(f"/jobs/{jobs['done']}/events", headers={"last-event-id": "١٢".encode()})
    assert events.status_code == 400


def test_the_api_shows_no_server_paths(served):
    server, jobs = served
    admin, _ = login(server.url)
    text = admin.get(f"/api/jobs/{jobs['done']}").text
    assert str(server.workdir) not in text and "uploads/" not in text and "mine.jsonl" in text


def job_form(token: str, **fields) -> dict:
    return {"csrf_token": token, "kind": "distill", "data": "upload", "device": "cpu", **fields}


def test_model_fields_name_no_server_files(served):
    server, _ = served
    admin, token = login(server.url)
    files = {"train_file": ("t.jsonl", ROWS)}

    def error_for(field: str, value: str) -> str:
        response = admin.post("/jobs", data=job_form(token, **{field: value}), files=files)
        assert response.status_code == 400, (field, value)
        return response.text

    existing, missing = error_for("distill_student", "/etc/passwd"), error_for("distill_student", "/etc/nope")
    assert "/etc/passwd" in existing and existing.replace("/etc/passwd", "X") == missing.replace("/etc/nope", "X")
    for field, value in [("teacher", "/"), ("augment_llm", "/etc"), ("teacher", "../work")]:
        assert "nor a path in the models folder" in error_for(field, value)
    assert len(admin.get("/api/jobs").json()) == 3  # no job was made


def kept_uploads(workdir: Path) -> set[str]:
    return {p.name for p in (workdir / "uploads").iterdir()}


def test_uploads_are_checked_before_any_is_kept_and_quotas_hold(served):
    server, jobs = served
    before = kept_uploads(server.workdir)
    assert jobs["orphan"].name not in before and jobs["kept"].name in before  # swept when the server started
    admin, token = login(server.url)
    # a good training file and a broken dev file: the job is refused and neither file stays
    files = {"train_file": ("t.jsonl", ROWS), "dev_file": ("d.jsonl", b"\x00\x01 not text")}
    response = admin.post("/jobs", data=job_form(token, student="tiny"), files=files)
    assert response.status_code == 400 and "NUL bytes" in response.text
    blank = {"train_file": ("t.jsonl", ROWS + b'{"text": " \\t ", "label": "health"}\n')}  # a text of blanks only
    response = admin.post("/jobs", data=job_form(token, student="tiny"), files=blank)
    assert response.status_code == 400 and "t.jsonl line 21: empty text" in response.text
    # over the quota (5 kB a user): three 1.8 kB files at once, or bob's 0.9 kB on top of his 4.5 kB
    three = {f"{k}_file": (f"{k}.jsonl", ROWS * 2) for k in ("train", "dev", "test")}
    response = admin.post("/jobs", data=job_form(token, student="tiny"), files=three)
    assert response.status_code == 400 and "over your quota of 0.005 MB" in response.text
    bob, bob_token = login(server.url, "bob", OTHER)
    response = bob.post("/jobs", data=job_form(bob_token, student="tiny"), files={"train_file": ("t.jsonl", ROWS)})
    assert response.status_code == 400 and "quota" in response.text
    assert kept_uploads(server.workdir) == before
    assert len(admin.get("/api/jobs").json()) == 3  # no job was made


def test_the_workdir_is_readable_by_its_owner_only(served):
    server, _ = served
    written = [p for p in server.workdir.rglob("*")]
    assert any(p.name == DB_NAME for p in written) and (server.workdir / "uploads").is_dir()
    loose = [str(p) for p in written if stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert not loose, loose


def test_remote_mode_sets_secure_cookies_and_trusts_only_the_named_proxy(tmp_path):
    server = Server(tmp_path / "work", args=("--allow-remote", "--trusted-proxy", "127.0.0.1")).start()
    try:
        client = httpx.Client(base_url=server.url, timeout=60)
        page = client.get("/login")
        # the cookie is Secure: a client sends it back over HTTPS only, so this one is handed back by hand
        session = {"cookie": page.headers["set-cookie"].split(";")[0]}
        token = csrf_of(page.text)
        for i in range(5):  # guesses from one client behind the proxy...
            data = {"csrf_token": token, "username": "admin", "password": f"guess {i}"}
            response = client.post("/login", data=data, headers={**session, "x-forwarded-for": "10.0.0.1"})
            assert response.status_code in (401, 429)
        assert response.status_code == 429
        data = {"csrf_token": token, "username": "admin", "password": PASSWORD}
        response = client.post("/login", data=data, headers={**session, "x-forwarded-for": "10.0.0.2"})
        assert response.status_code == 303  # ...do not slow the admin behind the same proxy
        cookie = response.headers["set-cookie"].lower()
        assert "secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    finally:
        server.stop()


def _peak_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def test_a_burst_of_logins_runs_two_argon2_checks_at_a_time(tmp_path):
    server = Server(tmp_path / "work").start()
    try:
        clients = [client_from(server.url, f"127.0.0.{10 + i}") for i in range(10)]
        tokens = [csrf_of(c.get("/login").text) for c in clients]
        before = _peak_kb(server.process.pid)
        barrier = threading.Barrier(10)
        codes: list[int] = []

        def guess(client, token):
            barrier.wait()
            data = {"csrf_token": token, "username": "admin", "password": "wrong"}
            codes.append(client.post("/login", data=data).status_code)

        threads = [threading.Thread(target=guess, args=pair) for pair in zip(clients, tokens)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        grown_mb = (_peak_kb(server.process.pid) - before) / 1024
        assert codes == [401] * 10  # ten different addresses: each pair's first try is checked
        # argon2id takes 64 MiB a check: ten at once were ~640 MB; two at a time stay under ~200
        assert grown_mb < 250, f"the server's peak memory grew {grown_mb:.0f} MB"
    finally:
        server.stop()
