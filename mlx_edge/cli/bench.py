"""`mlx-edge bench`: a thin click layer over mlx_edge.bench. Only click is imported at module level."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from mlx_edge.cli.options import FiniteFloatRange, echo_err, renamed
from mlx_edge.errors import BENCH_DISAGREEMENT
from mlx_edge.settings import BENCH, BUNDLE_KINDS

# Repeated from mlx_edge.bench so that `--help` imports nothing but click.
BACKEND_NAMES = (
    "mlx-metal",
    "mlx-cuda",
    "mlx-cpu",
    "torch-mps",
    "torch-cuda",
    "torch-cpu",
    "onnxruntime-cpu",
    "coreml-cpu",
    "coreml-gpu",
    "coreml-ane",
    "coreml-all",
    "mlx",
    "torch",
    "coreml",
)
# bench/workloads.py's KINDS, then ALIASES (written out: --help imports no MLX; tests/test_bench.py compares)
WORKLOAD_KINDS = ("infer", "train", "teacher-train", "distill", "distill-live", "label", "pipeline", "distill-cached")


def _int_list(ctx, param, value):
    try:
        numbers = tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers") from None
    if not numbers or min(numbers) < 1:
        raise click.BadParameter(f"{value!r}: give positive integers, e.g. 32,128")
    return numbers


def _names(allowed):
    def callback(ctx, param, value):
        if value is None:
            return None
        names = [x.strip() for x in value.split(",") if x.strip()]
        bad = [n for n in names if n not in allowed]
        if bad:
            raise click.BadParameter(f"unknown {', '.join(bad)}; choose from {', '.join(allowed)}")
        return names

    return callback


@click.command()
@click.option(
    "--model",
    default=BENCH.model,
    show_default=True,
    help="tiny | small (random students, MiniLM vocab, 6 labels) | base (BERT-base shape) | an HF BERT DIR.",
)
@click.option(
    "--teacher",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Teacher DIR for the teacher-train/distill/label workloads (default: a random MiniLM-L6-shaped BERT, "
    "6x384), and the model the pipeline workload fine-tunes (default: the demo's).",
)
@click.option(
    "--backends",
    callback=_names(BACKEND_NAMES),
    default=None,
    help="Comma-separated backends (or mlx, torch, coreml); default: all, absent ones listed as skipped.",
)
@click.option(
    "--workloads",
    callback=_names(WORKLOAD_KINDS),
    default="infer,train,teacher-train,distill,label",
    show_default=True,
    help="Comma-separated workloads: " + ", ".join(WORKLOAD_KINDS[:-1]) + " (distill: from a targets cache, "
    "as mlx-edge run distills; distill-live: the teacher's forward in each step; distill-cached: distill; "
    "pipeline: the demo's stages end to end, minutes per stage, 13-16 min).",
)
@click.option(
    "--pipeline-limit",
    type=click.IntRange(10),
    default=None,
    help="The pipeline workload: rows per split of the to-do data (default: all, as the demo).",
)
@click.option(
    "--pipeline-bundles",
    callback=_names(BUNDLE_KINDS),
    default=None,
    help="The pipeline workload: the bundles to make (default: the demo's, every kind).",
)
@click.option(
    "--seq-lens",
    callback=_int_list,
    default=",".join(map(str, BENCH.seq_lens)),
    show_default=True,
    help="Sequence lengths of the inference workloads.",
)
@click.option(
    "--infer-batches",
    callback=_int_list,
    default=",".join(map(str, BENCH.infer_batches)),
    show_default=True,
    help="Batch sizes of the inference workloads (1 = latency, 32 = throughput).",
)
@renamed("--batch-sizes", "--infer-batches")
@click.option(
    "--train-batch",
    type=click.IntRange(1),
    default=BENCH.train_batch,
    show_default=True,
    help="Batch size of the train/teacher-train/distill/label workloads.",
)
@click.option(
    "--train-seq",
    type=click.IntRange(2),
    default=BENCH.train_seq,
    help="Sequence length of the train/teacher-train/distill/label workloads; default: the largest --seq-lens.",
)
@renamed("--train-seq-len", "--train-seq")
@click.option("--warmup", type=click.IntRange(0), default=BENCH.warmup, show_default=True, help="Untimed steps first.")
@click.option(
    "--repeats",
    type=click.IntRange(1),
    default=BENCH.repeats,
    show_default=True,
    help="Timed steps (more for short steps: see --min-s).",
)
@click.option(
    "--min-s",
    type=FiniteFloatRange(0.0),
    default=BENCH.min_s,
    show_default=True,
    help="Short steps keep repeating until this many seconds are timed, so a latency's median comes from "
    "many samples (0: exactly --repeats).",
)
@click.option(
    "--budget-s",
    type=FiniteFloatRange(0.1),
    default=BENCH.budget_s,
    show_default=True,
    help="Seconds of timed steps per workload and backend before repeats stop early.",
)
@renamed("--budget", "--budget-s")
@click.option(
    "--threads",
    type=click.IntRange(1),
    default=BENCH.threads,
    help="CPU threads for PyTorch and ONNX Runtime "
    "(default: all cores). MLX uses OpenBLAS's own setting (OPENBLAS_NUM_THREADS).",
)
@click.option(
    "--matmul-n",
    type=click.IntRange(16),
    default=BENCH.matmul_n,
    help="n of the n x n x n fp32 matmul whose FLOP/s is the peak (default 1024 on CPUs, 4096 on GPUs).",
)
@renamed("--matmul-size", "--matmul-n")
@click.option("--seed", type=int, default=BENCH.seed, show_default=True, help="Seed of the random weights and inputs.")
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the full report as JSON to this file ('-' for stdout instead of the table).",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write a PNG bar chart of samples/s (needs matplotlib: mlx-edge[plot]).",
)
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def bench(
    model,
    teacher,
    backends,
    workloads,
    pipeline_limit,
    pipeline_bundles,
    seq_lens,
    infer_batches,
    train_batch,
    train_seq,
    warmup,
    repeats,
    min_s,
    budget_s,
    threads,
    matmul_n,
    seed,
    json_path,
    plot_path,
    quiet,
):
    """Time the same model on every backend here: MLX, PyTorch, ONNX Runtime, CoreML.

    Same weights and inputs everywhere; outputs are compared before anything is ranked (a backend
    that disagrees is flagged). Reports median step time and spread, samples/s, the ratio to the
    fastest backend, achieved GFLOP/s as a share of the peak fp32 matmul measured on the same
    backend, and peak memory. Absent backends are listed as skipped with the reason.

    \b
    Examples:
      mlx-edge bench --model tiny
      mlx-edge bench --model small --backends mlx,torch --workloads infer,train --json bench.json
      mlx-edge bench --model ./student --plot bench.png
      mlx-edge bench --workloads pipeline --json minutes.json   # the demo's minutes per stage
    """

    from mlx_edge.bench import bench as run_bench  # lazy: --help stays instant
    from mlx_edge.bench import format_table, write_json, write_plot  # lazy: --help stays instant

    report = run_bench(
        model=model,
        teacher=teacher,
        backends=backends,
        workloads=tuple(workloads),
        seq_lens=seq_lens,
        infer_batches=infer_batches,
        train_batch=train_batch,
        train_seq=train_seq,
        warmup=warmup,
        repeats=repeats,
        min_s=min_s,
        budget_s=budget_s,
        threads=threads,
        matmul_n=matmul_n,
        seed=seed,
        pipeline_limit=pipeline_limit,
        pipeline_bundles=tuple(pipeline_bundles) if pipeline_bundles else None,
        log=None if quiet else (lambda msg: echo_err(msg)),
    )
    if plot_path is not None:
        write_plot(report, plot_path)
        echo_err(f"wrote {plot_path}", quiet)
    if json_path is not None and str(json_path) == "-":
        click.echo(json.dumps(report, indent=2, default=float))
        return
    if json_path is not None:
        write_json(report, json_path)
        echo_err(f"wrote {json_path}", quiet)
    click.echo(format_table(report))
    if report["disagreements"]:
        sys.exit(BENCH_DISAGREEMENT)  # results were printed, but backends computed different numbers
