"""The report three ways: a table for people (stdout), JSON for machines, a PNG bar chart."""

from __future__ import annotations

import json
from pathlib import Path

from mlx_edge.errors import EnvironmentProblem

HEADER = (
    f"{'workload':<20} {'backend':<16} {'median':>10} {'spread':>7} {'samples/s':>10} {'vs best':>8} "
    f"{'GFLOP/s':>8} {'% peak':>7} {'RSS+':>8} {'dev peak':>9}"
)


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _mb(value) -> str:
    return "-" if value is None else f"{value / 2**20:.0f} MB"


def _row(workload: str, e: dict) -> str:
    backend = e["backend"]
    if e["status"] in ("unsupported", "failed"):
        return f"{workload:<20} {backend:<16} {e['status']}: {e['reason']}"
    ratio = "fastest" if e.get("ratio") == 1.0 else (f"{e['ratio']:.2f}x" if "ratio" in e else "-")
    pct = "-" if e.get("roofline_pct") is None else f"{e['roofline_pct']:.1f}"
    line = (
        f"{workload:<20} {backend:<16} {_time(e['median_s']):>10} {e['spread'] * 100:>6.0f}% "
        f"{e['samples_per_s']:>10.1f} {ratio:>8} {e['flops_per_s'] / 1e9:>8.1f} {pct:>7} "
        f"{_mb(e['memory']['rss_delta_bytes']):>8} {_mb(e['memory']['device_peak_bytes']):>9}"
    )
    if e["status"] == "disagrees":
        a = e["agreement"]
        against = f"vs {a['reference']}" if a["reference"] else "no two backends agree"
        line += f"  DISAGREES (max |diff| {a['max_abs_diff']:.3g} {against}): not ranked"
    return line


def format_table(report: dict) -> str:
    m, model = report["machine"], report["model"]
    lines = []
    if model is not None:  # None: the pipeline workload alone
        s, t = model["student"], model["teacher"]
        lines.append(
            f"model {model['description']}: student {s['layers']}x{s['hidden']} ({s['params'] / 1e6:.1f}M params), "
            f"teacher {t['layers']}x{t['hidden']} ({t['params'] / 1e6:.1f}M)"
        )
    lines.append(
        f"machine: {m['processor']}, {m['cpus']} CPUs, {m['platform']}; load average "
        f"{_load(m.get('load_average'))} -> {_load(m.get('load_average_after'))}"
    )
    versions = []
    for name, info in report["backends"].items():
        extra = ", ".join(x for x in (info.get("blas"), info.get("threads") and f"{info['threads']} threads") if x)
        versions.append(f"{name} {info['version']}" + (f" ({extra})" if extra else ""))
    if versions:
        lines.append("backends: " + "; ".join(versions))
    peaks = [f"{name} {p['flops_per_s'] / 1e9:.1f}" for name, p in report["peak_matmul"].items() if p]
    if peaks:
        lines.append("peak fp32 matmul, GFLOP/s (% peak is against this): " + "; ".join(peaks))
    if report["workloads"]:
        lines += ["", HEADER]
    for row in report["workloads"]:
        order = sorted(row["results"], key=_order)
        for i, entry in enumerate(order):
            lines.append(_row(row["name"] if i == 0 else "", entry))
    choices = [
        (row["name"], row.get("fastest"), runs_it(row["kind"], row.get("fastest"))) for row in report["workloads"]
    ]
    choices = [c for c in choices if c[1]]
    if choices:
        lines += ["", "which backend (the fastest that agrees, per workload; what runs it in mlx-edge):"]
        lines += [f"  {name:<22} {fastest:<16} {command}" for name, fastest, command in choices]
    if report.get("pipeline"):
        lines += ["", *_pipeline_lines(report["pipeline"])]
    paths = [(row["name"], e) for row in report["workloads"] for e in row["results"] if e.get("path")]
    if paths:
        lines += ["", "paths (the code the product runs, and its settings):"]
        lines += [f"  {e['backend']:<16} {name:<22} {e['path']}" for name, e in paths]
    lines.append("")
    if report["workloads"]:
        lines.append(
            "vs best: step time over the fastest agreeing backend's. RSS+: the process's peak resident memory "
            "during the workload minus before it; dev peak: MLX allocator / CUDA allocator peak (MPS: driver)."
        )
    for item in report["skipped"]:
        lines.append(f"skipped {item['backend']}: {item['reason']}")
    for d in report["disagreements"]:
        lines.append(
            f"WARNING: {d['backend']} disagrees on {d['workload']} (max |diff| {d['max_abs_diff']:.3g}"
            f"{' vs ' + d['reference'] if d['reference'] else ''}); its timings are not ranked"
        )
    busy = max((m.get("load_average") or [0])[0], (m.get("load_average_after") or [0])[0])
    if m.get("cpus") and busy > m["cpus"]:
        hint = (
            ""
            if m.get("environment", {}).get("OMP_WAIT_POLICY", "").upper() == "PASSIVE"
            else "; PyTorch's spin-waiting OpenMP threads suffer most (set OMP_WAIT_POLICY=PASSIVE or --threads 1)"
        )
        lines.append(
            f"NOTE: load average {busy:.1f} > {m['cpus']} CPUs: other work shared the cores, so timings are noisy{hint}"
        )
    if m.get("environment"):
        lines.append("environment: " + " ".join(f"{k}={v}" for k, v in m["environment"].items()))
    lines.append(f"total {report['wall_s']:.0f} s")
    return "\n".join(lines)


