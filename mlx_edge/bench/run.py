"""`bench(...)`: every workload on every backend present, same weights and inputs, then the verdicts."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mlx_edge.bench import measure  # the submodule, not the package
from mlx_edge.bench.backends import select, unavailable_reason
from mlx_edge.bench.mlx_runner import MlxRunner
from mlx_edge.bench.ort_runner import CoreMLRunner, OrtRunner
from mlx_edge.bench.torch_runner import TorchRunner
from mlx_edge.bench.workloads import DEFAULT_KINDS, make_inputs, plan, prepare_models, workload_flops
from mlx_edge.settings import BENCH, DEMO_TEACHER, PIPELINE

SCHEMA_VERSION = 1


def bench(
    *,
    model: str = BENCH.model,
    backends: list[str] | None = None,
    workloads=DEFAULT_KINDS,
    seq_lens=BENCH.seq_lens,
    infer_batches=BENCH.infer_batches,
    train_batch: int = BENCH.train_batch,
    train_seq: int | None = BENCH.train_seq,
    warmup: int = BENCH.warmup,
    repeats: int = BENCH.repeats,
    min_s: float = BENCH.min_s,
    budget_s: float = BENCH.budget_s,
    matmul_n: int | None = BENCH.matmul_n,
    threads: int | None = BENCH.threads,
    teacher: Path | None = None,
    seed: int = BENCH.seed,
    work_dir: Path | None = None,
    pipeline_limit: int | None = None,
    pipeline_bundles: tuple[str, ...] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Run every workload on every backend present; returns the JSON-ready report.

    Report keys: model (shapes, params), machine (CPU, load, thread variables), backends (version,
    device, threads), skipped [{backend, reason}], peak_matmul {backend: {n, flops_per_s} | None},
    workloads [{name, kind, batch, seq, flops, fastest, results: [{backend, status (ok | disagrees |
    unsupported | failed), median_s, min_s, max_s, spread, times_s, samples_per_s, latency_ms,
    flops_per_s, roofline_pct, ratio (ok only), memory {rss_delta_bytes, device_peak_bytes,
    device_peak_kind}, agreement {agrees, reference, max_abs_diff}, reason}]}], disagreements,
    settings, wall_s; and with the `pipeline` workload, pipeline (pipeline_minutes).
    """
    log = log or (lambda _msg: None)
    started = time.perf_counter()
    _passive_openmp()
    threads = threads or os.cpu_count() or 1
    planned = plan(
        workloads, seq_lens=seq_lens, infer_batches=infer_batches, train_batch=train_batch, train_seq=train_seq
    )
    specs = select(backends)
    machine = measure.machine_info()
    with tempfile.TemporaryDirectory(prefix="mlx-edge-bench-") as tmp:
        work = Path(work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        models, runners, skipped = None, {}, []
        if planned:  # the pipeline alone needs neither the random models nor the backends
            log(f"preparing models ({model}) in {work}")
            models = prepare_models(model, work, teacher=teacher, seed=seed)
        for spec in specs if planned else ():
            reason = unavailable_reason(spec)
            if reason is None:
                try:
                    runners[spec.name] = create_runner(spec, models, work, threads=threads)
                except Exception as exc:  # a backend that is present but cannot start is reported, not fatal
                    reason = f"failed to start: {type(exc).__name__}: {exc}"
            if reason is not None:
                skipped.append({"backend": spec.name, "reason": reason})
                log(f"skip {spec.name}: {reason}")
        peaks = {name: _peak(runner, matmul_n, log) for name, runner in runners.items()}
        rows = []
        for workload in planned:
            inputs = make_inputs(workload, models.student.vocab_size, models.student.num_labels, seed)
            flops = workload_flops(workload, models.student, models.teacher)
            entries, checks = {}, {}
            for name, runner in runners.items():
                entry, check = _run_one(runner, workload, inputs, warmup, (repeats, min_s, budget_s), log)
                entries[name] = entry
                if check is not None:
                    checks[name] = check
            rows.append(_finish(workload, flops, entries, measure.compare(checks) if checks else {}, peaks))
        info = {name: runner.info() for name, runner in runners.items()}
        pipeline = (
            pipeline_minutes(
                work / "pipeline", limit=pipeline_limit, teacher=teacher, bundles=pipeline_bundles, log=log
            )
            if "pipeline" in workloads
            else None
        )
    machine["load_average_after"] = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "schema_version": SCHEMA_VERSION,
        "model": {
            "name": model,
            "description": models.description,
            "student": _shape(models, "student"),
            "teacher": _shape(models, "teacher"),
        }
        if models is not None
        else None,
        "machine": machine,
        "backends": info,
        "skipped": skipped,
        "peak_matmul": peaks,
        "workloads": rows,
        "disagreements": [
            {
                "workload": r["name"],
                "backend": e["backend"],
                "reference": e["agreement"]["reference"],
                "max_abs_diff": e["agreement"]["max_abs_diff"],
            }
            for r in rows
            for e in r["results"]
            if e["status"] == "disagrees"
        ],
        "settings": {
            "warmup": warmup,
            "repeats": repeats,
            "min_s": min_s,
            "budget_s": budget_s,
            "threads": threads,
            "seed": seed,
            "rtol": measure.RTOL,
            "atol": measure.ATOL,
        },
        **({"pipeline": pipeline} if pipeline is not None else {}),
        "wall_s": time.perf_counter() - started,
    }


