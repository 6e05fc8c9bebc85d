"""`mlx-edge serve`: the local training service, and its users from the shell. Imports only click (and the
service package's own constants) at module level."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from mlx_edge.errors import ServeError
from mlx_edge.serve import DEFAULT_LIMIT_MB, DEFAULT_QUOTA_MB

PASSWORD_ENV = "MLX_EDGE_ADMIN_PASSWORD"


def _password(password_file: Path | None, *, who: str, env: str | None) -> str:
    """The password for `who`: a file, else the environment variable `env`, else a prompt on a terminal."""
    if password_file is not None:
        try:
            text = password_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ServeError(f"cannot read --password-file {password_file}: {exc}") from None
        return text.splitlines()[0] if text.strip() else ""
    if env and os.environ.get(env):
        return os.environ.pop(env)  # read once: the job workers this server starts do not inherit it
    if sys.stdin.isatty():
        return click.prompt(f"Password for {who}", hide_input=True, confirmation_prompt=True, err=True)
    hint = f"set {env} or pass --password-file FILE" if env else "pass --password-file FILE or run it in a terminal"
    raise ServeError(f"no password for {who} (no terminal to ask on)", hint)


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (loopback only, unless --allow-remote).",
)
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="Port to listen on.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("mlx-edge-serve"),
    show_default=True,
    help="Where the service keeps its database, uploads, jobs and session secret.",
)
@click.option("--allow-remote", is_flag=True, help="Allow a --host other machines can reach (put TLS in front of it).")
@click.option(
    "--max-upload-mb",
    type=click.FloatRange(min=0.001),
    default=DEFAULT_LIMIT_MB,
    show_default=True,
    help="Largest data file accepted.",
)
@click.option(
    "--quota-mb",
    type=click.FloatRange(min=0.001),
    default=DEFAULT_QUOTA_MB,
    show_default=True,
    help="Most upload space one user may take (their files are kept with their jobs).",
)
@click.option(
    "--models",
    "models_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A folder of your own teachers, students and LLMs that the job forms may name (relative to it); "
    "without it the forms take built-in names only.",
)
@click.option(
    "--trusted-proxy",
    metavar="ADDRESS",
    default=None,
    help="Address(es) of a reverse proxy in front (comma-separated): its X-Forwarded-For names the client "
    "for login limits. Without it the header is ignored.",
)
@click.option(
    "--password-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Read the password (first line) from a file: the first admin's (else ${PASSWORD_ENV}, else a prompt), "
    "or --add-user's / --reset-password's.",
)
@click.option(
    "--admin", default="admin", show_default=True, help="User name of the first admin (made on the first start)."
)
@click.option(
    "--add-user",
    metavar="NAME",
    default=None,
    help="Add a user (asks for its password), then exit. A user sees only its own jobs; the first admin sees all.",
)
@click.option(
    "--reset-password", metavar="NAME", default=None, help="Give a user a new password (ends its sessions), then exit."
)
def serve(
    host,
    port,
    workdir,
    allow_remote,
    max_upload_mb,
    quota_mb,
    models_dir,
    trusted_proxy,
    password_file,
    admin,
    add_user,
    reset_password,
):
    """A local training service with web pages: log in, create jobs, watch them, download bundles.

    One process, no other server: jobs (a distillation through `mlx-edge run`'s pipeline, or a LoRA
    fine-tuning of the augment LLM) run one at a time in a worker process; a job the server was stopped
    in the middle of is marked interrupted and resumes where it stopped. There is no default password:
    the first start makes the admin user from $MLX_EDGE_ADMIN_PASSWORD, --password-file or a prompt.

    \b
    Examples:
      mlx-edge serve                          then open http://127.0.0.1:8765
      mlx-edge serve --workdir ~/mlx-edge-serve --port 9000
      mlx-edge serve --models ~/models       job forms may then name ~/models/my-teacher as my-teacher
      mlx-edge serve --add-user alice
      mlx-edge serve --reset-password admin --password-file pw.txt
    """
    from mlx_edge.serve import app, auth  # lazy: --help stays instant
    from mlx_edge.serve.db import DB_NAME, Database  # lazy: --help stays instant

    if add_user and reset_password:
        raise click.UsageError("give --add-user or --reset-password, not both")
    os.umask(0o077)  # the database (password hashes, sessions), uploads and bundles: readable by this user only
    workdir.mkdir(parents=True, exist_ok=True)
    db = Database(workdir / DB_NAME)
    db.create()
    if add_user:
        auth.add_user(db, add_user, _password(password_file, who=add_user, env=None))
        click.echo(f"user {add_user} added")
        return
    if reset_password:
        auth.reset_password(db, reset_password, _password(password_file, who=reset_password, env=None))
        click.echo(f"new password for {reset_password}; its open sessions have ended")
        return
    app.check_bind(host, port, allow_remote)  # before asking for a password the server could not use
    if db.user_count() == 0:
        auth.add_user(
            db, admin, _password(password_file, who=f"the first admin ({admin})", env=PASSWORD_ENV), admin=True
        )
        click.echo(f"user {admin} made", err=True)
    os.environ.pop(PASSWORD_ENV, None)  # not used (the admin exists): still not handed to the job workers
    app.serve(
        workdir=workdir,
        host=host,
        port=port,
        allow_remote=allow_remote,
        max_upload_mb=max_upload_mb,
        quota_mb=quota_mb,
        models_dir=models_dir,
        trusted_proxy=trusted_proxy,
        on_ready=lambda url: click.echo(f"mlx-edge serve: {url} (workdir {workdir}; Ctrl-C stops it)", err=True),
    )
