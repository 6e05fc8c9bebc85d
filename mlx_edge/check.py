"""`check_bundle`: verify an export bundle without a Mac, and report what failed.

No path outside the bundle is read (a manifest path or a symlink that leads out is refused). Names,
shapes and dtypes against the manifest; sha256 of every file; a Unigram bundle's tokenizer spec
against the tokenizer it rebuilds into (or its tokenizer.json, exported with --extras
tokenizer-json), the texts then tokenized from the spec as the app does; the labels and the
vocabulary against what the models record
(`bundle/trust.py`); the programs' weights against the student's; numeric alignment MLX student vs
PyTorch mirror vs ONNX Runtime vs the converted mlprogram (run op by op in NumPy, and by CoreML
itself on macOS); extreme inputs; the updatable head's spec and a NumPy simulation of MLUpdateTask on it.
The extras (Classifier.mlpackage, model.onnx) are checked when the manifest names them.
"""

from __future__ import annotations

from pathlib import Path

from bridges.checks import CheckResult, check_files, check_io
from mlx_edge.bundle.layout import manifest_problems, read_manifest, refuse_escapes
from mlx_edge.bundle.tokenizer_spec import check_tokenizer_spec
from mlx_edge.bundle.trust import check_labels, check_vocabulary, read_specs
from mlx_edge.bundle.verify import CheckReport, default_texts, load_student, verify_artifacts
from mlx_edge.errors import ModelError
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.runtime.devices import mlx_device


def format_report(report: CheckReport, *, failures_only: bool = False) -> str:
    """A plain-text table: status, check, detail; failures first when there are any."""
    rows = sorted(report.results, key=lambda r: r.ok) if not report.ok else report.results
    if failures_only:
        rows = [r for r in rows if not r.ok]
    width = max((len(r.name) for r in rows), default=5)
    lines = [f"{'status':<6}  {'check':<{width}}  detail"]
    for r in rows:
        status = "SKIP" if r.skipped else ("ok" if r.ok else "FAIL")
        lines.append(f"{status:<6}  {r.name:<{width}}  {r.detail}")
    d = report.to_dict()
    lines.append(f"{d['passed']} passed, {d['failed']} failed, {d['skipped']} skipped  ({report.bundle})")
    return "\n".join(lines)


def check_bundle(
    bundle_dir: Path,
    *,
    student_dir: Path | None = None,
    texts: list[str] | None = None,
    n_texts: int = 32,
    device: str = "auto",
) -> CheckReport:
    """Every check of `bundle_dir`. The student (for MLX/mirror parity and weights) is the one the
    manifest names, or `student_dir`; without it ONNX Runtime is the numeric reference (a bundle
    exported with `--extras onnx`), else the programs are checked only against themselves."""

    bundle = Path(bundle_dir)
    manifest = read_manifest(bundle)
    mlx_device(device)
    report = CheckReport(str(bundle))
    problems = manifest_problems(manifest)
    report.results.append(
        CheckResult(
            "manifest.schema",
            not problems,
            "; ".join(problems[:3]) or "manifest.json matches bundle_manifest.schema.json",
        )
    )
    if problems:
        return report  # the rest reads fields the schema guarantees
    refuse_escapes(bundle, manifest)  # BundleError before any file the manifest names is read
    report.results += check_files(bundle, manifest)
    report.results += check_io(bundle, manifest)
    report.results += check_tokenizer_spec(bundle, manifest)
    student, mirror, result = load_student(manifest, student_dir)
    report.results.append(result)
    specs = read_specs(bundle, manifest)
    report.results.append(check_labels(manifest, specs, student.config.labels if student is not None else None))
    report.results.append(check_vocabulary(bundle, manifest, specs))
    try:
        tokenizer = load_tokenizer(bundle)
    except ModelError as exc:  # e.g. a spec that no longer rebuilds: nothing left to run the programs on
        report.results.append(
            CheckResult("tokenizer.load", False, f"the bundle's tokenizer cannot be read: {exc.message}")
        )
        return report
    texts = texts if texts is not None else default_texts(n_texts)
    report.results += verify_artifacts(
        bundle, manifest, student=student, mirror=mirror, tokenizer=tokenizer, texts=texts
    )
    return report
