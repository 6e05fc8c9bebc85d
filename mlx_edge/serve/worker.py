"""`python -m mlx_edge.serve.worker JOB_DIR`: one attempt at one job, in a process of its own.

The server writes JOB_DIR/job.json (kind, params, database, attempt) and starts this. A distillation
job runs `mlx-edge run`'s pipeline (mlx_edge.pipeline.run_pipeline, not a copy) with its workspace in
JOB_DIR/work, then zips each bundle of its ladder (bundle-fp16.zip, bundle-int8.zip, ...); an adapt job runs mlx_edge.augment.adapt.adapt (mlx-lm's LoRA
trainer) into JOB_DIR/adapter. Exit 0: done (result.json written last); else error.txt says why.
The worker exits when the server that started it dies, and holds JOB_DIR/.lock while it works, so a
resumed attempt never overlaps one that is still going away.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
import time
import traceback
import zipfile
from contextlib import contextmanager
from pathlib import Path

from mlx_edge import ladder
from mlx_edge import progress as progress_events
from mlx_edge.demo import demo_config
from mlx_edge.errors import MlxEdgeError
from mlx_edge.fileio import atomic_write_json, atomic_write_text
from mlx_edge.pipeline import PipelineConfig, format_report, run_pipeline, stage_settings, transfer_counts
from mlx_edge.runtime.devices import mlx_device, torch_placement
from mlx_edge.serve.db import Database
from mlx_edge.serve.forms import current_params
from mlx_edge.serve.jobs import ERROR_NAME
from mlx_edge.serve.reporter import EPOCH_FILES, Reporter

ADAPTER_ZIP, RESULT_NAME = "adapter.zip", "result.json"
PARENT_POLL_S = 0.5


def pipeline_config(params: dict, directory: Path, uploads: dict[str, str]) -> PipelineConfig:
    """The demo's recipe (mlx_edge/demo.py) with the job's data, teacher, student, epochs, rates and bundles."""
    params = current_params(params)
    config = demo_config(
        out=directory / "work",
        teacher=params["teacher"],
        limit=params["limit"] if params["data"] == "todo" else None,
        device=params["device"],
        teacher_epochs=params["teacher_epochs"],
        distill_epochs=params["distill_epochs"],
        bundles=tuple(params["bundles"]),
        augment=params["augment_per_class"],
        augment_llm=params["augment_llm"],
    )
    if params["data"] == "upload":
        config.train = Path(uploads["train"])
        config.dev = Path(uploads["dev"]) if uploads.get("dev") else None
        config.test = Path(uploads["test"]) if uploads.get("test") else None
    if uploads.get("unlabeled"):  # a transfer set, with the shipped data too
        config.unlabeled = (Path(uploads["unlabeled"]),)
    config.teacher_edits = params["teacher_edits"]
    config.broad_text = params["broad_text"]
    if params["teacher_max_length"] is not None:  # else auto, the default
        config.teacher["max_length"] = params["teacher_max_length"]
    config.teacher["learning_rate"] = params["teacher_learning_rate"]
    config.distill["student"] = params["distill_student"]
    if params["distill_learning_rate"] is not None:  # else auto, the default
        config.distill["learning_rate"] = params["distill_learning_rate"]
    return config


def stage_names(config: PipelineConfig) -> list[str]:
    """The pipeline's stages for this config, in the order it runs them (mlx_edge/pipeline.py run_pipeline)."""
    settings = stage_settings(config, "distill")
    distill = ["distill"] if ladder.needs_student(config.bundles, settings) else []  # the student the kinds start from
    steps = [step.name for rung in ladder.rungs(config.bundles, settings) for step in rung.steps]
    edits, broad = transfer_counts(config)
    optional = [name for name, on in (("augment", config.augment), ("edits", edits), ("broad", broad)) if on]
    return ["teacher", *optional, "label", *distill, *steps, "check"]


def epoch_files(config: PipelineConfig) -> dict[str, tuple[str, ...]]:
    """Where each training stage writes its per-epoch metrics: the ladder's distillations as [distill]'s."""
    files = dict(EPOCH_FILES)
    for rung in ladder.rungs(config.bundles, stage_settings(config, "distill")):
        for step in rung.steps:
            if not step.export:
                files[step.name] = (f".{step.output}.work/metrics.jsonl", f"{step.output}/metrics.jsonl")
    return files


def bundle_zip(kind: str) -> str:
    return f"bundle-{kind}.zip"


def zip_bundles(report: dict, directory: Path) -> dict[str, str]:
    """Each bundle of the report zipped in `directory`: kind → zip name (in the ladder's order)."""
    downloads = {}
    for row in report["bundles"]:
        zip_directory(Path(row["path"]), directory / bundle_zip(row["bundle"]))
        downloads[row["bundle"]] = bundle_zip(row["bundle"])
    return downloads


