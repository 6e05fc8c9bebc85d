"""The static-embedding student on the shipped to-do data: accuracy, bundle size, per-sentence speed.

    nice -n 10 .venv/bin/python benchmarks/static_student.py --teacher TEACHER --targets TARGETS \\
        --tiny TINY_STUDENT [--out /tmp/static-bench] [--only static-64,static-64-frozen] [--json]

TEACHER and TARGETS: the to-do teacher and its targets cache (docs/results.md "Students on the to-do data"); TINY_STUDENT:
a trained 4-layer `tiny` student of the same teacher (the demo's), the one timed against.
Each setting runs `distill_static` (the library call behind `mlx-edge distill --student static`),
exports the default bundle (lean, fp16) and an int8 one, checks both (`check_bundle`), and scores
the student on dev and test (English and Chinese apart) through `predict`'s path. Then the
per-sentence CPU latency, batch 1, of the first setting's student and of TINY_STUDENT, each through
MLX (models/inference.Latency: the compiled single-sentence path an app request takes in MLX) and
through its exported program's PyTorch mirror (what coremltools converted): every dev sentence at
its own length, one warm-up pass, then `--repeats` passes; the median over sentences x passes.
Tokenizing is timed apart (the same tokenizer kind for both). About 2 min per setting on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx_edge  # noqa: E402,F401  (loads OpenBLAS before mlx: without it MLX's CPU matmuls crawl)
from mlx_edge.fileio import disk_bytes  # noqa: E402

SETTINGS = {  # name: distill_static arguments; the rest at `--student static`'s defaults (static_settings.py)
    "static": {},
    "static-64": {"dim": 64},
    "static-no-extra": {"vocab_extra": 0},
    "static-context": {"table_from": "context"},
    "static-frozen": {"freeze_table": True},
    "static-context-frozen": {"freeze_table": True, "table_from": "context"},
}
TODO = Path(__file__).resolve().parents[1] / "mlx_edge" / "datasets" / "todo"


def scores(model: Path, split: str) -> dict[str, float]:
    """Accuracy on a to-do split through `predict`'s path, overall and per language."""
    from mlx_edge.data import read_labeled
    from mlx_edge.predict import predict_texts

    path = TODO / f"{split}.jsonl"
    data = read_labeled(path)
    langs = [json.loads(line)["lang"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    probs = predict_texts(model, data.texts, max_length=64).probabilities
    right = [max(p, key=p.get) == label for p, label in zip(probs, data.labels)]
    out = {"all": sum(right) / len(right)}
    for lang in ("en", "zh"):
        picked = [r for r, lg in zip(right, langs) if lg == lang]
        out[lang] = sum(picked) / len(picked)
    return out


def run_setting(name: str, args, out: Path) -> dict:
    from mlx_edge.check import check_bundle
    from mlx_edge.distill.static import distill_static
    from mlx_edge.export import export_bundle

    student = out / name
    started = time.perf_counter()
    report = distill_static(
        teacher=args.teacher,
        train=TODO / "train.jsonl",
        dev=TODO / "dev.jsonl",
        targets=args.targets,
        out=student,
        force=True,
        progress=False,
        **SETTINGS[name],
    )
    seconds = time.perf_counter() - started
    row = {
        "setting": name,
        "options": SETTINGS[name],
        "distill_seconds": round(seconds, 1),
        "teacher_dev": report.teacher_dev_accuracy,
        "dev": scores(student, "dev"),
        "test": scores(student, "test"),
        "agreement": report.agreement,
        "best_epoch": report.best_epoch,
        "vocab": json.loads((student / "config.json").read_text())["vocab_size"],
        "parameters": report.student_parameters,
    }
    row["retained"] = row["dev"]["all"] / report.teacher_dev_accuracy
    for mode in ("none", "int8"):
        bundle = out / f"{name}-bundle-{mode}"
        result = export_bundle(student_dir=student, out_dir=bundle, quantize=mode, force=True, progress=False)
        check = check_bundle(bundle)
        row[f"bundle_{mode}"] = {
            "bytes": result.total_bytes,
            "files": {p.name: disk_bytes(p) for p in sorted(bundle.iterdir())},
            "check_passed": check.ok,
            "check_failed": [f"{r.name}: {r.detail}" for r in check.failed],
        }
    return row


def _median_ms(fn, inputs, repeats: int) -> float:
    for item in inputs:  # warm-up: compiles each length once, grows allocators
        fn(*item)
    times = []
    for _ in range(repeats):
        for item in inputs:
            start = time.perf_counter()
            fn(*item)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def latency(student: Path, bundle: Path, texts: list[str], repeats: int) -> dict:
    """Per-sentence milliseconds, batch 1: tokenizing, MLX (compiled), the bundle's PyTorch mirror."""
    import numpy as np
    import torch

    from bridges.torch_mirror import load_mirror, read_student_weights
    from mlx_edge.manifest import read_manifest
    from mlx_edge.models.checkpoint import load_config, load_model
    from mlx_edge.models.inference import Latency
    from mlx_edge.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(student)
    max_length = (read_manifest(student) or {}).get("max_length", 64)
    ids = [np.asarray(x, np.int32)[None, :] for x in tokenizer.encode_batch(texts, max_length=max_length)]
    inputs = [(x, np.ones_like(x)) for x in ids]
    tokenize_ms = _median_ms(lambda t: tokenizer.encode_batch([t], max_length=max_length), [(t,) for t in texts], 1)
    model = load_model(student, require_head=True)
    mlx_ms = _median_ms(Latency(model), inputs, repeats)
    mirror = load_mirror(read_student_weights(student), load_config(student), source=student)

    def run_mirror(i, m):
        with torch.no_grad():
            return mirror(torch.from_numpy(i), torch.from_numpy(m))

    mirror_ms = _median_ms(run_mirror, inputs, repeats)
    return {
        "tokenize_ms": tokenize_ms,
        "mlx_ms": mlx_ms,
        "mirror_ms": mirror_ms,
        "bundle_bytes": disk_bytes(bundle) if bundle is not None and bundle.is_dir() else None,
        "mean_tokens": float(np.mean([x.shape[1] for x in ids])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", type=Path, required=True)
    parser.add_argument("--targets", type=Path, required=True)
    parser.add_argument("--tiny", type=Path, required=True, help="a trained 4-layer tiny student, timed against")
    parser.add_argument("--tiny-bundle", type=Path, default=None, help="its exported bundle (for its size)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/static-bench"))
    parser.add_argument("--only", default=None, help=f"comma list of {', '.join(SETTINGS)}")
    parser.add_argument("--sentences", type=int, default=200, help="dev sentences timed")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(SETTINGS)
    args.out.mkdir(parents=True, exist_ok=True)

    import torch

    from mlx_edge.data import read_labeled

    rows = []
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        rows.append(run_setting(name, args, args.out))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    texts = read_labeled(TODO / "dev.jsonl").texts[: args.sentences]
    timing = {
        names[0]: latency(args.out / names[0], args.out / f"{names[0]}-bundle-none", texts, args.repeats),
        "tiny": latency(args.tiny, args.tiny_bundle, texts, args.repeats),
    }
    result = {
        "rows": rows,
        "latency": timing,
        "speedup_mlx": timing["tiny"]["mlx_ms"] / timing[names[0]]["mlx_ms"],
        "speedup_mirror": timing["tiny"]["mirror_ms"] / timing[names[0]]["mirror_ms"],
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "cpus": os.cpu_count(),
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=2))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print_tables(result)


def print_tables(result: dict) -> None:
    print(
        "| setting | dev (en / zh) | % of teacher | agreement | test (en / zh) | pieces | bundle fp16 | bundle int8 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in result["rows"]:
        d, t = r["dev"], r["test"]
        fp16, int8 = r["bundle_none"], r["bundle_int8"]
        print(
            f"| {r['setting']} | {d['all']:.1%} ({d['en']:.1%} / {d['zh']:.1%}) | {r['retained']:.1%} | "
            f"{r['agreement']:.1%} | {t['all']:.1%} ({t['en']:.1%} / {t['zh']:.1%}) | {r['vocab']:,} | "
            f"{fp16['bytes'] / 1e6:.2f} MB{'' if fp16['check_passed'] else ' (check FAILED)'} | "
            f"{int8['bytes'] / 1e6:.2f} MB{'' if int8['check_passed'] else ' (check FAILED)'} |"
        )
    print()
    print("| model | tokens (mean) | tokenize | MLX, compiled | PyTorch mirror | bundle |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, t in result["latency"].items():
        bundle = f"{t['bundle_bytes'] / 1e6:.2f} MB" if t["bundle_bytes"] else "-"
        print(
            f"| {name} | {t['mean_tokens']:.1f} | {t['tokenize_ms'] * 1e3:.0f} µs | {t['mlx_ms'] * 1e3:.0f} µs | "
            f"{t['mirror_ms'] * 1e3:.0f} µs | {bundle} |"
        )
    print(
        f"\nstatic vs tiny, per sentence: {result['speedup_mlx']:.1f}x faster in MLX, "
        f"{result['speedup_mirror']:.1f}x through the mirrors (torch threads {result['torch_threads']}, "
        f"OMP_WAIT_POLICY {result['omp_wait_policy']}, {result['cpus']} CPUs)"
    )


if __name__ == "__main__":
    main()
