"""The job queue of `mlx-edge serve` with a real server process and real workers: jobs run one at a time;
a queued job can be cancelled; killing the server (SIGKILL) mid-distillation takes its worker down
too, the restarted server shows the job interrupted, and resuming it ends with the very student an
uninterrupted job of the same settings made; a running job can be cancelled and resumed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from mlx_edge.serve.db import DB_NAME, Database
from tests.helpers.browser import Server, build_todo_teacher, distill_form, login, micro_student, todo_rows, wait_for


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-jobs")
    train, dev = root / "train.jsonl", root / "dev.jsonl"
    train.write_text("\n".join(todo_rows("train", 300)) + "\n", encoding="utf-8")
    dev.write_text("\n".join(todo_rows("dev", 60)) + "\n", encoding="utf-8")
    return build_todo_teacher(root / "teacher"), micro_student(root / "student.json"), train, dev


def create_job(client, token: str, setup, **overrides) -> int:
    teacher, student, train, dev = setup
    files = {"train_file": (train.name, train.read_bytes()), "dev_file": (dev.name, dev.read_bytes())}
    response = client.post("/jobs", data=distill_form(teacher, student, csrf_token=token, **overrides), files=files)
    assert response.status_code == 303, response.text
    return int(response.headers["location"].rsplit("/", 1)[1])


def state(client, job_id: int) -> dict:
    return client.get(f"/api/jobs/{job_id}").json()


def alive(pid: int) -> bool:
    """Running (on Linux a zombie waiting for init to reap it counts as gone)."""
    if Path("/proc/self/stat").is_file():
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except FileNotFoundError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _distill_report(workdir: Path, job_id: int) -> dict:
    manifest = workdir / "jobs" / str(job_id) / "work/student/mlx_edge_manifest.json"
    return json.loads(manifest.read_text(encoding="utf-8"))["report"]


def student_sha(workdir: Path, job_id: int) -> str:
    return hashlib.sha256((workdir / "jobs" / str(job_id) / "work/student/model.safetensors").read_bytes()).hexdigest()


def test_queue_kill_restart_resume_cancel(setup, tmp_path):
    workdir = tmp_path / "work"
    server = Server(workdir, args=("--models", str(setup[0].parent))).start()
    db = Database(workdir / DB_NAME)
    try:
        client, token = login(server.url)
        # 150 distillation epochs, killed in any of epochs 3-139: the kill must land before the stage
        # ends, and the worker leaves only when its parent-watch thread sees the server gone (<= 0.5 s,
        # longer while MLX holds the GIL). Each faster step narrowed a fixed window: with the C++
        # kernels 30 epochs took 2 s, and epochs 3-7 passed between two polls
        settings = {"teacher_epochs": "3", "distill_epochs": "150"}
        a, b, c = (create_job(client, token, setup, **settings) for _ in range(3))
        assert client.post(f"/jobs/{c}/cancel", data={"csrf_token": token}).status_code == 303
        assert state(client, c)["status"] == "cancelled"  # a queued job leaves the queue at once

        # kill -9 the server while A distills (past an epoch's checkpoint); B waits its turn meanwhile
        def distilling_epoch_3():
            s = state(client, a)
            return s["stage"] == "distill" and any(f"epoch {e}/" in (s["detail"] or "") for e in range(3, 140))

        wait_for(distilling_epoch_3, 240, "job A in its third distillation epoch")
        assert state(client, b)["status"] == "queued"
        (worker,) = [r["pid"] for r in db.runs(a)]
        server.kill()
        wait_for(lambda: not alive(worker), 10, "the worker to exit with its server")
        assert not (workdir / "jobs" / str(a) / "result.json").exists()
        assert not (workdir / "jobs" / str(a) / "bundle.zip").exists()

        server = Server(
            workdir, port=server.port, args=server.args
        ).start()  # same secret: the session survives the restart
        s = state(client, a)
        assert s["status"] == "interrupted" and s["resumable"], s
        assert "resume" in s["error"]

        # the queue goes on with B; cancel it while it runs: its worker is killed
        wait_for(lambda: state(client, b)["status"] == "running", 30, "job B to start")
        (b_worker,) = wait_for(lambda: [r["pid"] for r in db.runs(b)], 10, "job B's worker")
        assert client.post(f"/jobs/{b}/cancel", data={"csrf_token": token}).status_code == 303
        wait_for(lambda: state(client, b)["status"] == "cancelled", 30, "job B cancelled")
        assert not alive(b_worker)

        for job in (a, b):
            assert client.post(f"/jobs/{job}/resume", data={"csrf_token": token}).status_code == 303
        wait_for(lambda: state(client, b)["status"] in ("done", "failed"), 300, "jobs A and B to finish")
        assert [state(client, j)["status"] for j in (a, b, c)] == ["done", "done", "cancelled"]
        compared = client.get("/runs").text  # the runs page sets finished jobs side by side
        assert f'href="/jobs/{a}"' in compared and f'href="/jobs/{b}"' in compared
        assert f'href="/jobs/{c}"' not in compared and compared.count("PASSED") == 2
    finally:
        server.stop()

    # one at a time: every worker started after the one before had ended
    runs = db.runs()
    assert [(r["job_id"], r["outcome"]) for r in runs] == [
        (a, "interrupted"),
        (b, "cancelled"),
        (a, "done"),
        (b, "done"),
    ]
    for before, after in zip(runs, runs[1:]):
        assert before["finished"] <= after["started"], (before, after)

    # A resumed: teacher and labels kept, distillation picked up; the same student as B's uninterrupted run
    report_a = json.loads((workdir / "jobs" / str(a) / "result.json").read_text())["report"]
    report_b = json.loads((workdir / "jobs" / str(b) / "result.json").read_text())["report"]
    assert [(s["name"], s["status"]) for s in report_a["stages"]][:3] == [
        ("teacher", "skipped (up to date)"),
        ("label", "skipped (up to date)"),
        ("distill", "ran"),
    ]
    resumed = [_distill_report(workdir, job)["resumed"] for job in (a, b)]
    assert resumed == [True, False]  # A went on from its checkpoint; B (cancelled in its teacher stage) did not
    assert student_sha(workdir, a) == student_sha(workdir, b)
    assert report_a["accuracy"] == report_b["accuracy"]
    assert report_a["check"]["ok"] and report_b["check"]["ok"]
    leftovers = [p.name for p in (workdir / "jobs" / str(a) / "work").iterdir() if p.name.startswith(".")]
    assert leftovers == [], leftovers  # no staging folder or work directory of the killed attempt is left