def run_distill_job(spec: dict, directory: Path, db: Database) -> dict:
    params = spec["params"]
    config = pipeline_config(params, directory, params.get("uploads", {}))
    reporter = Reporter(
        db, spec["job_id"], spec["attempt"], stage_names(config), out=config.out, epoch_files=epoch_files(config)
    )
    reporter.set(device=describe_devices(config.device))
    reporter.flush()

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        reporter.on_log(line)

    progress_events.set_observer(reporter.on_bar)
    try:
        report = run_pipeline(config, progress=False, log=log)
    finally:
        progress_events.set_observer(None)
    reporter.stages.update({k: "done" for k, v in reporter.stages.items() if v == "running"})
    reporter.stage, reporter.fraction = None, 1.0
    reporter.flush()
    downloads = zip_bundles(report, directory)
    shipped = report.get("recommended") or next(iter(downloads))  # /jobs/<id>/download serves this one
    return {
        "kind": "distill",
        "report": report,
        "text": format_report(report),
        "download": downloads[shipped],
        "downloads": downloads,
    }


def run_adapt_job(spec: dict, directory: Path, db: Database) -> dict:
    from mlx_edge.augment.adapt import adapt  # lazy: mlx-lm's trainer, which distillation jobs never need

    params = spec["params"]
    reporter = Reporter(db, spec["job_id"], spec["attempt"], ["adapt"])
    reporter.on_log("[adapt] running")
    reporter.set(device=f"MLX {_mlx_name('auto')}")
    reporter.flush()

    def on_step(event: dict) -> None:
        reporter.fraction = event["step"] / max(1, event["total_steps"])
        reporter.detail = f"step {event['step']}/{event['total_steps']}"
        values = {k: event[k] for k in ("loss", "tokens_per_second", "learning_rate") if event.get(k) is not None}
        if event.get("peak_memory_gb") is not None:
            values["peak_memory_mb"] = event["peak_memory_gb"] * 1024
        reporter.record("adapt", values, event["step"])
        reporter.maybe_flush()

    result = adapt(
        model=params["model"],
        data=Path(params["uploads"]["data"]),
        out=directory / "adapter",
        rank=params["rank"],
        epochs=params["epochs"],
        batch_size=params["batch_size"],
        learning_rate=params["learning_rate"],
        max_seq_length=params["max_seq_length"],
        on_step=on_step,
        progress=False,
        force=True,  # a resumed job starts its adapter over: the last attempt left nothing in place
    )
    reporter.on_log("[adapt] done")
    zip_directory(directory / "adapter", directory / ADAPTER_ZIP)
    return {"kind": "adapt", "report": result.summary(), "download": ADAPTER_ZIP}


def describe_devices(preference: str) -> str:
    """Where the stages will compute, resolved as they resolve it: PyTorch for the teacher, MLX for the student."""
    return f"teacher: PyTorch {torch_placement(preference).device} · student: MLX {_mlx_name(preference)}"


def _mlx_name(preference: str) -> str:
    import mlx.core as mx  # lazy: only once the worker knows it needs MLX

    return "gpu" if mlx_device(preference, set_default=False) == mx.gpu else "cpu"


def zip_directory(source: Path, target: Path) -> None:
    """A zip of `source` (paths relative to its parent), written beside `target` and renamed into place."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(source.parent))
    os.replace(tmp, target)


def _named(message: str, params: dict) -> str:
    """An error about an uploaded file names it as the user did, not by its stored name."""
    for key, path in params.get("uploads", {}).items():
        message = message.replace(path, f"{params.get('files', {}).get(key, 'the upload')} ({key} file)")
    return message


def _exit_with_parent(server_pid: int) -> None:
    """A thread that ends this process when the server that started it is gone (killed or crashed)."""

    def watch():
        while True:
            if os.getppid() != server_pid:
                os._exit(3)
            time.sleep(PARENT_POLL_S)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


@contextmanager
def _exclusive(path: Path):
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # waits for a previous attempt's worker to be gone
        yield


def main(argv: list[str]) -> int:
    directory = Path(argv[0])
    spec = json.loads((directory / "job.json").read_text(encoding="utf-8"))
    _exit_with_parent(spec["server_pid"])
    db = Database(Path(spec["db"]))
    with _exclusive(directory / ".lock"):
        (directory / RESULT_NAME).unlink(missing_ok=True)
        try:
            run = run_distill_job if spec["kind"] == "distill" else run_adapt_job
            result = run(spec, directory, db)
        except MlxEdgeError as error:  # the user's to fix: one line, as the CLI would print it
            message = _named(str(error), spec["params"])
            atomic_write_text(directory / ERROR_NAME, f"{message}\n")
            print(f"Error: {message}", file=sys.stderr)
            return 2
        except Exception as error:
            traceback.print_exc()
            atomic_write_text(directory / ERROR_NAME, f"unexpected error: {error!r} (the log has the traceback)\n")
            return 1
        atomic_write_json(directory / RESULT_NAME, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
