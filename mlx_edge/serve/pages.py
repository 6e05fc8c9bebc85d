"""The pages and API of the service: jobs (list, new, one job with its live view), runs, downloads (a
distillation's bundles one zip each: /jobs/<id>/download/<kind>; /jobs/<id>/download is the one to ship).

Every handler here runs behind app.RequireSession; every POST checks the CSRF token first.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import anyio
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from mlx_edge.errors import DataError
from mlx_edge.serve.auth import csrf_ok
from mlx_edge.serve.db import FINAL
from mlx_edge.serve.forms import (
    ADAPT_DEFAULTS,
    BUNDLE_HINTS,
    DISTILL_DEFAULTS,
    KINDS,
    STUDENTS,
    TEACHER_NAMES,
    FormErrors,
    adapt_params,
    distill_params,
    title_of,
)
from mlx_edge.serve.jobs import LOG_NAME, RESUMABLE, job_dir, read_result
from mlx_edge.serve.uploads import check_quota, check_upload, discard, keep
from mlx_edge.settings import BUNDLE_KINDS

FILE_FIELDS = {"distill": ("train_file", "dev_file", "test_file", "unlabeled_file"), "adapt": ("data_file",)}
UPLOAD_KEYS = {
    "train_file": "train",
    "dev_file": "dev",
    "test_file": "test",
    "unlabeled_file": "unlabeled",
    "data_file": "data",
}
UNLABELED_FIELDS = {"unlabeled_file"}  # text with no label: read as `distill --unlabeled` reads it
MAX_FILES = max(len(fields) for fields in FILE_FIELDS.values())  # a job's files at most
EVENT_INTERVAL_S = 0.5
SERVER_ONLY_PARAMS = {"uploads"}  # where the worker reads the files: server paths the API never shows
LOG_TAIL_BYTES = 200_000


def routes() -> list[Route]:
    return [
        Route("/", jobs_page),
        Route("/jobs/new", new_job_page),
        Route("/jobs", create_job, methods=["POST"]),
        Route("/jobs/{job_id:int}", job_page),
        Route("/jobs/{job_id:int}/events", job_events),
        Route("/jobs/{job_id:int}/cancel", cancel_job, methods=["POST"]),
        Route("/jobs/{job_id:int}/resume", resume_job, methods=["POST"]),
        Route("/jobs/{job_id:int}/download", download),
        Route("/jobs/{job_id:int}/download/{kind}", download_bundle),
        Route("/jobs/{job_id:int}/log", job_log),
        Route("/runs", runs_page),
        Route("/api/jobs", api_jobs),
        Route("/api/jobs/{job_id:int}", api_job),
    ]


def _pct(x) -> str:
    return "—" if x is None else f"{x:.1%}"


def _mb(size) -> str:
    if size is None:
        return "—"
    return f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size / 1e3:.1f} kB"


def _when(t) -> str:
    return "" if not t else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _duration(seconds) -> str:
    if seconds is None:
        return "…"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _memory(state: dict) -> str:
    if state.get("peak_rss_mb") is None:
        return "…"
    mlx = f" (MLX {state['peak_mlx_mb']:,.0f} MB)" if state.get("peak_mlx_mb") else ""
    return f"{state['peak_rss_mb']:,.0f} MB resident{mlx}"


FILTERS = {
    "pct": _pct,
    "mb": _mb,
    "when": _when,
    "duration": _duration,
    "memory": _memory,
    "millions": lambda n: "—" if n is None else f"{n / 1e6:.2f}M",
    "megabytes": lambda n: "—" if n is None else f"{n / 1e6:.2f}",
    "ms": lambda v: "—" if v is None else f"{v:.2f}",
    "basename": lambda p: Path(str(p)).name,
    "plain": lambda v: "—" if v is None else ", ".join(f"{k}: {x}" for k, x in v.items()) if isinstance(v, dict) else v,
}


def render(request: Request, name: str, status_code: int = 200, **context) -> Response:
    context = {"user": request.scope.get("user"), "session": request.session, **context}
    return request.app.state.templates.TemplateResponse(request, name, context, status_code=status_code)


def _job_or_404(request: Request) -> dict | None:
    """The URL's job if this user may see it: its owner or an admin. Anyone else gets the same 404 as for
    a job that does not exist, so ids tell a stranger nothing."""
    job = request.app.state.db.job(request.path_params["job_id"])
    return job if job is not None and _may_see(request.scope["user"], job) else None


def _may_see(user: dict, job: dict) -> bool:
    return bool(user.get("admin")) or job["user_id"] == user["id"]


def _own_jobs(request: Request, *statuses: str) -> list[dict]:
    user = request.scope["user"]
    return request.app.state.db.jobs(*statuses, user_id=None if user.get("admin") else user["id"])


def _after(value: str | None) -> int | None:
    """A metrics cursor from ?after= or Last-Event-ID: ASCII digits only (`int('²')` raises), else None."""
    value = value or "0"
    return int(value) if re.fullmatch(r"[0-9]{1,18}", value) else None


async def jobs_page(request: Request) -> Response:
    jobs = await anyio.to_thread.run_sync(_own_jobs, request)
    return render(request, "jobs.html", jobs=jobs)


async def new_job_page(request: Request) -> Response:
    kind = request.query_params.get("kind", "distill")
    kind = kind if kind in KINDS else "distill"
    return _form(request, kind, {}, {}, 200)


def _form(request: Request, kind: str, values: dict, errors: dict, status: int) -> Response:
    defaults = DISTILL_DEFAULTS if kind == "distill" else ADAPT_DEFAULTS
    return render(
        request,
        "new_job.html",
        status,
        kind=kind,
        values={**defaults, **values},
        errors=errors,
        students=STUDENTS,
        teachers=TEACHER_NAMES,
        bundle_kinds=BUNDLE_KINDS,
        bundle_hints=BUNDLE_HINTS,
        max_upload_mb=request.app.state.max_upload_mb,
    )


async def create_job(request: Request) -> Response:
    state = request.app.state  # app.BodyLimit has refused a body without a Content-Length or over the limit
    async with request.form(max_files=MAX_FILES, max_fields=50) as form:
        if not csrf_ok(request.session, form.get("csrf_token")):
            return JSONResponse({"error": "missing or wrong CSRF token"}, status_code=403)
        kind = form.get("kind") if form.get("kind") in KINDS else "distill"
        values = {k: v for k, v in form.items() if isinstance(v, str)}
        if "bundles" in form:  # the ticked boxes (and the empty value the page sends beside them)
            values["bundles"] = [v for v in form.getlist("bundles") if isinstance(v, str)]
        files = {
            field: item
            for field in FILE_FIELDS[kind]
            if isinstance(item := form.get(field), UploadFile) and (item.filename or item.size)
        }
        names = {field: item.filename or "upload" for field, item in files.items()}
        checked: list = []
        try:
            make = distill_params if kind == "distill" else adapt_params
            params = make(values, names, models_dir=state.models_dir)
            if kind == "distill" and params["data"] == "todo":  # the shipped data: labeled files chosen
                files = {f: item for f, item in files.items() if f in UNLABELED_FIELDS}  # before switching unused
                names = {f: names[f] for f in files}
            for field, item in files.items():  # every file read and checked before any is kept
                content = await item.read()
                checked.append(
                    await anyio.to_thread.run_sync(
                        lambda c=content, n=names[field], u=field in UNLABELED_FIELDS: check_upload(
                            state.workdir, name=n, content=c, limit_mb=state.max_upload_mb, unlabeled=u
                        )
                    )
                )
            user_id = request.scope["user"]["id"]
            await anyio.to_thread.run_sync(check_quota, state.db, user_id, checked, state.quota_mb)
        except (FormErrors, DataError) as exc:
            discard(checked)
            errors = exc.errors if isinstance(exc, FormErrors) else {"upload": str(exc)}
            return _form(request, kind, values, errors, 400)
        except BaseException:  # a dropped connection or a bug: no staged file stays behind
            discard(checked)
            raise
    saved = dict(zip(files, checked))
    await anyio.to_thread.run_sync(lambda: keep(state.db, checked, user_id=user_id))
    params["uploads"] = {UPLOAD_KEYS[f]: str(u.path) for f, u in saved.items()}  # where the worker reads them
    params["files"] = {UPLOAD_KEYS[f]: names[f] for f in files}  # what the user called them
    job_id = state.db.add_job(
        user_id=user_id,
        kind=kind,
        title=title_of(kind, params, names, values.get("title", "")),
        params=params,
    )
    state.runner.wake()
    return RedirectResponse(f"/jobs/{job_id}", status_code=303)


def job_state(request: Request, job: dict) -> dict:
    """What the live view shows (the API and the event stream send the same)."""
    now = time.time()
    elapsed = ((job["finished"] or now) - job["started"]) if job["started"] else None
    keys = ("id", "title", "kind", "status", "stage", "stages", "progress", "detail", "device", "speed")
    state = {k: job[k] for k in keys}
    return state | {
        "peak_rss_mb": job["peak_rss_mb"],
        "peak_mlx_mb": job["peak_mlx_mb"],
        "error": job["error"],
        "attempt": job["attempt"],
        "elapsed_s": elapsed,
        "final": job["status"] in FINAL,
        "resumable": job["status"] in RESUMABLE,
    }


async def job_page(request: Request) -> Response:
    job = await anyio.to_thread.run_sync(_job_or_404, request)
    if job is None:
        return render(request, "missing.html", 404)
    result = read_result(request.app.state.workdir, job["id"]) if job["status"] == "done" else None
    return render(request, "job.html", job=job, state=job_state(request, job), result=result)


async def api_job(request: Request) -> Response:
    job = await anyio.to_thread.run_sync(_job_or_404, request)
    if job is None:
        return JSONResponse({"error": "no such job"}, status_code=404)
    after = _after(request.query_params.get("after"))
    if after is None:
        return JSONResponse({"error": "after= takes a metrics id (digits)"}, status_code=400)
    metrics = await anyio.to_thread.run_sync(request.app.state.db.metrics, job["id"], after)
    params = {k: v for k, v in job["params"].items() if k not in SERVER_ONLY_PARAMS}
    return JSONResponse({**job_state(request, job), "params": params, "metrics": metrics})


async def api_jobs(request: Request) -> Response:
    jobs = await anyio.to_thread.run_sync(_own_jobs, request)
    return JSONResponse([job_state(request, job) for job in jobs])


async def job_events(request: Request) -> Response:
    """Server-sent events: the job's state and its new metrics every half second, until it is final."""
    db = request.app.state.db
    job = await anyio.to_thread.run_sync(_job_or_404, request)
    if job is None:
        return JSONResponse({"error": "no such job"}, status_code=404)
    job_id = job["id"]
    after = _after(request.headers.get("last-event-id"))
    if after is None:
        return JSONResponse({"error": "Last-Event-ID takes a metrics id (digits)"}, status_code=400)

    async def stream():
        nonlocal after
        while True:
            job = await anyio.to_thread.run_sync(db.job, job_id)
            if job is None:
                return
            metrics = await anyio.to_thread.run_sync(db.metrics, job_id, after)
            after = metrics[-1]["id"] if metrics else after
            payload = json.dumps({**job_state(request, job), "metrics": metrics})
            yield f"id: {after}\ndata: {payload}\n\n"
            if job["status"] in FINAL or await request.is_disconnected():
                return
            await asyncio.sleep(EVENT_INTERVAL_S)

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})