# (workload kind, backend family) -> the mlx-edge command that runs that work on that backend
_COMMANDS = {
    ("infer", "mlx"): "mlx-edge predict --backend mlx",
    ("infer", "onnxruntime"): "mlx-edge predict --backend onnx",
    ("infer", "coreml"): "the app, with the bundle `mlx-edge export` writes",
    ("teacher-train", "mlx"): "mlx-edge teacher train --backend mlx",
    ("teacher-train", "torch"): "mlx-edge teacher train --backend torch",
    ("label", "mlx"): "mlx-edge teacher label --backend mlx",
    ("label", "torch"): "mlx-edge teacher label --backend torch",
    ("train", "mlx"): "mlx-edge distill",
    ("distill", "mlx"): "mlx-edge distill",
    ("distill-live", "mlx"): "mlx-edge distill (no --targets)",
}


def runs_it(kind: str, backend: str | None) -> str:
    """The mlx-edge command that runs a workload of `kind` on `backend` ("mlx-cpu", "onnxruntime-cpu", ...)."""
    if not backend:
        return "-"
    family = backend.split("-")[0]
    return _COMMANDS.get((kind, family), f"no mlx-edge command runs this on {family}")


def _pipeline_lines(p: dict) -> list[str]:
    rows = "all rows" if not p["limit"] else f"{p['limit']} rows per split"
    verdict = {True: "check PASSED", False: "check FAILED", None: "no check"}[p["check_ok"]]
    lines = [f"pipeline: the demo's stages on {p['data']} ({rows}), teacher {p['teacher']}, {', '.join(p['bundles'])}"]
    lines += [f"  {s['name']:<20} {s['minutes']:>6.1f} min  {s['status']}" for s in p["stages"]]
    lines.append(f"  {'total':<20} {p['total_minutes']:>6.1f} min  {verdict}")
    return lines


def _order(entry: dict):
    rank = {"ok": 0, "disagrees": 1, "failed": 2, "unsupported": 3}[entry["status"]]
    return rank, entry.get("median_s", 0.0)


def _load(values) -> str:
    return "?" if not values else "/".join(f"{v:.1f}" for v in values)


def write_json(report: dict, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=float) + "\n", encoding="utf-8")
    return path


def write_plot(report: dict, path: Path) -> Path:
    """One group of bars per workload: samples/s of every backend that ran (log scale), hatched if it disagrees."""
    try:
        import matplotlib  # lazy: optional (the plot extra)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: optional (the plot extra)
    except ImportError as exc:
        raise EnvironmentProblem(f"--plot needs matplotlib ({exc})", 'pip install "mlx-edge[plot]"') from None
    rows = report["workloads"]
    backends = sorted(
        {e["backend"] for r in rows for e in r["results"] if "samples_per_s" in e},
        key=lambda b: list(report["backends"]).index(b),
    )
    width = 0.8 / max(1, len(backends))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(rows) + 2), 4.5), dpi=100)
    for j, backend in enumerate(backends):
        xs, ys, hatches = [], [], []
        for i, row in enumerate(rows):
            entry = next((e for e in row["results"] if e["backend"] == backend and "samples_per_s" in e), None)
            if entry is not None:
                xs.append(i + (j - (len(backends) - 1) / 2) * width)
                ys.append(entry["samples_per_s"])
                hatches.append("//" if entry["status"] == "disagrees" else "")
        bars = ax.bar(xs, ys, width=width, label=backend)
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["name"] for r in rows], rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("samples/s (higher is better)")
    ax.set_title(f"mlx-edge bench: {report['model']['description']}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
