"""The job queue: one job at a time, each in a worker process of its own (`python -m mlx_edge.serve.worker`).

A cancel kills the worker's process group; a crash or a kill cannot take the server down. On start, a job
the database says is running has lost its worker (the server was killed: the worker exits when its parent
goes) and is marked interrupted; resuming it runs the worker again on the same job directory, where the
pipeline skips finished stages and resumes an interrupted one, to the same result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from mlx_edge.fileio import atomic_write_json
from mlx_edge.serve.db import Database

JOBS = "jobs"
ERROR_NAME = "error.txt"  # the worker's one-line reason when it fails
LOG_NAME = "worker.log"
KILL_GRACE_S = 5.0
RESUMABLE = ("interrupted", "cancelled", "failed")


def job_dir(workdir: Path, job_id: int) -> Path:
    return Path(workdir) / JOBS / str(job_id)


class JobRunner:
    """Runs queued jobs one after another in a background thread of the server."""

    def __init__(self, db: Database, workdir: Path):
        self.db, self.workdir = db, Path(workdir)
        self._wake, self._stopping = threading.Event(), threading.Event()
        self._lock = threading.Lock()
        self._current: tuple[int, subprocess.Popen] | None = None
        self._cancelled: set[int] = set()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.recover()
        self._thread = threading.Thread(target=self._loop, name="mlx-edge-jobs", daemon=True)
        self._thread.start()

    def recover(self) -> None:
        """Jobs left running by a server that died: their workers are gone (or going); mark them interrupted."""
        for job in self.db.jobs("running"):
            self.db.update_job(
                job["id"],
                status="interrupted",
                error="the server stopped while this job ran: resume it to continue where it stopped",
                finished=time.time(),
                only_if=("running",),
            )
        self.db.end_open_runs("interrupted")

    def stop(self) -> None:
        """Server shutdown: stop taking jobs; a running one is killed and marked interrupted (resumable)."""
        self._stopping.set()
        self._wake.set()
        with self._lock:
            current = self._current
        if current is not None:
            _kill_group(current[1])
        if self._thread is not None:
            self._thread.join(timeout=KILL_GRACE_S + 5)

    def wake(self) -> None:
        self._wake.set()

    def cancel(self, job_id: int) -> bool:
        if self.db.update_job(job_id, status="cancelled", finished=time.time(), only_if=("queued",)):
            return True
        with self._lock:
            current = self._current
            if current is None or current[0] != job_id:
                return False
            self._cancelled.add(job_id)
        _kill_group(current[1])
        return True

    def resume(self, job_id: int) -> bool:
        ok = self.db.update_job(job_id, status="queued", error=None, finished=None, only_if=RESUMABLE)
        self._wake.set()
        return ok

    def _loop(self) -> None:
        while not self._stopping.is_set():
            queued = self.db.jobs("queued")
            if not queued:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            try:
                self._run(queued[0])
            except Exception as exc:  # a bug here must not stop the queue: the job says what happened
                self.db.update_job(queued[0]["id"], status="failed", error=f"the server could not run it: {exc!r}")

    def _run(self, job: dict) -> None:
        attempt = job["attempt"] + 1
        now = time.time()
        if not self.db.update_job(job["id"], status="running", attempt=attempt, error=None, only_if=("queued",)):
            return  # cancelled in between
        self.db.update_job(job["id"], started=job["started"] or now, finished=None)
        directory = job_dir(self.workdir, job["id"])
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ERROR_NAME).unlink(missing_ok=True)
        spec = {
            "db": str(self.db.path.resolve()),
            "workdir": str(self.workdir.resolve()),
            "job_id": job["id"],
            "attempt": attempt,
            "kind": job["kind"],
            "params": job["params"],
            "server_pid": os.getpid(),
        }
        atomic_write_json(directory / "job.json", spec)
        with open(directory / LOG_NAME, "ab") as log:
            log.write(f"\n=== attempt {attempt} ===\n".encode())
            log.flush()
            process = subprocess.Popen(
                [sys.executable, "-m", "mlx_edge.serve.worker", str(directory)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a cancel kills it and what it started
                env={**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"},
            )
        with self._lock:
            self._current = (job["id"], process)
        run_id = self.db.start_run(job["id"], attempt, process.pid)
        code = process.wait()
        with self._lock:
            self._current = None
            cancelled = job["id"] in self._cancelled
            self._cancelled.discard(job["id"])
        self._finish(job["id"], run_id, code, cancelled, directory)

    def _finish(self, job_id: int, run_id: int, code: int, cancelled: bool, directory: Path) -> None:
        if code == 0:
            outcome, error = "done", None
        elif cancelled:
            outcome, error = "cancelled", "cancelled: resume it to continue where it stopped"
        elif self._stopping.is_set():
            outcome, error = "interrupted", "the server stopped while this job ran: resume it to continue"
        else:
            outcome = "failed"
            error_file = directory / ERROR_NAME
            error = (
                error_file.read_text(encoding="utf-8").strip()
                if error_file.is_file()
                else f"the worker stopped with exit code {code} (see the log)"
            )
        self.db.finish_run(run_id, outcome)
        self.db.update_job(job_id, status=outcome, error=error, finished=time.time())


def _kill_group(process: subprocess.Popen) -> None:
    """SIGTERM the worker's process group, SIGKILL what is left after a grace period."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def read_result(workdir: Path, job_id: int) -> dict | None:
    path = job_dir(workdir, job_id) / "result.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