async def _post(request: Request) -> bool:
    form = await request.form()
    return csrf_ok(request.session, form.get("csrf_token") or request.headers.get("x-csrf-token"))


async def cancel_job(request: Request) -> Response:
    return await _act(request, "cancel")


async def resume_job(request: Request) -> Response:
    return await _act(request, "resume")


async def _act(request: Request, action: str) -> Response:
    """Cancel or resume: CSRF first, then the same 404 as the job page for a job that is not yours."""
    if not await _post(request):
        return JSONResponse({"error": "missing or wrong CSRF token"}, status_code=403)
    job = await anyio.to_thread.run_sync(_job_or_404, request)
    if job is None:
        return JSONResponse({"error": "no such job"}, status_code=404)
    await anyio.to_thread.run_sync(getattr(request.app.state.runner, action), job["id"])
    return RedirectResponse(f"/jobs/{job['id']}", status_code=303)


async def download(request: Request) -> Response:
    """The job's zip: its adapter, or the bundle to ship (the recommended one, else the ladder's first)."""
    return await _send_zip(request, lambda result: result["download"])


async def download_bundle(request: Request) -> Response:
    """One bundle of a distillation's ladder; a kind the job did not make gets the 404 of a missing job."""
    return await _send_zip(request, lambda result: result.get("downloads", {}).get(request.path_params["kind"]))


