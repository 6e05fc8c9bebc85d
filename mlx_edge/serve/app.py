"""The ASGI app of `mlx-edge serve` (Starlette), its guards, and the function that runs it with uvicorn.

Deny by default: every path but /login and /static needs a signed session of an existing user, or gets
a redirect to /login (pages) or 401 (API, live stream, downloads, any POST). Every POST checks the
session's CSRF token. Headers keep the pages from being framed and scripts to the package's own files.
"""

from __future__ import annotations

import ipaddress
import socket
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from mlx_edge.errors import ServeError
from mlx_edge.serve import DEFAULT_LIMIT_MB, DEFAULT_QUOTA_MB, pages
from mlx_edge.serve.auth import (
    SESSION_HOURS,
    LoginGuard,
    authenticate,
    csrf_ok,
    csrf_token,
    end_session,
    secret_key,
    session_user,
    start_session,
)
from mlx_edge.serve.db import DB_NAME, Database
from mlx_edge.serve.jobs import JobRunner
from mlx_edge.serve.pages import MAX_FILES, render
from mlx_edge.serve.uploads import sweep

HERE = Path(__file__).parent
PUBLIC = ("/login", "/static/")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'"
)


class RequireSession:
    """ASGI middleware: the session's user in scope["user"], or a redirect / 401 for everything not public."""

    def __init__(self, app, db: Database):
        self.app, self.db = app, db

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] == "/login" or scope["path"].startswith("/static/"):
            await self.app(scope, receive, send)
            return
        user = await anyio.to_thread.run_sync(session_user, self.db, scope["session"])
        if user is None:
            if is_page(scope["method"], scope["path"]):
                response = RedirectResponse("/login", status_code=303)
            else:
                response = JSONResponse({"error": "log in first"}, status_code=401)
            await response(scope, receive, send)
            return
        scope["user"] = user
        await self.app(scope, receive, send)


def is_page(method: str, path: str) -> bool:
    """A page a browser navigates to (a GET of neither the API, a live stream, a log nor a download)."""
    if method != "GET" or path.startswith("/api/") or "/download/" in path:  # /jobs/<id>/download/<kind>
        return False
    return not path.endswith(("/events", "/download", "/log"))


class BodyLimit:
    """ASGI middleware: every POST declares its size, and one over its route's limit is refused before
    anything reads it (411 / 413). uvicorn's h11 then delivers no more than the declared bytes."""

    def __init__(self, app, max_upload_mb: float, form_limit: int = 64 * 1024):
        self.app, self.max_upload_mb, self.form_limit = app, max_upload_mb, form_limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/jobs":  # a job's files at most, each checked again when it is saved
            limit, over = (
                MAX_FILES * self.max_upload_mb * 1e6 + 1e6,
                f"the upload is over {self.max_upload_mb:g} MB per file",
            )
        else:
            limit, over = self.form_limit, f"the request is over {self.form_limit / 1e3:g} kB"
        length = dict(scope["headers"]).get(b"content-length", b"")
        if not length.isdigit():
            response = JSONResponse({"error": "a POST needs a Content-Length"}, status_code=411)
        elif int(length) > limit:
            response = JSONResponse({"error": over}, status_code=413)
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)