def pipeline_minutes(
    out: Path,
    *,
    limit: int | None = None,
    teacher: Path | None = None,
    bundles: tuple[str, ...] | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> dict:
    """The demo's pipeline (`mlx-edge demo`: the shipped to-do data, every stage at its defaults) run
    once into `out`, and the minutes of each stage: {data, limit, teacher, bundles, stages: [{name,
    status, minutes}], total_minutes, check_ok}. `limit`: rows per split (None: all, the demo);
    `teacher`: the model to fine-tune (None: the demo's)."""
    from mlx_edge.demo import demo_config  # lazy: the pipeline's stack loads only for this row
    from mlx_edge.pipeline import run_pipeline  # lazy: as above

    config = demo_config(
        out=out, teacher=teacher or DEMO_TEACHER, limit=limit, bundles=tuple(bundles or PIPELINE.bundles)
    )
    log(f"pipeline: the demo's stages into {out}")
    report = run_pipeline(config, progress=False, log=log)
    return {
        "data": "the shipped to-do data",
        "limit": limit,
        "teacher": str(teacher or DEMO_TEACHER),
        "bundles": list(config.bundles),
        "stages": [{"name": s["name"], "status": s["status"], "minutes": s["seconds"] / 60} for s in report["stages"]],
        "total_minutes": report["seconds"] / 60,
        "check_ok": None if report["check"] is None else bool(report["check"]["ok"]),
    }


def _passive_openmp() -> None:
    """OpenMP threads that sleep rather than spin while idle, unless the user chose otherwise.

    PyTorch's spinning OpenMP workers made small CPU steps 30-200x slower on a 2-core machine shared
    with other work (a worker loses its core and every parallel region waits for it); idle
    spinning also steals the cores the next backend is timed on. Takes effect only if torch is not
    loaded yet; the report records the setting.
    """

    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _shape(models, which: str) -> dict:
    c = getattr(models, which)
    return {
        "layers": c.num_hidden_layers,
        "hidden": c.hidden_size,
        "heads": c.num_attention_heads,
        "ffn": c.intermediate_size,
        "vocab": c.vocab_size,
        "labels": c.num_labels,
        "act": c.hidden_act,
        "params": models.params(which),
    }


def matmul_size(spec, override: int | None = None) -> int:
    """n of the peak n x n x n matmul: big enough to reach the backend's peak, small enough to be quick."""
    return override or (4096 if spec.gpu else 1024)


def _peak(runner, matmul_n: int | None, log) -> dict | None:
    n = matmul_size(runner.spec, matmul_n)
    try:
        step = runner.matmul(n)
        if step is None:
            return None
        value = measure.peak_matmul_flops(step, n)
    except Exception as exc:  # the roofline column is then left empty for this backend
        log(f"{runner.spec.name}: peak matmul failed ({exc})")
        return None
    log(f"{runner.spec.name}: peak matmul {value / 1e9:.1f} GFLOP/s (n={n})")
    return {"n": n, "flops_per_s": value}


def _run_one(runner, workload, inputs, warmup, timing, log):
    repeats, min_s, budget_s = timing
    name = runner.spec.name
    entry = {"backend": name}
    reason = runner.supports(workload)
    if reason is not None:
        return {**entry, "status": "unsupported", "reason": reason}, None
    try:
        task = runner.build(workload, inputs)  # loading and exporting are not part of the workload's memory
        path = getattr(runner, "path", {}).get(workload.name)  # the product path and settings, where known
        if path:
            entry["path"] = path
        runner.reset_peak()
        with measure.ResidentPeak() as rss:
            check = task.check()
            times = measure.time_steps(task.step, warmup=warmup, repeats=repeats, min_s=min_s, budget_s=budget_s)
            device_peak = runner.device_peak()
        del task
    except Exception as exc:  # one backend failing one workload must not sink the run
        log(f"{name} {workload.name}: failed ({type(exc).__name__}: {exc})")
        return {**entry, "status": "failed", "reason": f"{type(exc).__name__}: {exc}"}, None
    stats = measure.summarize(times)
    log(f"{name:<16} {workload.name:<22} {stats['median_s'] * 1e3:9.1f} ms  (x{stats['repeats']})")
    entry.update(
        status="ok",
        **stats,
        memory={
            "rss_delta_bytes": rss.delta,
            "rss_exact": rss.exact,
            "device_peak_bytes": device_peak,
            "device_peak_kind": runner.memory_kind if device_peak is not None else None,
        },
    )
    return entry, check


def _finish(workload, flops: float, entries: dict, verdicts: dict, peaks: dict) -> dict:
    """Agreement, throughput, roofline and the ratio to the fastest agreeing backend."""
    for name, entry in entries.items():
        if entry["status"] != "ok":
            continue
        verdict = verdicts.get(name, {"agrees": True, "reference": None, "max_abs_diff": 0.0})
        entry["agreement"] = verdict
        if not verdict["agrees"]:
            entry["status"] = "disagrees"
        median = entry["median_s"]
        entry["samples_per_s"] = workload.batch / median
        entry["latency_ms"] = median * 1e3
        entry["flops_per_s"] = flops / median
        peak = peaks.get(name)
        entry["roofline_pct"] = 100.0 * entry["flops_per_s"] / peak["flops_per_s"] if peak else None
    ranked = sorted((e for e in entries.values() if e["status"] == "ok"), key=lambda e: e["median_s"])
    for entry in ranked:
        entry["ratio"] = entry["median_s"] / ranked[0]["median_s"]
    return {
        **workload.to_dict(),
        "flops": flops,
        "fastest": ranked[0]["backend"] if ranked else None,
        "results": list(entries.values()),
    }


def create_runner(spec, models, work, *, threads: int):
    """The runner object for an available backend."""
    if spec.framework == "mlx":
        return MlxRunner(spec, models)
    if spec.framework == "torch":
        return TorchRunner(spec, models, threads=threads)
    if spec.framework == "onnxruntime":
        return OrtRunner(spec, models, work, threads=threads)
    return CoreMLRunner(spec, models, work)