async def _send_zip(request: Request, pick) -> Response:
    """The zip `pick(result)` names, of a finished job this user may see (`_job_or_404`), else 404."""
    job = await anyio.to_thread.run_sync(_job_or_404, request)
    result = read_result(request.app.state.workdir, job["id"]) if job and job["status"] == "done" else None
    name = pick(result) if result is not None else None
    if name is None:
        return JSONResponse({"error": "nothing to download: no such job, bundle or finished job"}, status_code=404)
    path = job_dir(request.app.state.workdir, job["id"]) / name
    return FileResponse(path, filename=f"mlx-edge-job{job['id']}-{name}", media_type="application/zip")


async def job_log(request: Request) -> Response:
    job = await anyio.to_thread.run_sync(_job_or_404, request)
    path = job_dir(request.app.state.workdir, job["id"]) / LOG_NAME if job else None
    if path is None or not path.is_file():
        return PlainTextResponse("no log yet\n", status_code=404 if job is None else 200)
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
        return PlainTextResponse(f.read().decode("utf-8", errors="replace"))


async def runs_page(request: Request) -> Response:
    workdir = request.app.state.workdir
    jobs = await anyio.to_thread.run_sync(_own_jobs, request, "done")
    runs = []
    for job in reversed(jobs):
        result = read_result(workdir, job["id"])
        if result is not None and result["kind"] == "distill":
            runs.append({"job": job, "report": result["report"]})
    return render(request, "runs.html", runs=runs)