class SecurityHeaders:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith("/static/")

        async def with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"same-origin"),
                ]
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def create_app(
    workdir: Path,
    *,
    max_upload_mb: float = DEFAULT_LIMIT_MB,
    allowed_hosts: list[str] | None = None,
    run_jobs: bool = True,
    secure_cookies: bool = False,
    models_dir: Path | None = None,
    quota_mb: float = DEFAULT_QUOTA_MB,
) -> Starlette:
    """The app over `workdir` (database, uploads, jobs); `run_jobs=False` leaves the queue alone (tests).
    `secure_cookies`: the session cookie only over HTTPS (serve --allow-remote, behind TLS).
    `models_dir`: the one folder the forms' model fields may name paths in (else built-in names only);
    `quota_mb`: the most upload bytes one user may keep."""
    workdir = Path(workdir)
    db = Database(workdir / DB_NAME)
    db.create()
    sweep(db, workdir)  # uploads no job refers to: a crash between keeping files and making the job
    runner = JobRunner(db, workdir)

    @asynccontextmanager
    async def lifespan(app):
        if run_jobs:
            runner.start()
        yield
        if run_jobs:
            await anyio.to_thread.run_sync(runner.stop)

    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)] if allowed_hosts else []
    middleware += [
        Middleware(SecurityHeaders),
        Middleware(BodyLimit, max_upload_mb=max_upload_mb),
        Middleware(
            SessionMiddleware,
            secret_key=secret_key(workdir),
            session_cookie="mlx_edge_session",
            max_age=SESSION_HOURS * 3600,
            same_site="strict",
            https_only=secure_cookies,
        ),
        Middleware(RequireSession, db=db),
    ]
    routes = [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        *pages.routes(),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.db, app.state.workdir, app.state.runner = db, workdir, runner
    app.state.max_upload_mb, app.state.quota_mb, app.state.models_dir = max_upload_mb, quota_mb, models_dir
    app.state.guard = LoginGuard()
    app.state.argon2 = anyio.CapacityLimiter(2)  # each check takes 64 MiB: a burst queues instead of piling up
    app.state.templates = Jinja2Templates(directory=HERE / "templates")
    app.state.templates.env.globals["csrf_token"] = csrf_token
    app.state.templates.env.filters.update(pages.FILTERS)
    return app


async def login_page(request: Request) -> Response:
    if await anyio.to_thread.run_sync(session_user, request.app.state.db, request.session):
        return RedirectResponse("/", status_code=303)
    return render(request, "login.html")


async def login(request: Request) -> Response:
    form = await request.form()
    if not csrf_ok(request.session, form.get("csrf_token")):
        return render(request, "login.html", 403, error="the form expired: log in again")
    name, password = str(form.get("username", "")), str(form.get("password", ""))
    guard: LoginGuard = request.app.state.guard
    address = request.client.host if request.client else "?"
    wait = guard.reserve(address, name)
    if wait > 0:
        return render(request, "login.html", 429, error=f"too many failed logins: wait {wait:.0f} s", username=name)
    db = request.app.state.db
    user = None
    try:
        user = await anyio.to_thread.run_sync(authenticate, db, name, password, limiter=request.app.state.argon2)
    finally:
        guard.done(address, name, ok=user is not None)
    if user is None:
        return render(request, "login.html", 401, error="wrong user name or password", username=name)
    await anyio.to_thread.run_sync(start_session, db, request.session, user)
    csrf_token(request.session)
    return RedirectResponse("/", status_code=303)


async def logout(request: Request) -> Response:
    form = await request.form()
    if not csrf_ok(request.session, form.get("csrf_token")):
        return JSONResponse({"error": "missing or wrong CSRF token"}, status_code=403)
    await anyio.to_thread.run_sync(end_session, request.app.state.db, request.session)
    return RedirectResponse("/login", status_code=303)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, port: int, allow_remote: bool) -> None:
    """Refuse a non-loopback host unless allowed, and a port something else holds, before uvicorn starts."""
    if not allow_remote and not is_loopback(host):
        raise ServeError(
            f"--host {host} would let other machines reach the service",
            "keep the default 127.0.0.1, or add --allow-remote if you mean it (put TLS in front: cookies travel in clear)",
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}", "pick another --port") from None


def serve(
    *,
    workdir: Path,
    host: str,
    port: int,
    allow_remote: bool,
    max_upload_mb: float,
    quota_mb: float = DEFAULT_QUOTA_MB,
    models_dir: Path | None = None,
    trusted_proxy: str | None = None,
    on_ready=lambda url: None,
) -> None:
    """Run the service until Ctrl-C (a running job is then stopped and marked interrupted).
    `trusted_proxy`: the address(es) of a reverse proxy whose X-Forwarded-For names the client."""
    check_bind(host, port, allow_remote)
    hosts = None if allow_remote else [*LOOPBACK_NAMES, "[::1]"]
    app = create_app(
        workdir,
        max_upload_mb=max_upload_mb,
        allowed_hosts=hosts,
        secure_cookies=allow_remote,
        models_dir=models_dir,
        quota_mb=quota_mb,
    )
    shown = f"[{host}]" if ":" in host else host
    on_ready(f"http://{shown}:{port}")
    # X-Forwarded-For only from a proxy the admin named: uvicorn would otherwise trust it from 127.0.0.1,
    # and every guess could claim a new address
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=3,
        proxy_headers=trusted_proxy is not None,
        forwarded_allow_ips=trusted_proxy,
    )
