"""What a worker tells the page: the stage, a progress fraction, the curves, the device, peak memory.

The stages report through mlx_edge/progress.py's observer (every progress bar's position and postfix:
loss terms, samples/s) and the pipeline's log lines ("[distill] running → ..."); per-epoch dev
accuracy comes from the metrics.jsonl files the teacher and distill stages write. Everything is
buffered and written to the database at most every FLUSH_S seconds, so training never waits on it.
"""

from __future__ import annotations

import json
import re
import resource
import sys
import time
from pathlib import Path

from mlx_edge.serve.db import Database

FLUSH_S = 0.5
EPOCH_DESC = re.compile(r"epoch (\d+)/(\d+)")
STAGE_LINE = re.compile(r"^\[(\w[\w ]*)\] (running|up to date|done|verifying)")  # "[int4 qat] running → ..."
SPEED_NAMES = {"samples_s": "samples/s", "samples/s": "samples/s", "tokens_per_second": "tokens/s"}
# Per-epoch files: stage → (candidates while running and once finished, relative to the pipeline's out); the
# worker adds the ladder's distillations (worker.epoch_files).
EPOCH_FILES = {
    "teacher": (".teacher.*.partial/metrics.jsonl", "teacher/metrics.jsonl"),
    "distill": (".student.work/metrics.jsonl", "student/metrics.jsonl"),
}
EPOCH_NAMES = ("dev_accuracy",)


class Reporter:
    def __init__(
        self,
        db: Database,
        job_id: int,
        attempt: int,
        stages: list[str],
        out: Path | None = None,
        epoch_files: dict[str, tuple[str, ...]] = EPOCH_FILES,
    ):
        self.db, self.job_id, self.attempt, self.out = db, job_id, attempt, out
        self.epoch_files = epoch_files
        self.stages = {name: "pending" for name in stages}
        self.stage: str | None = None
        self.fraction = 0.0
        self.detail = ""
        self.speed: str | None = None
        self._rows: list[tuple[str, str, float, float]] = []
        self._epochs_seen: dict[str, int] = {}
        self._last_flush = 0.0
        self._fields: dict = {}

    # inputs
    def on_bar(self, event: dict) -> None:
        """mlx_edge.progress's observer: where the current stage's bar is, and its loss terms."""
        if self.stage is None:
            return
        total, n = max(1, event["total"] or 1), event["n"]
        match = EPOCH_DESC.search(event["desc"] or "")
        if match:
            epoch, epochs = int(match.group(1)), int(match.group(2))
            self.fraction = min(1.0, (epoch - 1 + n / total) / epochs)
            step = (epoch - 1) * total + n
            self.detail = f"epoch {epoch}/{epochs}, batch {n}/{total}"
        else:
            self.fraction, step = min(1.0, n / total), n
            self.detail = f"{event['desc']} {n}/{total}"
        if n > 0 and not event["closed"]:
            self.record(self.stage, event["values"], step)
        self.maybe_flush()

    def on_log(self, line: str) -> None:
        """The pipeline's log: a stage starts, is skipped or ends."""
        match = STAGE_LINE.match(line)
        if match is None:
            return
        name, what = match.groups()
        if what in ("running", "verifying"):
            self.stage, self.fraction, self.detail = name, 0.0, ""
            self.stages[name] = "running"
        else:
            self.stages[name] = "skipped" if what == "up to date" else "done"
            self._read_epochs(name)
            self.fraction = 1.0
        self.flush()

    def record(self, stage: str, values: dict, step: float) -> None:
        for name, value in values.items():
            name = SPEED_NAMES.get(name, name)
            if name in ("samples/s", "tokens/s"):
                self.speed = f"{value:,.1f} {name}"
            self._rows.append((stage, name, float(step), float(value)))

    def set(self, **fields) -> None:
        """Job fields to write with the next flush (device, ...)."""
        self._fields.update(fields)

    # output
    def progress(self) -> float:
        done = sum(1 for s in self.stages.values() if s in ("done", "skipped"))
        running = self.fraction if self.stage and self.stages.get(self.stage) == "running" else 0.0
        return min(1.0, (done + running) / max(1, len(self.stages)))

    def maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        for stage in self.epoch_files:
            if self.stages.get(stage) == "running":
                self._read_epochs(stage)
        rows, self._rows = self._rows, []
        if rows:
            self.db.add_metrics(self.job_id, self.attempt, rows)
        rss, mlx = peak_memory_mb()
        self.db.update_job(
            self.job_id,
            stage=self.stage,
            stages=self.stages,
            progress=self.progress(),
            detail=self.detail,
            speed=self.speed,
            peak_rss_mb=rss,
            peak_mlx_mb=mlx,
            **self._fields,
        )

    def _read_epochs(self, stage: str) -> None:
        """New lines of the stage's metrics.jsonl (the staging copy while it runs, the final one after)."""
        if self.out is None or stage not in self.epoch_files:
            return
        lines: list[str] = []
        for pattern in self.epoch_files[stage]:
            for path in sorted(self.out.glob(pattern)):
                found = path.read_text(encoding="utf-8").splitlines()
                lines = found if len(found) > len(lines) else lines
        seen = self._epochs_seen.get(stage, 0)
        for line in lines[seen:]:
            try:
                epoch = json.loads(line)
            except json.JSONDecodeError:  # a line being written: read it next time
                break
            self.record(stage, {k: epoch[k] for k in EPOCH_NAMES if k in epoch}, epoch["epoch"])
            seen += 1
        self._epochs_seen[stage] = seen


def peak_memory_mb() -> tuple[float, float | None]:
    """(this process's peak resident memory, MLX's peak allocation or None) in MB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_mb = rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux
    mx = sys.modules.get("mlx.core")  # only once a stage has imported it
    mlx_mb = None
    if mx is not None and hasattr(mx, "get_peak_memory"):
        mlx_mb = mx.get_peak_memory() / 2**20
    return rss_mb, mlx_mb
